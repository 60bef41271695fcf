package e2e

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/provision/local"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// newManagedFleet is a fleet whose server provisions local instances.
func newManagedFleet(t *testing.T) *fleet { return newManagedFleetWith(t, nil) }

// newManagedFleetWith lets the test change the server's configuration.
func newManagedFleetWith(t *testing.T, config func(*server.Config)) *fleet {
	t.Helper()
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	srv := testenv.StartServerWith(t, func(c *server.Config) {
		c.Provisioner, c.AgentBinary = "local", bin
		c.AgentEnv = map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT": "5s"}
		if config != nil {
			config(c)
		}
	})
	f := &fleet{t: t, srv: srv, c: srv.ECS(), rt: rt, image: testenv.BusyboxImage(t), cluster: "managed"}
	if _, err := f.c.CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String(f.cluster)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Instances are processes of this test: terminate what is left,
		// with their containers and daemon networks.
		srv.Stop()
		p, err := local.New(bin, filepath.Join(srv.Config.DataDir, "instances"), rt, slog.New(slog.DiscardHandler))
		if err != nil {
			return
		}
		handles, _ := p.Handles()
		for _, h := range handles {
			if err := p.Terminate(context.Background(), h); err != nil {
				t.Logf("cleanup: terminate %s: %v", h, err)
			}
		}
	})
	return f
}

func (f *fleet) managedCapacityProvider(name string, scaleInAfter int32) string {
	f.t.Helper()
	out, err := f.c.CreateCapacityProvider(context.Background(), &ecs.CreateCapacityProviderInput{Name: aws.String(name), Cluster: aws.String(f.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn:      aws.String("arn:aws:iam::123456789012:role/capstan"),
			InfrastructureOptimization: &types.InfrastructureOptimization{ScaleInAfter: aws.Int32(scaleInAfter)},
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(1)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(1024)}}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return aws.ToString(out.CapacityProvider.CapacityProviderArn)
}

// TestManagedInstanceLifecycle: RunTask on an empty managed-instances
// capacity provider provisions an instance; its critical daemon starts
// before the task; once idle the instance is scaled in and terminated with
// nothing left behind.
func TestManagedInstanceLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newManagedFleet(t)
	cp := f.managedCapacityProvider("auto", 3)
	f.daemon("agentd", cp, true, "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done")
	td := f.register("job", f.container("job", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	out, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("auto")}}})
	if err != nil || len(out.Tasks) != 1 {
		t.Fatalf("run on an empty capacity provider: %+v %v", out, err)
	}
	if s := aws.ToString(out.Tasks[0].LastStatus); s != "PROVISIONING" {
		t.Fatalf("task waiting for capacity is %s", s)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	app := f.waitStatus(arn, "RUNNING", 120*time.Second)
	inst := aws.ToString(app.ContainerInstanceArn)
	ci := f.instance(inst)
	if aws.ToString(ci.CapacityProviderName) != "auto" || aws.ToString(ci.Status) != "ACTIVE" {
		t.Fatalf("instance: %+v", ci)
	}
	dts := f.daemonTasks("agentd", "RUNNING")
	if len(dts) != 1 || aws.ToString(dts[0].ContainerInstanceArn) != inst || !dts[0].StartedAt.Before(*app.StartedAt) {
		t.Fatalf("daemon tasks %+v, app started %v", dts, app.StartedAt)
	}
	if _, err := f.c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(f.cluster), Task: aws.String(arn)}); err != nil {
		t.Fatal(err)
	}
	// Idle for scaleInAfter (3 s): drained, daemons last, deregistered, terminated.
	eventually(t, 90*time.Second, "idle instance scaled in", func() bool { return aws.ToString(f.instance(inst).Status) == "INACTIVE" })
	eventually(t, 60*time.Second, "terminated instance leaves no containers", func() bool {
		cs, err := f.rt.List(ctx, map[string]string{"com.capstan.instance": inst})
		return err == nil && len(cs) == 0
	})
}

// TestAutoRepairReplacesInstance kills a critical daemon's container: the
// instance is drained in the same write that records the daemon stopped,
// a replacement is provisioned with the daemon first, the service's task
// moves there, and the old instance is terminated.
func TestAutoRepairReplacesInstance(t *testing.T) {
	ctx := context.Background()
	f := newManagedFleet(t)
	cp := f.managedCapacityProvider("repair", 600)
	f.daemon("guard", cp, true, "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done")
	td := f.register("web", f.container("web", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(1),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("repair")}}}); err != nil {
		t.Fatal(err)
	}
	serviceTask := func() (types.Task, bool) { return f.runningServiceTask("web") }
	var first types.Task
	eventually(t, 120*time.Second, "service task RUNNING", func() bool { var ok bool; first, ok = serviceTask(); return ok })
	old := aws.ToString(first.ContainerInstanceArn)
	guards := f.daemonTasks("guard", "RUNNING")
	if len(guards) != 1 {
		t.Fatalf("guard tasks: %+v", guards)
	}
	cs := f.containers(aws.ToString(guards[0].TaskArn))
	if len(cs) != 1 {
		t.Fatalf("guard containers: %+v", cs)
	}
	if err := f.rt.Stop(ctx, cs[0].ID, 0); err != nil { // the daemon dies
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "instance drained by auto-repair", func() bool {
		s := aws.ToString(f.instance(old).Status)
		return s == "DRAINING" || s == "INACTIVE"
	})
	// The drain is in the recorded history too.
	eventually(t, 10*time.Second, "auto-repair drain event", func() bool {
		out, err := f.srv.Service.ListEvents(ctx, &ops.ListEventsRequest{Cluster: f.cluster, DetailType: "ECS Container Instance State Change", Resource: old})
		if err != nil {
			return false
		}
		for _, ev := range out.Events {
			if strings.Contains(string(ev.Detail), `"DRAINING"`) && strings.Contains(string(ev.Detail), "auto-repair") {
				return true
			}
		}
		return false
	})
	var moved types.Task
	eventually(t, 180*time.Second, "service task running on a replacement", func() bool {
		tk, ok := serviceTask()
		moved = tk
		return ok && aws.ToString(tk.ContainerInstanceArn) != old
	})
	fresh := aws.ToString(moved.ContainerInstanceArn)
	if s := aws.ToString(f.instance(fresh).Status); s != "ACTIVE" {
		t.Fatalf("replacement instance is %s", s)
	}
	guards = f.daemonTasks("guard", "RUNNING")
	var onFresh bool
	for _, g := range guards {
		if aws.ToString(g.ContainerInstanceArn) == fresh && g.StartedAt.Before(*moved.StartedAt) {
			onFresh = true
		}
	}
	if !onFresh {
		t.Fatalf("no guard started before the moved task on %s: %+v", fresh, guards)
	}
	eventually(t, 120*time.Second, "old instance terminated", func() bool {
		if aws.ToString(f.instance(old).Status) != "INACTIVE" {
			return false
		}
		cs, err := f.rt.List(ctx, map[string]string{"com.capstan.instance": old})
		return err == nil && len(cs) == 0
	})
}

// TestLostInstanceIsReplaced kills a managed instance's agent: the instance
// is detected lost, its tasks are recorded stopped, it is terminated, and
// the service's task comes back on a new instance.
func TestLostInstanceIsReplaced(t *testing.T) {
	ctx := context.Background()
	f := newManagedFleet(t)
	f.managedCapacityProvider("lossy", 600)
	td := f.register("web", f.container("web", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(1),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("lossy")}}}); err != nil {
		t.Fatal(err)
	}
	running := func() (types.Task, bool) { return f.runningServiceTask("web") }
	var first types.Task
	eventually(t, 120*time.Second, "service task RUNNING", func() bool { var ok bool; first, ok = running(); return ok })
	old := aws.ToString(first.ContainerInstanceArn)
	// The machine dies: its agent is killed with SIGKILL.
	dir := filepath.Join(f.srv.Config.DataDir, "instances")
	entries, _ := os.ReadDir(dir)
	killed := 0
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "pid"))
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid > 1 && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d agents", killed)
	}
	eventually(t, 60*time.Second, "lost instance deregistered", func() bool { return aws.ToString(f.instance(old).Status) == "INACTIVE" })
	if s := aws.ToString(f.task(aws.ToString(first.TaskArn)).LastStatus); s != "STOPPED" {
		t.Fatalf("task of the lost instance is %s", s)
	}
	eventually(t, 120*time.Second, "service task back on a new instance", func() bool {
		tk, ok := running()
		return ok && aws.ToString(tk.ContainerInstanceArn) != old
	})
}

// TestManagedInstanceAccess: a daemon may share the host PID namespace and
// mount /proc read-only; an application task may not be privileged.
func TestManagedInstanceAccess(t *testing.T) {
	ctx := context.Background()
	f := newManagedFleet(t)
	cp := f.managedCapacityProvider("access", 600)
	td, err := f.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("procwatch"), PidMode: types.DaemonPidModeShared,
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("w"), Image: aws.String(f.image), Memory: aws.Int32(32),
			Command:     []string{"sh", "-c", "ls /host/proc 2>/dev/null | grep -c '^[0-9]' ; ps 2>/dev/null | wc -l; trap 'exit 0' TERM; while true; do sleep 1; done"},
			MountPoints: []types.MountPoint{{SourceVolume: aws.String("proc"), ContainerPath: aws.String("/host/proc"), ReadOnly: aws.Bool(true)}}}},
		Volumes: []types.DaemonVolume{{Name: aws.String("proc"), Host: &types.HostVolumeProperties{SourcePath: aws.String("/proc")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("procwatch"), ClusterArn: aws.String(f.cluster),
		DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn, CapacityProviderArns: []string{cp}}); err != nil {
		t.Fatal(err)
	}
	priv := f.container("p", "sleep", "30")
	priv.Privileged = aws.Bool(true)
	out, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(f.register("priv", priv)),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("access")}}})
	if err != nil || len(out.Tasks) != 1 {
		t.Fatalf("run: %+v %v", out, err)
	}
	task := f.waitStatus(aws.ToString(out.Tasks[0].TaskArn), "STOPPED", 120*time.Second)
	if !strings.Contains(aws.ToString(task.StoppedReason)+aws.ToString(task.Containers[0].Reason), "privileged") {
		t.Fatalf("privileged app task: %q / %q", aws.ToString(task.StoppedReason), aws.ToString(task.Containers[0].Reason))
	}
	ds := f.daemonTasks("procwatch", "RUNNING")
	if len(ds) != 1 {
		t.Fatalf("daemon tasks: %+v", ds)
	}
	var logs string
	eventually(t, 30*time.Second, "daemon output", func() bool {
		cs := f.containers(aws.ToString(ds[0].TaskArn))
		if len(cs) != 1 {
			return false
		}
		rc, err := f.rt.Logs(ctx, cs[0].ID, 0)
		if err != nil {
			return false
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		logs = string(b)
		return strings.Count(logs, "\n") >= 2
	})
	lines := strings.Fields(logs)
	hostProcs, _ := strconv.Atoi(lines[0])
	seen, _ := strconv.Atoi(lines[1])
	// With the host's PID namespace the daemon sees far more than itself.
	if hostProcs < 5 || seen < 5 {
		t.Fatalf("daemon sees %d host /proc entries and %d processes:\n%s", hostProcs, seen, logs)
	}
}

// TestServiceOnFreshProviderReachesDaemon: a daemon, then a service of 3
// tasks on a fresh capacity provider: an instance is provisioned, the
// daemon starts first on it, and the app containers reach the daemon at
// the host name "daemon" without configuration.
func TestServiceOnFreshProviderReachesDaemon(t *testing.T) {
	ctx := context.Background()
	f := newManagedFleet(t)
	cp := f.managedCapacityProvider("fresh", 600)
	f.daemon("collector", cp, true, "sh", "-c", "echo daemon-ok > /tmp/index.html; httpd -f -p 8125 -h /tmp")
	app := f.container("app", "sh", "-c", "while true; do wget -q -O - http://daemon:8125/index.html || echo unreachable; sleep 1; done")
	td := f.register("reporter", app)
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String("reporter"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(3),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("fresh")}}}); err != nil {
		t.Fatal(err)
	}
	var tasks []types.Task
	eventually(t, 180*time.Second, "3 service tasks RUNNING", func() bool {
		list, err := f.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(f.cluster), ServiceName: aws.String("reporter")})
		if err != nil || len(list.TaskArns) < 3 {
			return false
		}
		out, err := f.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(f.cluster), Tasks: list.TaskArns})
		if err != nil {
			return false
		}
		tasks = tasks[:0]
		for _, tk := range out.Tasks {
			if aws.ToString(tk.LastStatus) == "RUNNING" {
				tasks = append(tasks, tk)
			}
		}
		return len(tasks) == 3
	})
	daemons := map[string]types.Task{}
	for _, d := range f.daemonTasks("collector", "RUNNING") {
		daemons[aws.ToString(d.ContainerInstanceArn)] = d
	}
	for _, tk := range tasks {
		d, ok := daemons[aws.ToString(tk.ContainerInstanceArn)]
		if !ok || !d.StartedAt.Before(*tk.StartedAt) {
			t.Fatalf("task %s on %s: daemon %+v", aws.ToString(tk.TaskArn), aws.ToString(tk.ContainerInstanceArn), d.StartedAt)
		}
		if ci := f.instance(aws.ToString(tk.ContainerInstanceArn)); aws.ToString(ci.Status) != "ACTIVE" {
			t.Fatalf("instance %s", aws.ToString(ci.Status))
		}
	}
	for _, tk := range tasks {
		arn := aws.ToString(tk.TaskArn)
		var logs string
		eventually(t, 30*time.Second, "app reaches the daemon", func() bool {
			cs := f.containers(arn)
			if len(cs) != 1 {
				return false
			}
			rc, err := f.rt.Logs(ctx, cs[0].ID, 0)
			if err != nil {
				return false
			}
			defer rc.Close()
			b, _ := io.ReadAll(rc)
			logs = string(b)
			return strings.Contains(logs, "daemon-ok")
		})
	}
}

// runningServiceTask returns a RUNNING task of the service, if there is one.
func (f *fleet) runningServiceTask(service string) (types.Task, bool) {
	list, err := f.c.ListTasks(context.Background(), &ecs.ListTasksInput{Cluster: aws.String(f.cluster), ServiceName: aws.String(service)})
	if err != nil {
		return types.Task{}, false
	}
	for _, arn := range list.TaskArns {
		if tk := f.task(arn); aws.ToString(tk.LastStatus) == "RUNNING" {
			return tk, true
		}
	}
	return types.Task{}, false
}
