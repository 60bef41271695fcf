package engine

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/testenv"
)

// These tests run the engine on the local Docker Engine. Without one they
// fail when CI is set and are skipped otherwise (testenv.RequireDocker).

const dockerWait = 60 * time.Second

// sleeper runs until stopped. Test containers run under an init process
// (initProcessEnabled), so SIGTERM ends them at once with 143: a shell as
// PID 1 would ignore it and wait for the kill.
var sleeper = []string{"sleep", "3600"}

// dockerEnv is a real runtime, the test image and an instance ARN of the
// test's own, whose containers are removed at cleanup.
type dockerEnv struct {
	rt       *docker.Runtime
	image    string
	instance string
}

func newDockerEnv(t *testing.T) dockerEnv {
	t.Helper()
	rt := testenv.RequireDocker(t)
	image := testenv.BusyboxImage(t)
	b := make([]byte, 6)
	rand.Read(b)
	inst := "arn:aws:ecs:us-east-1:123456789012:container-instance/test/" + hex.EncodeToString(b)
	t.Cleanup(func() { testenv.RemoveLabeled(t, rt, map[string]string{LabelInstance: inst}) })
	return dockerEnv{rt: rt, image: image, instance: inst}
}

func (d dockerEnv) start(t *testing.T, cfg Config) *harness {
	t.Helper()
	cfg.Runtime, cfg.ContainerInstanceArn = d.rt, d.instance
	return startEngine(t, cfg)
}

func (d dockerEnv) ctr(name string, cmd ...string) shapes.ContainerDefinition {
	if len(cmd) == 0 {
		cmd = sleeper
	}
	c := ctrDef(name, d.image, cmd...)
	c.LinuxParameters = &shapes.LinuxParameters{InitProcessEnabled: new(true)}
	return c
}

// inspect returns the runtime's view of a task container.
func (d dockerEnv) inspect(t *testing.T, st protocol.TaskState, name string) runtime.Container {
	t.Helper()
	id := containerOf(st, name).RuntimeID
	if id == "" {
		t.Fatalf("container %s has no runtime ID in %+v", name, st)
	}
	c, err := d.rt.Inspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// list returns the task's containers in the runtime.
func (d dockerEnv) list(t *testing.T, arn string) []runtime.Container {
	t.Helper()
	cs, err := d.rt.List(t.Context(), map[string]string{LabelInstance: d.instance, LabelTaskArn: arn})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func uniqueTask(t *testing.T, cs ...shapes.ContainerDefinition) protocol.Task {
	b := make([]byte, 16)
	rand.Read(b)
	return newTestTask(hex.EncodeToString(b), cs...)
}

func TestDockerRunTask(t *testing.T) {
	d := newDockerEnv(t)
	h := d.start(t, Config{})
	app := d.ctr("app")
	app.PortMappings = []shapes.PortMapping{{ContainerPort: new(int32(8080)), Protocol: "tcp"}}
	task := uniqueTask(t, app)
	h.e.SetDesired([]protocol.Task{task})

	st := h.waitStatus(task.Arn, StatusRunning, dockerWait)
	rc := d.inspect(t, st, "app")
	if rc.State != runtime.StateRunning || rc.Labels[LabelTaskArn] != task.Arn || rc.Name != containerName(&task.Definition, task.Arn, "app") {
		t.Fatalf("container %+v", rc)
	}
	b := containerOf(st, "app").NetworkBindings
	if len(b) != 1 || *b[0].ContainerPort != 8080 || *b[0].HostPort == 0 {
		t.Errorf("bindings %+v", b)
	}
	h.e.SetDesired(nil)
	st = h.waitStatus(task.Arn, StatusStopped, dockerWait)
	if c := containerOf(st, "app"); c.ExitCode == nil || *c.ExitCode != 143 || c.Reason != "" {
		t.Errorf("container %+v, want SIGTERM's 143 and no reason (the engine stopped it)", c)
	}
}

func TestDockerEssentialExit(t *testing.T) {
	d := newDockerEnv(t)
	h := d.start(t, Config{})
	task := uniqueTask(t, d.ctr("app", "sh", "-c", "echo starting; echo 'bind: Address in use' >&2; exit 3"), nonEssential(d.ctr("side")))
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusStopped, dockerWait)
	if c := containerOf(st, "app"); c.ExitCode == nil || *c.ExitCode != 3 || !strings.HasPrefix(c.Reason, "exited with code 3; last output: ") || !strings.Contains(c.Reason, "bind: Address in use") {
		t.Fatalf("app %+v", c)
	}
	if st.StoppedReason != ReasonEssentialExited || st.StopCode != StopEssentialContainerExited {
		t.Fatalf("state %+v", st)
	}
	if c := containerOf(st, "side"); c.LastStatus != StatusStopped || c.ExitCode == nil {
		t.Errorf("side %+v", c)
	}
}

// TestDockerDependsOn checks START, SUCCESS and HEALTHY ordering by the
// containers' own start and finish times.
func TestDockerDependsOn(t *testing.T) {
	d := newDockerEnv(t)
	h := d.start(t, Config{})
	db := d.ctr("db", "sh", "-c", "sleep 1; touch /tmp/ready; exec sleep 3600")
	db.HealthCheck = &shapes.HealthCheck{Command: []string{"CMD-SHELL", "test -f /tmp/ready"}, Interval: new(int32(1)), Timeout: new(int32(2)), Retries: new(int32(1))}
	task := uniqueTask(t,
		dependsOn(dependsOn(d.ctr("app"), "init", "SUCCESS"), "db", "HEALTHY"),
		nonEssential(d.ctr("init", "sh", "-c", "sleep 0.5; exit 0")),
		db,
		dependsOn(nonEssential(d.ctr("side")), "db", "START"),
	)
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusRunning, dockerWait)
	if st.HealthStatus != HealthHealthy {
		t.Errorf("task health %s", st.HealthStatus)
	}
	app, init, dbc, side := d.inspect(t, st, "app"), d.inspect(t, st, "init"), d.inspect(t, st, "db"), d.inspect(t, st, "side")
	if !app.StartedAt.After(init.FinishedAt) {
		t.Errorf("app started %v, before init finished (SUCCESS) %v", app.StartedAt, init.FinishedAt)
	}
	if init.ExitCode != 0 || containerOf(st, "init").LastStatus != StatusStopped {
		t.Errorf("init %+v", containerOf(st, "init"))
	}
	// db writes its ready file a second after it starts; healthy comes
	// after that.
	if app.StartedAt.Sub(dbc.StartedAt) < time.Second {
		t.Errorf("app started %v after db, before db could be healthy", app.StartedAt.Sub(dbc.StartedAt))
	}
	if side.StartedAt.Before(dbc.StartedAt) {
		t.Errorf("side started %v, before db (START) %v", side.StartedAt, dbc.StartedAt)
	}
	// Stopping goes in reverse: db last.
	h.e.SetDesired(nil)
	st = h.waitStatus(task.Arn, StatusStopped, dockerWait)
	app, dbc, side = d.inspect(t, st, "app"), d.inspect(t, st, "db"), d.inspect(t, st, "side")
	if dbc.FinishedAt.Before(app.FinishedAt) || dbc.FinishedAt.Before(side.FinishedAt) {
		t.Errorf("db stopped %v, before its dependents app %v / side %v", dbc.FinishedAt, app.FinishedAt, side.FinishedAt)
	}
}

func TestDockerHealth(t *testing.T) {
	d := newDockerEnv(t)
	h := d.start(t, Config{})
	dir := t.TempDir()
	ready := filepath.Join(dir, "ok")
	app := d.ctr("app")
	app.HealthCheck = &shapes.HealthCheck{Command: []string{"CMD-SHELL", "test -f /probe/ok"}, Interval: new(int32(1)), Timeout: new(int32(2)), Retries: new(int32(1))}
	app.MountPoints = []shapes.MountPoint{{SourceVolume: "probe", ContainerPath: "/probe", ReadOnly: new(true)}}
	task := uniqueTask(t, app)
	task.Definition.Volumes = []shapes.Volume{{Name: "probe", Host: &shapes.HostVolumeProperties{SourcePath: dir}}}
	h.e.SetDesired([]protocol.Task{task})

	st := h.waitStatus(task.Arn, StatusRunning, dockerWait)
	if st.HealthStatus != HealthUnknown {
		t.Errorf("health before the first probe %s", st.HealthStatus)
	}
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h.wait(task.Arn, "HEALTHY", dockerWait, func(s protocol.TaskState) bool {
		return s.HealthStatus == HealthHealthy && containerOf(s, "app").HealthStatus == HealthHealthy
	})
	if err := os.Remove(ready); err != nil {
		t.Fatal(err)
	}
	h.wait(task.Arn, "UNHEALTHY", dockerWait, func(s protocol.TaskState) bool {
		return s.HealthStatus == HealthUnhealthy && containerOf(s, "app").HealthStatus == HealthUnhealthy
	})
}

// TestDockerStopTimeout: a container ignoring SIGTERM is killed once its
// stop timeout has passed.
func TestDockerStopTimeout(t *testing.T) {
	d := newDockerEnv(t)
	h := d.start(t, Config{})
	app := d.ctr("app", "sh", "-c", `trap "" TERM; while true; do sleep 1; done`)
	app.LinuxParameters = nil // the shell itself must see the signal
	app.StopTimeout = new(int32(2))
	task := uniqueTask(t, app)
	h.e.SetDesired([]protocol.Task{task})
	h.waitStatus(task.Arn, StatusRunning, dockerWait)
	asked := time.Now()
	h.e.SetDesired(nil)
	st := h.waitStatus(task.Arn, StatusStopped, dockerWait)
	if c := containerOf(st, "app"); c.ExitCode == nil || *c.ExitCode != 137 {
		t.Fatalf("container %+v, want SIGKILL's 137", c)
	}
	if rc := d.inspect(t, st, "app"); rc.FinishedAt.Sub(asked) < 2*time.Second {
		t.Errorf("killed %v after the stop order, before the 2s stop timeout", rc.FinishedAt.Sub(asked))
	}
}

func TestDockerRestartPolicy(t *testing.T) {
	d := newDockerEnv(t)
	h := d.start(t, Config{})
	app := d.ctr("app", "sh", "-c", "sleep 0.3; exit 1")
	app.RestartPolicy = &shapes.ContainerRestartPolicy{Enabled: new(true), RestartAttemptPeriod: new(int32(60))}
	task := uniqueTask(t, app)
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusRunning, dockerWait)
	id := containerOf(st, "app").RuntimeID
	waitFor(t, "two restarts", dockerWait, func() bool {
		info, _ := h.e.Task(task.Arn)
		return info.Containers[0].RestartCount >= 2
	})
	if cs := d.list(t, task.Arn); len(cs) != 1 || cs[0].ID != id {
		t.Fatalf("restarts made other containers: %+v", cs)
	}
	for _, s := range h.of(task.Arn) {
		if s.LastStatus == StatusStopping || s.LastStatus == StatusStopped {
			t.Fatalf("task stopped though its container restarts: %+v", s)
		}
	}
}

// TestDockerRestartAdopts: a new engine on the same store adopts the running
// containers: no duplicates, nothing restarted, the same state.
func TestDockerRestartAdopts(t *testing.T) {
	d := newDockerEnv(t)
	store := newMemStore()
	h := d.start(t, Config{Store: store})
	task := uniqueTask(t, d.ctr("app"), nonEssential(d.ctr("once", "sh", "-c", "exit 0")))
	h.e.SetDesired([]protocol.Task{task})
	h.wait(task.Arn, "RUNNING, once done", dockerWait, func(s protocol.TaskState) bool {
		return s.LastStatus == StatusRunning && containerOf(s, "once").LastStatus == StatusStopped
	})
	h.stop()
	states := h.of(task.Arn)
	before := states[len(states)-1]
	startedAt := d.inspect(t, before, "app").StartedAt

	h2 := d.start(t, Config{Store: store})
	after := h2.wait(task.Arn, "the restored state", dockerWait, func(protocol.TaskState) bool { return true })
	b, a := before, after
	b.Seq, a.Seq = 0, 0
	if !sameState(b, a) || after.Seq <= before.Seq {
		t.Fatalf("state across the restart:\n%+v\n%+v", before, after)
	}
	h2.e.SetDesired([]protocol.Task{task})
	time.Sleep(time.Second) // several reconcile passes: checking that nothing changes
	cs := d.list(t, task.Arn)
	if len(cs) != 2 {
		t.Fatalf("%d containers after the restart, want 2", len(cs))
	}
	if rc := d.inspect(t, after, "app"); rc.State != runtime.StateRunning || !rc.StartedAt.Equal(startedAt) {
		t.Fatalf("app was restarted: %+v", rc)
	}
	if s := h2.of(task.Arn); len(s) != 1 {
		t.Errorf("states after the restart: %s", h2.dump(task.Arn))
	}
}

// TestDockerVanished: a container removed behind the engine's back is
// reported STOPPED, and stops its task.
func TestDockerVanished(t *testing.T) {
	d := newDockerEnv(t)
	h := d.start(t, Config{})
	task := uniqueTask(t, d.ctr("app"))
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusRunning, dockerWait)
	if err := d.rt.Remove(t.Context(), containerOf(st, "app").RuntimeID); err != nil {
		t.Fatal(err)
	}
	st = h.waitStatus(task.Arn, StatusStopped, dockerWait)
	if c := containerOf(st, "app"); c.Reason != ReasonVanished {
		t.Fatalf("container %+v", c)
	}
}
