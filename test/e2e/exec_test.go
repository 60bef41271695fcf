package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// runExec runs a task with enableExecuteCommand.
func (f *fleet) runExec(td string) string {
	f.t.Helper()
	out, err := f.c.RunTask(context.Background(), &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td), EnableExecuteCommand: true})
	if err != nil || len(out.Tasks) != 1 {
		f.t.Fatalf("run %s: %v %+v", td, err, out)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	f.t.Cleanup(func() {
		f.c.StopTask(context.Background(), &ecs.StopTaskInput{Cluster: aws.String(f.cluster), Task: aws.String(arn)})
	})
	return arn
}

// openPTY opens a pseudo-terminal pair: the controlling side and the
// terminal a command is given.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// TestExec runs commands in a task's container with the capstan binary
// through the real server, agent and Docker: output and exit code, an
// interactive terminal driven through a pty (input, a resize, the exit
// code); refuses a task without enableExecuteCommand, a user without
// ecs:ExecuteCommand, and a bad or reused token; and finds the sessions in
// the audit trail.
func TestExec(t *testing.T) {
	f := newFleet(t)
	bin := testenv.CapstanBinary(t)
	agents.Start(t, f.srv, f.cluster)
	td := f.register("shell", f.container("main", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	task := f.runExec(td)
	plain := f.run(td)
	f.waitStatus(task, "RUNNING", 60*time.Second)
	f.waitStatus(plain, "RUNNING", 60*time.Second)
	if !f.task(task).EnableExecuteCommand || f.task(plain).EnableExecuteCommand {
		t.Fatal("DescribeTasks does not show enableExecuteCommand as the tasks were run")
	}

	// Output and exit code, without a terminal.
	code, out, errs := f.capstanCLI("exec", task, "--cluster", f.cluster, "--", "sh", "-c", "echo hi; echo oops >&2; exit 3")
	if code != 3 || out != "hi\n" || !strings.Contains(errs, "oops") {
		t.Fatalf("exec: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
	code, out, _ = f.capstanCLI("exec", task, "--cluster", f.cluster, "--", "cat", "/proc/1/cmdline")
	if code != 0 || !strings.Contains(out, "trap") {
		t.Fatalf("exec cat: exit %d, %q", code, out)
	}

	// An interactive terminal: input, a resize, the exit code.
	ptm, pts := openPTY(t)
	if err := unix.IoctlSetWinsize(int(ptm.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 30, Col: 100}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "exec", task, "--cluster", f.cluster, "-it", "--", "sh")
	cmd.Env = append(f.srv.Env(), "CAPSTAN_ENDPOINT="+f.srv.URL, "HOME="+t.TempDir())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	var screen syncBuffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptm.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the terminal showed:\n%q", screen.String())
		}
	})
	say := func(line string) {
		if _, err := ptm.Write([]byte(line + "\r")); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "the shell's prompt", func() bool { return strings.Contains(screen.String(), "# ") })
	say("stty size; echo sum-$((6*7))")
	eventually(t, 20*time.Second, "the first size and the sum", func() bool {
		return strings.Contains(screen.String(), "30 100") && strings.Contains(screen.String(), "sum-42")
	})
	if err := unix.IoctlSetWinsize(int(ptm.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 41, Col: 123}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the new size", func() bool {
		say("stty size")
		time.Sleep(300 * time.Millisecond)
		return strings.Contains(screen.String(), "41 123")
	})
	say("exit 5")
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 {
		t.Fatalf("interactive exec ended with %v; want exit code 5\nscreen:\n%s", err, screen.String())
	}

	// A task run without enableExecuteCommand is refused with ECS's words.
	code, _, errs = f.capstanCLI("exec", plain, "--cluster", f.cluster, "--", "true")
	if code == 0 || !strings.Contains(errs, "InvalidParameterException") || !strings.Contains(errs, "execute command was not enabled when the task was run") {
		t.Fatalf("exec in a task without enableExecuteCommand: exit %d, %q", code, errs)
	}
	_, err = f.c.ExecuteCommand(context.Background(), &ecs.ExecuteCommandInput{Cluster: aws.String(f.cluster), Task: aws.String(task),
		Command: aws.String("sh -c 'unterminated"), Interactive: true})
	if err == nil || !strings.Contains(err.Error(), "command: has an unterminated single quote") {
		t.Fatalf("unbalanced quote: %v", err)
	}
	_, err = f.c.ExecuteCommand(context.Background(), &ecs.ExecuteCommandInput{Cluster: aws.String(f.cluster), Task: aws.String(task),
		Command: aws.String("true"), Interactive: true, Container: aws.String("nope")})
	if err == nil || !strings.Contains(err.Error(), `container: the task has no container "nope"`) {
		t.Fatalf("unknown container: %v", err)
	}

	// A token opens its session once; a wrong one opens nothing.
	sess, err := f.c.ExecuteCommand(context.Background(), &ecs.ExecuteCommandInput{Cluster: aws.String(f.cluster), Task: aws.String(task),
		Command: aws.String("echo once"), Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(sess.Session.StreamUrl)
	if !strings.HasPrefix(url, "ws://") || !strings.Contains(url, protocol.ExecPath+aws.ToString(sess.Session.SessionId)) {
		t.Fatalf("streamUrl %q", url)
	}
	dial := func(header string) (*websocket.Conn, error) {
		h := map[string][]string{}
		if header != "" {
			h[protocol.ExecTokenHeader] = []string{header}
		}
		c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
		return c, err
	}
	if c, err := dial("not-the-token"); err == nil || !strings.Contains(err.Error(), "403") {
		if c != nil {
			c.CloseNow()
		}
		t.Fatalf("a wrong token in the header: %v", err)
	}
	c, err := dial("")
	if err != nil {
		t.Fatal(err)
	}
	send := func(f protocol.ExecFrame) {
		b, _ := json.Marshal(f)
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	send(protocol.ExecFrame{Type: protocol.FrameHello, Token: aws.ToString(sess.Session.TokenValue)})
	send(protocol.ExecFrame{Type: protocol.FrameEOF})
	var got strings.Builder
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("session read: %v (output so far %q)", err, got.String())
		}
		var fr protocol.ExecFrame
		json.Unmarshal(b, &fr)
		if fr.Type == protocol.FrameOutput {
			got.Write(fr.Data)
			continue
		}
		if fr.Type != protocol.FrameExit || fr.Code == nil || *fr.Code != 0 || got.String() != "once\n" {
			t.Fatalf("session ended with %s; output %q", b, got.String())
		}
		break
	}
	c.CloseNow()
	if c, err := dial(aws.ToString(sess.Session.TokenValue)); err == nil || !strings.Contains(err.Error(), "403") {
		if c != nil {
			c.CloseNow()
		}
		t.Fatalf("a used token: %v", err)
	}

	// The sessions are in the audit trail: who, the task, the command, the end.
	var trail string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the audit trail's exec sessions:\n%s", trail)
		}
	})
	eventually(t, 20*time.Second, "the exec sessions in the audit trail", func() bool {
		trail, _ = f.capstanOK("audit", "--event", "ExecuteCommandSession", "--json")
		out := trail
		return strings.Contains(out, `"command":"sh -c 'echo hi; echo oops \u003e\u00262; exit 3'"`) && strings.Contains(out, `"exitCode":3`) &&
			strings.Contains(out, `"exitCode":5`) && strings.Contains(out, `"tty":true`) && strings.Contains(out, task) &&
			strings.Contains(out, `"ended":"exited"`) && strings.Contains(out, `"type":"Root"`)
	})

	// A user allowed DescribeTasks but not ecs:ExecuteCommand is refused.
	keys := f.userWithPolicy("viewer", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ecs:DescribeTasks","ecs:ListTasks"],"Resource":"*"}]}`)
	code, out, errs = f.capstanCLIEnv(keys, "exec", task, "--cluster", f.cluster, "--", "echo", "nope")
	if code == 0 || !strings.Contains(errs, "AccessDenied") || !strings.Contains(errs, "ecs:ExecuteCommand") || strings.Contains(out, "nope") {
		t.Fatalf("viewer without ecs:ExecuteCommand: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// Allowed on another container name only: still refused.
	f.awsOK("iam", "put-user-policy", "--user-name", "viewer", "--policy-name", "exec", "--policy-document",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ecs:ExecuteCommand","Resource":"*","Condition":{"StringEquals":{"ecs:container-name":"sidecar"}}}]}`)
	code, _, errs = f.capstanCLIEnv(keys, "exec", task, "--cluster", f.cluster, "--", "echo", "nope")
	if code == 0 || !strings.Contains(errs, "AccessDenied") {
		t.Fatalf("viewer allowed on container sidecar only: exit %d, %q", code, errs)
	}
	f.awsOK("iam", "put-user-policy", "--user-name", "viewer", "--policy-name", "exec", "--policy-document",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ecs:ExecuteCommand","Resource":"*","Condition":{"StringEquals":{"ecs:container-name":"main"}}}]}`)
	eventually(t, 10*time.Second, "the viewer may exec once allowed", func() bool {
		code, out, _ := f.capstanCLIEnv(keys, "exec", task, "--cluster", f.cluster, "--", "echo", "allowed")
		return code == 0 && out == "allowed\n"
	})
}

// TestExecIntoDaemon: a daemon created with enableExecuteCommand runs its
// tasks with it (DescribeTasks shows it) and accepts exec; one created
// without it refuses exec with ECS's words.
func TestExecIntoDaemon(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	cp := f.capacityProvider("fleet-mi")
	for _, name := range []string{"probe", "closed"} {
		td, err := f.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(name),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String(name), Image: aws.String(f.image), Memory: aws.Int32(32),
				Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String(name), ClusterArn: aws.String(f.cluster),
			DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn, CapacityProviderArns: []string{cp}, EnableExecuteCommand: name == "probe"}); err != nil {
			t.Fatal(err)
		}
	}
	agents.StartEnv(t, agents.EnvFor(t, f.srv, f.cluster, "fleet-mi", t.TempDir()), f.rt)
	var probe, closed []types.Task
	eventually(t, 90*time.Second, "both daemons' tasks RUNNING", func() bool {
		probe, closed = f.daemonTasks("probe", "RUNNING"), f.daemonTasks("closed", "RUNNING")
		return len(probe) == 1 && len(closed) == 1 && aws.ToString(probe[0].LastStatus) == "RUNNING" && aws.ToString(closed[0].LastStatus) == "RUNNING"
	})
	if !probe[0].EnableExecuteCommand || closed[0].EnableExecuteCommand {
		t.Fatalf("enableExecuteCommand: probe %v, closed %v", probe[0].EnableExecuteCommand, closed[0].EnableExecuteCommand)
	}
	code, out, errs := f.capstanCLI("exec", aws.ToString(probe[0].TaskArn), "--cluster", f.cluster, "--", "sh", "-c", "echo in-daemon")
	if code != 0 || out != "in-daemon\n" {
		t.Fatalf("exec into the daemon: exit %d, %q, %q", code, out, errs)
	}
	code, _, errs = f.capstanCLI("exec", aws.ToString(closed[0].TaskArn), "--cluster", f.cluster, "--", "true")
	if code == 0 || !strings.Contains(errs, "execute command was not enabled") {
		t.Fatalf("exec into a daemon without enableExecuteCommand: exit %d, %q", code, errs)
	}
}
