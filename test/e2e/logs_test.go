package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// TestTaskLogs reads a running and a stopped task's output with the
// capstan binary through the real server, agent and Docker: whole, tailed,
// with times, followed; and refuses bad input and a user without
// capstan:GetTaskLogs.
func TestTaskLogs(t *testing.T) {
	f := newFleet(t)
	testenv.CapstanBinary(t) // built before the stopped task's cleanup clock starts
	env := agents.Env(t, f.srv, f.cluster, t.TempDir())
	env["ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION"] = "10m"
	agents.StartEnv(t, env, f.rt)
	talker := f.register("talker", f.container("main", "sh", "-c",
		"trap 'exit 0' TERM; echo first-out; echo first-err >&2; i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.2; done"))
	running := f.run(talker)
	f.waitStatus(running, "RUNNING", 60*time.Second)
	oneshot := f.register("oneshot", f.container("main", "sh", "-c", "echo bye-from-stopped; echo stopped-err >&2; exit 0"))
	stopped := f.run(oneshot)
	f.waitStatus(stopped, "STOPPED", 60*time.Second)

	// The agent keeps the output bounded on disk: rotated json-file.
	in, err := f.rt.(*docker.Runtime).Client().ContainerInspect(context.Background(), f.containers(running)[0].ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lc := in.Container.HostConfig.LogConfig; lc.Type != "json-file" || lc.Config["max-size"] != engine.LogMaxSize || lc.Config["max-file"] != engine.LogMaxFile {
		t.Fatalf("container log config %+v", lc)
	}
	eventually(t, 20*time.Second, "tick-3 in the running task's logs", func() bool {
		out, _ := f.capstanOK("logs", running, "--cluster", f.cluster)
		return strings.Contains(out, "tick-3")
	})
	out, errs := f.capstanOK("logs", running, "--cluster", f.cluster)
	if !strings.HasPrefix(out, "first-out\ntick-1\n") || strings.Contains(out, "first-err") || !strings.Contains(errs, "first-err") {
		t.Fatalf("running task's logs:\nstdout:\n%s\nstderr:\n%s", out, errs)
	}

	out, errs = f.capstanOK("logs", stopped, "--cluster", f.cluster, "--timestamps")
	line := strings.TrimSpace(out)
	ts, msg, _ := strings.Cut(line, " ")
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || msg != "bye-from-stopped" || !strings.Contains(errs, "stopped-err") {
		t.Fatalf("stopped task's logs with times:\nstdout:\n%s\nstderr:\n%s", out, errs)
	}
	// -o json: one object per line, both streams, with task and container.
	out, _ = f.capstanOK("logs", stopped, "--cluster", f.cluster, "-o", "json")
	var objs []map[string]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var o map[string]string
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatalf("-o json line %q: %v", l, err)
		}
		objs = append(objs, o)
	}
	// The two streams are stamped apart by Docker: either may come first.
	if len(objs) == 2 && objs[0]["stream"] == "stderr" {
		objs[0], objs[1] = objs[1], objs[0]
	}
	if len(objs) != 2 || objs[0]["task"] != stopped || objs[0]["container"] != "main" || objs[0]["message"] != "bye-from-stopped" ||
		objs[0]["stream"] != "stdout" || objs[1]["stream"] != "stderr" || objs[1]["message"] != "stopped-err" || objs[1]["timestamp"] == "" {
		t.Fatalf("-o json: %v", objs)
	}
	// Following a stopped task prints its lines and ends by itself.
	out, _ = f.capstanOK("logs", stopped, "--cluster", f.cluster, "--follow")
	if out != "bye-from-stopped\n" {
		t.Fatalf("followed stopped task: %q", out)
	}

	out, _ = f.capstanOK("logs", running, "--cluster", f.cluster, "--tail", "2")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "tick-") {
		t.Fatalf("--tail 2: %q", out)
	}
	out, _ = f.capstanOK("logs", running, "--cluster", f.cluster, "--since", "1h")
	if !strings.HasPrefix(out, "first-out\n") {
		t.Fatalf("--since 1h: %q", out)
	}
	out, _ = f.capstanOK("logs", running, "--cluster", f.cluster, "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if out != "" {
		t.Fatalf("--since an hour ahead printed %q", out)
	}

	// --follow prints lines written after it started.
	last := lastTick(t, f.capstanOKOut("logs", running, "--cluster", f.cluster))
	seen := f.followUntil(15*time.Second, func(line string) bool {
		var n int
		_, err := fmt.Sscanf(line, "tick-%d", &n)
		return err == nil && n >= last+5
	}, "logs", running, "--cluster", f.cluster, "--follow", "--tail", "1")
	if !seen {
		t.Fatalf("--follow did not print tick-%d within 15s", last+5)
	}

	// Bad input is refused naming the field; nothing else happens.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", running, "--cluster", f.cluster, "--container", "nope"}, `container: the task has no container "nope"`},
		{[]string{"logs", "not-a-task", "--cluster", f.cluster}, "task:"},
		{[]string{"logs", running, "--cluster", f.cluster, "--since", "yesterday"}, "--since"},
		{[]string{"logs", running, "--cluster", f.cluster, "--tail", "-3"}, "--tail"},
		{[]string{"logs", "--cluster", f.cluster}, "give one of TASK"},
	} {
		code, _, errs := f.capstanCLI(c.args...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("capstan %s: exit %d, stderr %q; want an error with %q", strings.Join(c.args, " "), code, errs, c.want)
		}
	}

	// A user allowed DescribeTasks but not capstan:GetTaskLogs is refused.
	keys := f.userWithPolicy("reader", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ecs:DescribeTasks","ecs:ListTasks"],"Resource":"*"}]}`)
	code, out, errs := f.capstanCLIEnv(keys, "logs", running, "--cluster", f.cluster)
	if code == 0 || !strings.Contains(errs, "AccessDenied") || !strings.Contains(errs, "capstan:GetTaskLogs") || strings.Contains(out, "tick") {
		t.Fatalf("reader without capstan:GetTaskLogs: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	f.awsOK("iam", "put-user-policy", "--user-name", "reader", "--policy-name", "logs", "--policy-document",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"capstan:GetTaskLogs","Resource":"*","Condition":{"StringEquals":{"ecs:cluster":"arn:aws:ecs:us-east-1:123456789012:cluster/`+f.cluster+`"}}}]}`)
	eventually(t, 10*time.Second, "the reader may read logs once allowed", func() bool {
		code, out, _ := f.capstanCLIEnv(keys, "logs", running, "--cluster", f.cluster)
		return code == 0 && strings.Contains(out, "tick-1")
	})
}

// TestTaskLogsBackPressure follows a container that writes as fast as it
// can: every page stays within its window, the server's heap does not grow
// with the flood, and the instance's session goes on carrying the agent's
// reports (a task started meanwhile reaches RUNNING).
func TestTaskLogsBackPressure(t *testing.T) {
	f := newFleet(t)
	bin := testenv.CapstanBinary(t)
	agents.Start(t, f.srv, f.cluster)
	noisy := f.run(f.register("noisy", f.container("main", "sh", "-c", "trap 'exit 0' TERM; yes capstan-noise-0123456789-0123456789-0123456789")))
	f.waitStatus(noisy, "RUNNING", 60*time.Second)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Four followers that read slowly: each holds its window at most.
	done := make(chan struct{})
	var pages, bytesRead int
	var followed atomic.Int64
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			cmd := exec.CommandContext(ctx, bin, "logs", noisy, "--cluster", f.cluster, "--follow")
			cmd.Env = append(f.srv.Env(), "CAPSTAN_ENDPOINT="+f.srv.URL, "HOME="+t.TempDir())
			var errb bytes.Buffer
			cmd.Stderr = &errb
			defer func() {
				if errb.Len() > 0 {
					t.Logf("follower's stderr: %.500s", errb.String())
				}
			}()
			r, err := cmd.StdoutPipe()
			if err != nil {
				t.Errorf("follower: %v", err)
				return
			}
			if err := cmd.Start(); err != nil {
				t.Errorf("follower: %v", err)
				return
			}
			buf := make([]byte, 4096)
			for {
				n, err := r.Read(buf)
				followed.Add(int64(n))
				if err != nil {
					break
				}
				time.Sleep(time.Millisecond) // a slow reader
			}
			cmd.Wait()
		}()
	}
	eventually(t, 30*time.Second, "the followers reading", func() bool { return followed.Load() > 1<<20 })
	// Pages asked for directly stay within the window the caller set.
	c := f.srv.ECS()
	for range 5 {
		out := f.getTaskLogs(map[string]any{"cluster": f.cluster, "task": noisy, "maxBytes": 65536, "tail": 10000})
		n := 0
		for _, e := range out.Events {
			n += len(e.Message)
		}
		if n > 65536 || !out.Truncated {
			t.Fatalf("page of %d bytes (truncated %v) for a window of 65536", n, out.Truncated)
		}
		pages++
		bytesRead += n
	}
	started := f.run(f.register("sleeper", f.container("main", "sleep", "300")))
	f.waitStatus(started, "RUNNING", 60*time.Second)
	time.Sleep(3 * time.Second)
	during := heap()
	cancel()
	for range 4 {
		<-done
	}
	t.Logf("heap before the flood %d MiB, while followed %d MiB; followers read %d MiB; %d direct pages, %d bytes",
		before>>20, during>>20, followed.Load()>>20, pages, bytesRead)
	if during > before+256<<20 {
		t.Fatalf("server heap grew from %d MiB to %d MiB while a noisy container was followed", before>>20, during>>20)
	}
	if _, err := c.DescribeTasks(context.Background(), &ecs.DescribeTasksInput{Cluster: aws.String(f.cluster), Tasks: []string{noisy}}); err != nil {
		t.Fatal(err)
	}
}

type taskLogsPage struct {
	Events []struct {
		Timestamp, Stream, Message string
	}
	NextToken  string
	Truncated  bool
	TaskStatus string
}

// getTaskLogs calls CapstanV1.GetTaskLogs as the server's admin, signed
// as the CLI signs it.
func (f *fleet) getTaskLogs(in map[string]any) taskLogsPage {
	f.t.Helper()
	body, _ := json.Marshal(in)
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/", bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "CapstanV1.GetTaskLogs")
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: f.srv.Config.AdminKeyID, SecretAccessKey: f.srv.Config.AdminSecret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "ecs", "us-east-1", time.Now()); err != nil {
		f.t.Fatal(err)
	}
	resp, err := f.srv.HTTPClient().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("GetTaskLogs %s: %s %s", body, resp.Status, b)
	}
	var out taskLogsPage
	if err := json.Unmarshal(b, &out); err != nil {
		f.t.Fatalf("GetTaskLogs answer %.200s: %v", b, err)
	}
	return out
}

func (f *fleet) capstanOKOut(args ...string) string {
	f.t.Helper()
	out, _ := f.capstanOK(args...)
	return out
}

// capstanCLIEnv is capstanCLI with extra environment (another user's keys).
func (f *fleet) capstanCLIEnv(env []string, args ...string) (code int, stdout, stderr string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.CapstanBinary(f.t), args...)
	cmd.Env = append(append(f.srv.Env(), "CAPSTAN_ENDPOINT="+f.srv.URL, "HOME="+f.t.TempDir()), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// followUntil runs the capstan binary and reads its output until a line
// satisfies match (true) or d passes (false); it then stops the command.
func (f *fleet) followUntil(d time.Duration, match func(string) bool, args ...string) bool {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.CapstanBinary(f.t), args...)
	cmd.Env = append(f.srv.Env(), "CAPSTAN_ENDPOINT="+f.srv.URL, "HOME="+f.t.TempDir())
	r, err := cmd.StdoutPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	defer cmd.Wait()
	defer cancel()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if match(sc.Text()) {
			return true
		}
	}
	io.Copy(io.Discard, r)
	return false
}

func lastTick(t *testing.T, out string) int {
	t.Helper()
	last := 0
	for _, l := range strings.Split(out, "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "tick-%d", &n); err == nil {
			last = n
		}
	}
	if last == 0 {
		t.Fatalf("no tick in %q", out)
	}
	return last
}

// TestServiceLogs prints every task of a service, each line prefixed by
// its task and container, whole and followed.
func TestServiceLogs(t *testing.T) {
	f := newFleet(t)
	testenv.CapstanBinary(t)
	agents.Start(t, f.srv, f.cluster)
	td := f.register("chatty", f.container("main", "sh", "-c", "trap 'exit 0' TERM; echo svc-hello; while true; do echo svc-tick; sleep 0.3; done"))
	ctx := context.Background()
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String("chatty"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.c.DeleteService(context.Background(), &ecs.DeleteServiceInput{Cluster: aws.String(f.cluster), Service: aws.String("chatty"), Force: aws.Bool(true)})
	})
	var ids []string
	eventually(t, 90*time.Second, "two running tasks of the service", func() bool {
		list, err := f.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(f.cluster), ServiceName: aws.String("chatty")})
		if err != nil || len(list.TaskArns) != 2 {
			return false
		}
		ids = ids[:0]
		for _, arn := range list.TaskArns {
			if aws.ToString(f.task(arn).LastStatus) != "RUNNING" {
				return false
			}
			ids = append(ids, arn[strings.LastIndexByte(arn, '/')+1:])
		}
		return true
	})
	out, _ := f.capstanOK("logs", "--service", "chatty", "--cluster", f.cluster)
	for _, id := range ids {
		if !strings.Contains(out, "["+id+"/main] svc-hello\n") {
			t.Fatalf("service logs lack task %s's first line:\n%s", id, out)
		}
	}
	seen := map[string]bool{}
	if !f.followUntil(20*time.Second, func(line string) bool {
		for _, id := range ids {
			if line == "["+id+"/main] svc-tick" {
				seen[id] = true
			}
		}
		return len(seen) == len(ids)
	}, "logs", "--service", "chatty", "--cluster", f.cluster, "--follow", "--since", "1s") {
		t.Fatalf("followed service logs showed ticks of %v, want both of %v", seen, ids)
	}
}

// TestDaemonLogs prints a daemon's task on one instance, through the
// daemon network mode the agent runs it in.
func TestDaemonLogs(t *testing.T) {
	f := newFleet(t)
	testenv.CapstanBinary(t)
	cp := f.capacityProvider("logs-mi")
	f.daemon("collector", cp, true, "sh", "-c", "trap 'exit 0' TERM; echo collector-up; while true; do sleep 1; done")
	a := agents.StartEnv(t, agents.EnvFor(t, f.srv, f.cluster, "logs-mi", t.TempDir()), f.rt)
	eventually(t, 60*time.Second, "instance ACTIVE", func() bool { return aws.ToString(f.instance(a.InstanceArn).Status) == "ACTIVE" })
	dts := f.daemonTasks("collector", "RUNNING")
	if len(dts) != 1 {
		t.Fatalf("daemon tasks %+v", dts)
	}
	arn := aws.ToString(dts[0].TaskArn)
	id := arn[strings.LastIndexByte(arn, '/')+1:]
	instance := a.InstanceArn[strings.LastIndexByte(a.InstanceArn, '/')+1:]
	eventually(t, 20*time.Second, "the daemon's first line", func() bool {
		out, _ := f.capstanOK("logs", "--daemon", "collector", "--instance", instance, "--cluster", f.cluster)
		return out == "["+id+"/collector] collector-up\n"
	})
	if code, _, errs := f.capstanCLI("logs", "--instance", instance, "--cluster", f.cluster); code == 0 || !strings.Contains(errs, "give one of TASK") {
		t.Fatalf("--instance without --daemon: exit %d, %s", code, errs)
	}
}

// awsOK runs the aws CLI as the administrator against the fleet's server
// and returns its JSON output; a failure ends the test.
func (f *fleet) awsOK(args ...string) string {
	t := f.t
	t.Helper()
	needAWS(t)
	out, errOut, err := runAWS(t, f.srv.Env(), append(args, "--endpoint-url", f.srv.URL, "--output", "json")...)
	if err != nil {
		t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// userWithPolicy makes an IAM user with one inline policy through the aws
// CLI and returns its access key as environment variables.
func (f *fleet) userWithPolicy(name, policy string) []string {
	f.t.Helper()
	f.awsOK("iam", "create-user", "--user-name", name)
	f.awsOK("iam", "put-user-policy", "--user-name", name, "--policy-name", "p", "--policy-document", policy)
	var key struct {
		AccessKey struct{ AccessKeyId, SecretAccessKey string }
	}
	if err := json.Unmarshal([]byte(f.awsOK("iam", "create-access-key", "--user-name", name)), &key); err != nil {
		f.t.Fatal(err)
	}
	return []string{"AWS_ACCESS_KEY_ID=" + key.AccessKey.AccessKeyId, "AWS_SECRET_ACCESS_KEY=" + key.AccessKey.SecretAccessKey}
}
