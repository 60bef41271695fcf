package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fleet is a server, a cluster and helpers to run tasks on real agents.
type fleet struct {
	t       *testing.T
	srv     *testenv.Server
	c       *ecs.Client
	rt      runtime.Runtime
	image   string
	cluster string
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	rt := testenv.RequireDocker(t)
	f := &fleet{t: t, srv: testenv.StartServer(t, ""), rt: rt, image: testenv.BusyboxImage(t), cluster: "e2e"}
	f.c = f.srv.ECS()
	if _, err := f.c.CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String(f.cluster)}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fleet) register(family string, containers ...types.ContainerDefinition) string {
	f.t.Helper()
	out, err := f.c.RegisterTaskDefinition(context.Background(), &ecs.RegisterTaskDefinitionInput{Family: aws.String(family), ContainerDefinitions: containers})
	if err != nil {
		f.t.Fatalf("register %s: %v", family, err)
	}
	return aws.ToString(out.TaskDefinition.TaskDefinitionArn)
}

func (f *fleet) container(name string, cmd ...string) types.ContainerDefinition {
	return types.ContainerDefinition{Name: aws.String(name), Image: aws.String(f.image), Memory: aws.Int32(64), Command: cmd}
}

func (f *fleet) run(td string) string {
	f.t.Helper()
	out, err := f.c.RunTask(context.Background(), &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td)})
	if err != nil {
		f.t.Fatalf("run %s: %v", td, err)
	}
	if len(out.Tasks) != 1 {
		f.t.Fatalf("run %s: failures %+v", td, out.Failures)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	f.t.Cleanup(func() {
		f.c.StopTask(context.Background(), &ecs.StopTaskInput{Cluster: aws.String(f.cluster), Task: aws.String(arn)})
	})
	return arn
}

func (f *fleet) task(arn string) types.Task {
	f.t.Helper()
	out, err := f.c.DescribeTasks(context.Background(), &ecs.DescribeTasksInput{Cluster: aws.String(f.cluster), Tasks: []string{arn}})
	if err != nil || len(out.Tasks) != 1 {
		f.t.Fatalf("describe %s: %+v %v", arn, out, err)
	}
	return out.Tasks[0]
}

func (f *fleet) waitStatus(arn, status string, d time.Duration) types.Task {
	f.t.Helper()
	var last types.Task
	eventually(f.t, d, arn+" "+status, func() bool {
		last = f.task(arn)
		return aws.ToString(last.LastStatus) == status
	})
	return last
}

// labelled lists the containers of a task in the runtime.
func (f *fleet) containers(arn string) []runtime.Container {
	f.t.Helper()
	cs, err := f.rt.List(context.Background(), map[string]string{"com.capstan.task-arn": arn})
	if err != nil {
		f.t.Fatal(err)
	}
	return cs
}

func TestRunAndStopTaskOnDocker(t *testing.T) {
	f := newFleet(t)
	agents.Start(t, f.srv, f.cluster)
	td := f.register("sleeper", f.container("main", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	arn := f.run(td)
	task := f.waitStatus(arn, "RUNNING", 60*time.Second)
	cs := f.containers(arn)
	if len(cs) != 1 || cs[0].State != runtime.StateRunning || cs[0].ID != aws.ToString(task.Containers[0].RuntimeId) {
		t.Fatalf("runtime containers %+v, task container %+v", cs, task.Containers[0])
	}
	if task.StartedAt == nil {
		t.Fatal("startedAt not set")
	}
	if _, err := f.c.StopTask(context.Background(), &ecs.StopTaskInput{Cluster: aws.String(f.cluster), Task: aws.String(arn), Reason: aws.String("done")}); err != nil {
		t.Fatal(err)
	}
	task = f.waitStatus(arn, "STOPPED", 60*time.Second)
	if c := task.Containers[0]; c.ExitCode == nil || *c.ExitCode != 0 || aws.ToString(task.StoppedReason) != "done" {
		t.Fatalf("stopped: exit %v reason %q", c.ExitCode, aws.ToString(task.StoppedReason))
	}
}

func TestEssentialExitStopsTask(t *testing.T) {
	f := newFleet(t)
	agents.Start(t, f.srv, f.cluster)
	td := f.register("exits", f.container("main", "sh", "-c", "sleep 1; exit 3"))
	task := f.waitStatus(f.run(td), "STOPPED", 60*time.Second)
	c := task.Containers[0]
	if c.ExitCode == nil || *c.ExitCode != 3 || task.StopCode != types.TaskStopCodeEssentialContainerExited || aws.ToString(task.StoppedReason) == "" {
		t.Fatalf("exit %v stopCode %s reason %q", c.ExitCode, task.StopCode, aws.ToString(task.StoppedReason))
	}
}

func TestBadInputGetsReasons(t *testing.T) {
	f := newFleet(t)
	env := agents.Env(t, f.srv, f.cluster, t.TempDir())
	env["ECS_DISABLE_PRIVILEGED"] = "true"
	env["ECS_IMAGE_PULL_BEHAVIOR"] = "default"
	agents.StartEnv(t, env, f.rt)
	ctx := context.Background()

	missing := f.register("missing-image", types.ContainerDefinition{Name: aws.String("m"), Image: aws.String("127.0.0.1:1/nope:none"), Memory: aws.Int32(32)})
	task := f.waitStatus(f.run(missing), "STOPPED", 90*time.Second)
	if r := aws.ToString(task.Containers[0].Reason) + aws.ToString(task.StoppedReason); !strings.Contains(r, "CannotPullContainerError") {
		t.Fatalf("unknown image: container reason %q, task reason %q", aws.ToString(task.Containers[0].Reason), aws.ToString(task.StoppedReason))
	}

	priv := f.container("p", "sleep", "30")
	priv.Privileged = aws.Bool(true)
	task = f.waitStatus(f.run(f.register("privileged", priv)), "STOPPED", 60*time.Second)
	if !strings.Contains(aws.ToString(task.StoppedReason)+aws.ToString(task.Containers[0].Reason), "privileged") {
		t.Fatalf("privileged task: reason %q / %q", aws.ToString(task.StoppedReason), aws.ToString(task.Containers[0].Reason))
	}

	big := f.container("big", "sleep", "30")
	big.Memory = aws.Int32(100000)
	out, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(f.register("too-big", big))})
	if err != nil || len(out.Tasks) != 0 || len(out.Failures) != 1 || !strings.Contains(aws.ToString(out.Failures[0].Reason), "MEMORY") {
		t.Fatalf("too big: %+v %v", out, err)
	}
}

func TestPortsAndMetadataEndpoint(t *testing.T) {
	f := newFleet(t)
	env := agents.Env(t, f.srv, f.cluster, t.TempDir())
	env["ECS_TASK_METADATA_RPS_LIMIT"] = "1,2"
	agents.StartEnv(t, env, f.rt)
	web := f.container("web", "sh", "-c", "echo hello-from-capstan > /tmp/index.html; httpd -f -p 8080 -h /tmp")
	web.PortMappings = []types.PortMapping{{ContainerPort: aws.Int32(8080)}}
	task := f.waitStatus(f.run(f.register("web", web)), "RUNNING", 60*time.Second)
	b := task.Containers[0].NetworkBindings
	if len(b) != 1 || aws.ToInt32(b[0].HostPort) == 0 {
		t.Fatalf("network bindings %+v", b)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/index.html", aws.ToInt32(b[0].HostPort))
	var body string
	eventually(t, 20*time.Second, "the container's port answers", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		bb, _ := io.ReadAll(resp.Body)
		body = string(bb)
		return resp.StatusCode == 200
	})
	if !strings.Contains(body, "hello-from-capstan") {
		t.Fatalf("body %q", body)
	}

	// From inside a container: the metadata endpoint, then its throttle.
	probe := f.container("probe", "sh", "-c", `wget -q -O - $ECS_CONTAINER_METADATA_URI_V4/task > /tmp/task.json && cat /tmp/task.json; echo; `+
		`for i in 1 2 3 4 5 6 7 8; do wget -q -O /dev/null $ECS_CONTAINER_METADATA_URI_V4 || echo THROTTLED; done; sleep 300`)
	arn := f.run(f.register("probe", probe))
	f.waitStatus(arn, "RUNNING", 60*time.Second)
	var logs string
	eventually(t, 30*time.Second, "probe output", func() bool {
		cs := f.containers(arn)
		if len(cs) != 1 {
			return false
		}
		rc, err := f.rt.Logs(context.Background(), cs[0].ID, 0)
		if err != nil {
			return false
		}
		defer rc.Close()
		bb, _ := io.ReadAll(rc)
		logs = string(bb)
		return strings.Contains(logs, "THROTTLED") || strings.Count(logs, "\n") > 8
	})
	if !strings.Contains(logs, `"TaskARN":"`+arn+`"`) {
		t.Fatalf("task metadata from inside the container:\n%s", logs)
	}
	if !strings.Contains(logs, "THROTTLED") {
		t.Fatalf("no 429 after a burst above ECS_TASK_METADATA_RPS_LIMIT:\n%s", logs)
	}
}

// TestAgentRestartAdoptsTasks stops an agent while tasks start and run, and
// starts another on the same data dir: nothing is duplicated or lost.
func TestAgentRestartAdoptsTasks(t *testing.T) {
	f := newFleet(t)
	dir := t.TempDir()
	env := agents.Env(t, f.srv, f.cluster, dir)
	a := agents.StartEnv(t, env, f.rt)
	td := f.register("steady", f.container("main", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	first := f.run(td)
	f.waitStatus(first, "RUNNING", 60*time.Second)
	second := f.run(td) // may still be starting when the agent goes
	a.Stop()
	if cs := f.containers(first); len(cs) != 1 || cs[0].State != runtime.StateRunning {
		t.Fatalf("agent stop touched the running task: %+v", cs)
	}
	b := agents.StartEnv(t, env, f.rt)
	if b.InstanceArn != a.InstanceArn {
		t.Fatalf("restarted agent registered a new instance: %s vs %s", b.InstanceArn, a.InstanceArn)
	}
	f.waitStatus(second, "RUNNING", 60*time.Second)
	for _, arn := range []string{first, second} {
		if cs := f.containers(arn); len(cs) != 1 {
			t.Fatalf("task %s has %d containers after restart", arn, len(cs))
		}
	}
	if aws.ToString(f.task(first).Containers[0].RuntimeId) != f.containers(first)[0].ID {
		t.Fatal("adopted container is not the one reported")
	}
}

func TestServerRestartKeepsTasksRunning(t *testing.T) {
	f := newFleet(t)
	agents.Start(t, f.srv, f.cluster)
	td := f.register("survivor", f.container("main", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	arn := f.run(td)
	f.waitStatus(arn, "RUNNING", 60*time.Second)
	addr := f.srv.Addr
	dir := f.srv.Config.DataDir
	f.srv.Stop()
	if cs := f.containers(arn); len(cs) != 1 || cs[0].State != runtime.StateRunning {
		t.Fatalf("task stopped with the server: %+v", cs)
	}
	// Same address, so the agent finds it again.
	srv := testenv.StartServerAt(t, dir, addr)
	f.srv, f.c = srv, srv.ECS()
	ctx := context.Background()
	eventually(t, 60*time.Second, "agent reconnects", func() bool {
		out, err := f.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(f.cluster)})
		if err != nil || len(out.ContainerInstanceArns) != 1 {
			return false
		}
		d, err := f.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(f.cluster), ContainerInstances: out.ContainerInstanceArns})
		return err == nil && d.ContainerInstances[0].AgentConnected
	})
	if _, err := f.c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(f.cluster), Task: aws.String(arn)}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(arn, "STOPPED", 60*time.Second)
	if cs := f.containers(arn); len(cs) != 1 || cs[0].State == runtime.StateRunning {
		t.Fatalf("after stop: %+v", cs)
	}
}

// agentProcess is `capstan agent` as a separate process, to kill -9.
type agentProcess struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan error
}

func startAgentProcess(t *testing.T, env map[string]string) *agentProcess {
	t.Helper()
	cmd := exec.Command(capstanBinary(t), "agent")
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &agentProcess{cmd: cmd, log: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		p.kill9()
		removeInstanceOf(t, env["ECS_DATADIR"])
	})
	return p
}

// removeInstanceOf removes the containers and daemon network of the
// instance whose agent kept its state in dataDir.
func removeInstanceOf(t *testing.T, dataDir string) {
	db, err := state.Open(filepath.Join(dataDir, state.FileName))
	if err != nil {
		return
	}
	arn, _ := db.InstanceARN()
	db.Close()
	if arn == "" {
		return
	}
	rt := testenv.RequireDocker(t)
	ctx := context.Background()
	if cs, err := rt.List(ctx, map[string]string{"com.capstan.instance": arn}); err == nil {
		for _, c := range cs {
			rt.Remove(ctx, c.ID)
		}
	}
	daemonnet.Remove(ctx, rt, arn)
}

func (p *agentProcess) kill9() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (f *fleet) connectedInstances() int {
	ctx := context.Background()
	out, err := f.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(f.cluster)})
	if err != nil || len(out.ContainerInstanceArns) == 0 {
		return 0
	}
	d, err := f.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(f.cluster), ContainerInstances: out.ContainerInstanceArns})
	if err != nil {
		return 0
	}
	n := 0
	for _, ci := range d.ContainerInstances {
		if ci.AgentConnected {
			n++
		}
	}
	return n
}

func TestAgentKill9WhileTasksStartAndRun(t *testing.T) {
	f := newFleet(t)
	env := agents.Env(t, f.srv, f.cluster, t.TempDir())
	env["CAPSTAN_METRICS_ADDR"] = freeAddr(t)
	a := startAgentProcess(t, env)
	eventually(t, 60*time.Second, "agent connected", func() bool { return f.connectedInstances() == 1 })
	td := f.register("k9", f.container("main", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	var arns []string
	for range 3 {
		arns = append(arns, f.run(td))
	}
	a.kill9() // while the tasks start
	a = startAgentProcess(t, env)
	for _, arn := range arns {
		f.waitStatus(arn, "RUNNING", 90*time.Second)
	}
	ids := map[string]string{}
	for _, arn := range arns {
		cs := f.containers(arn)
		if len(cs) != 1 || cs[0].State != runtime.StateRunning {
			t.Fatalf("task %s after kill -9 during start: %+v\n%s", arn, cs, a.log)
		}
		ids[arn] = cs[0].ID
	}
	a.kill9() // while they run
	for _, arn := range arns {
		if cs := f.containers(arn); len(cs) != 1 || cs[0].State != runtime.StateRunning {
			t.Fatalf("kill -9 of the agent stopped task %s: %+v", arn, cs)
		}
	}
	a = startAgentProcess(t, env)
	eventually(t, 60*time.Second, "agent reconnected", func() bool { return f.connectedInstances() == 1 })
	// A stop after the restart reaches the adopted containers.
	if _, err := f.c.StopTask(context.Background(), &ecs.StopTaskInput{Cluster: aws.String(f.cluster), Task: aws.String(arns[0])}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(arns[0], "STOPPED", 60*time.Second)
	for _, arn := range arns[1:] {
		cs := f.containers(arn)
		if len(cs) != 1 || cs[0].ID != ids[arn] || cs[0].State != runtime.StateRunning {
			t.Fatalf("task %s after second restart: %+v (was %s)", arn, cs, ids[arn])
		}
		if aws.ToString(f.task(arn).LastStatus) != "RUNNING" {
			t.Fatalf("task %s not RUNNING after restart", arn)
		}
	}
}

func TestNetworkCutConverges(t *testing.T) {
	f := newFleet(t)
	px := startTCPProxy(t, f.srv.Addr)
	env := agents.Env(t, f.srv, f.cluster, t.TempDir())
	env["CAPSTAN_ENDPOINT"] = "http://" + px.addr()
	agents.StartEnv(t, env, f.rt)
	td := f.register("cut", f.container("main", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	keep, stop := f.run(td), f.run(td)
	f.waitStatus(keep, "RUNNING", 60*time.Second)
	f.waitStatus(stop, "RUNNING", 60*time.Second)
	px.cut()
	eventually(t, 30*time.Second, "server sees the agent gone", func() bool { return f.connectedInstances() == 0 })
	// Decided while cut off: must reach the agent after the network heals.
	if _, err := f.c.StopTask(context.Background(), &ecs.StopTaskInput{Cluster: aws.String(f.cluster), Task: aws.String(stop)}); err != nil {
		t.Fatal(err)
	}
	if cs := f.containers(keep); len(cs) != 1 || cs[0].State != runtime.StateRunning {
		t.Fatalf("task stopped during the cut: %+v", cs)
	}
	px.heal()
	f.waitStatus(stop, "STOPPED", 90*time.Second)
	if cs := f.containers(keep); len(cs) != 1 || cs[0].State != runtime.StateRunning || aws.ToString(f.task(keep).LastStatus) != "RUNNING" {
		t.Fatalf("kept task after the cut: %+v", cs)
	}
}

// tcpProxy forwards to a target and can cut every connection.
type tcpProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	down  bool
}

func startTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close(); c.Close() }()
			go func() { io.Copy(c, up); up.Close(); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) heal() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// TestDeregisteredInstanceRejoins deregisters a live instance: the agent
// retires its containers and registers a new instance by itself.
func TestDeregisteredInstanceRejoins(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	a := agents.Start(t, f.srv, f.cluster)
	td := f.register("old", f.container("main", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	arn := f.run(td)
	f.waitStatus(arn, "RUNNING", 60*time.Second)
	_, err := f.c.DeregisterContainerInstance(ctx, &ecs.DeregisterContainerInstanceInput{Cluster: aws.String(f.cluster),
		ContainerInstance: aws.String(a.InstanceArn), Force: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	var fresh string
	eventually(t, 60*time.Second, "a new instance registers", func() bool {
		out, err := f.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(f.cluster)})
		if err != nil || len(out.ContainerInstanceArns) != 1 || out.ContainerInstanceArns[0] == a.InstanceArn {
			return false
		}
		fresh = out.ContainerInstanceArns[0]
		return f.connectedInstances() == 1
	})
	eventually(t, 60*time.Second, "the old instance's container is gone", func() bool { return len(f.containers(arn)) == 0 })
	if s := aws.ToString(f.task(arn).LastStatus); s != "STOPPED" {
		t.Fatalf("task of the deregistered instance is %s", s)
	}
	// The new instance takes work.
	next := f.run(td)
	if got := aws.ToString(f.waitStatus(next, "RUNNING", 60*time.Second).ContainerInstanceArn); got != fresh {
		t.Fatalf("new task on %s, want %s", got, fresh)
	}
}
