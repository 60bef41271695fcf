package fault

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// agentDBDeadline bounds recovery from an agent restarted without its
// database: it registers again and takes over what runs.
var agentDBDeadline = 60 * time.Second

// instanceContainers is the IDs of the running task containers Docker
// holds for an instance.
func (f *fleet) instanceContainers(arn string) []string {
	f.t.Helper()
	cs, err := f.rt.List(context.Background(), map[string]string{"com.capstan.instance": arn})
	if err != nil {
		f.t.Fatal(err)
	}
	var ids []string
	for _, c := range cs {
		if c.State == runtime.StateRunning && c.Labels["com.capstan.task-arn"] != "" {
			ids = append(ids, c.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestAgentDatabaseDeleted restarts an agent with its local database (its
// whole data dir) deleted and the same credential. The credential is bound
// to its container instance, so it registers as the same instance; its
// engine finds the instance's containers by their labels and adopts them
// before the server's desired tasks arrive. Nothing is replaced, started
// twice or restarted: the same containers run the same tasks.
func TestAgentDatabaseDeleted(t *testing.T) {
	skipHollow(t, "the agent process is killed and started again with its database removed")
	f := newFleet(t, nil)
	n := *instancesFlag
	f.setup(n, false)
	before := f.agents()
	arn := slices.Sorted(maps.Keys(before))[0]
	a := before[arn]
	tasksBefore := f.mustSnapshot().tasks
	ctrs := f.instanceContainers(arn)
	if len(ctrs) < 2 {
		t.Fatalf("instance %s runs containers %v; want its daemon's and the service's", arn, ctrs)
	}
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(a.pid), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	// The old agent is frozen, not killed, until the new one is up: its
	// provisioner reads a dead pid as a lost instance, and the fault is a
	// missing database, not a missing machine.
	if err := syscall.Kill(a.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	data := ""
	for _, kv := range strings.Split(string(env), "\x00") {
		if d, ok := strings.CutPrefix(kv, "ECS_DATADIR="); ok {
			data = d
		}
	}
	if data == "" || !strings.HasPrefix(data, a.dir) {
		t.Fatalf("agent %d has data dir %q, not under %s", a.pid, data, a.dir)
	}
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(a.dir, "agent.log"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(f.bin, "agent")
	cmd.Env = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait() // reaped: a zombie reads as a dead instance
	if err := os.WriteFile(filepath.Join(a.dir, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(a.pid, syscall.SIGKILL)
	t.Logf("agent %d of %s frozen, its data dir deleted, agent %d started with the same credential", a.pid, arn, cmd.Process.Pid)

	eventually(t, agentDBDeadline, "the new agent registered", func() bool {
		b, _ := os.ReadFile(filepath.Join(a.dir, "agent.log"))
		return strings.Count(string(b), `"msg":"registered"`) >= 2
	})
	f.converge("agent restarted without its database", agentDBDeadline, f.sessions(n))
	if got := registeredAs(filepath.Join(a.dir, "agent.log")); got != arn {
		t.Fatalf("the agent registered as %s, want its instance %s", got, arn)
	}
	// Nothing changes for a while: no container started twice or
	// restarted, no task replaced.
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		if got := f.instanceContainers(arn); !slices.Equal(got, ctrs) {
			t.Fatalf("instance %s ran containers %v before the restart, %v after", arn, ctrs, got)
		}
	}
	f.converge("agent restarted without its database, settled", agentDBDeadline, f.sessions(n))
	f.verify("agent restarted without its database")
	after := f.agents()
	if !slices.Equal(slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before))) {
		t.Errorf("instances before %v, after %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
	if after[arn].pid != cmd.Process.Pid {
		t.Errorf("instance %s is served by agent %d, want the restarted %d", arn, after[arn].pid, cmd.Process.Pid)
	}
	tasksAfter := f.mustSnapshot().tasks
	for id, tk := range tasksBefore {
		if got := tasksAfter[id]; got.LastStatus == nil || *got.LastStatus != *tk.LastStatus {
			t.Errorf("task %s was %s before the restart, %v after", id, *tk.LastStatus, got.LastStatus)
		}
	}
	if len(tasksAfter) != len(tasksBefore) {
		t.Errorf("%d tasks before the restart, %d after", len(tasksBefore), len(tasksAfter))
	}
}
