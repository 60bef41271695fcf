package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/agent/resources"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
)

const wait = 10 * time.Second

func TestFakeRunTask(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{
		Runtime:     rt,
		MetadataURI: func(task, c string) string { return "http://169.254.170.2/v4/" + taskID(task) + "/" + c },
		ExtraHosts:  []string{"daemon:169.254.172.2"},
	})
	app := ctrDef("app", "busybox", "sleep", "1000")
	app.PortMappings = []shapes.PortMapping{{ContainerPort: new(int32(80)), HostPort: new(int32(8080)), Protocol: "tcp"}, {ContainerPort: new(int32(81))}}
	app.DockerLabels = map[string]string{"team": "a", LabelTaskArn: "spoof"}
	task := newTestTask("t1abcdef0123456789", app)
	h.e.SetDesired([]protocol.Task{task})

	st := h.waitStatus(task.Arn, StatusRunning, wait)
	c := containerOf(st, "app")
	if c.LastStatus != StatusRunning || c.RuntimeID == "" || c.ImageDigest != "sha256:d1g3st" {
		t.Fatalf("container state %+v", c)
	}
	if len(c.NetworkBindings) != 2 || *c.NetworkBindings[0].HostPort != 8080 || *c.NetworkBindings[1].HostPort == 0 {
		t.Errorf("bindings %+v", c.NetworkBindings)
	}
	// Admitted at once, it never reports PROVISIONING (nor its pull times
	// or container ID apart): two reports in all.
	if got := h.lastStatuses(task.Arn); !slices.Equal(got, []string{StatusPending, StatusRunning}) {
		t.Errorf("statuses %v", got)
	}
	if st.PullStartedAt.IsZero() || st.PullStoppedAt.IsZero() || st.StartedAt.IsZero() || st.HealthStatus != HealthUnknown {
		t.Errorf("task state %+v", st)
	}

	spec := rt.spec(c.RuntimeID)
	if want := "capstan-fam-3-app-ef0123456789"; spec.Name != want {
		t.Errorf("name %q, want %q", spec.Name, want)
	}
	if spec.Labels[LabelTaskArn] != task.Arn || spec.Labels["team"] != "a" || spec.Labels[LabelInstance] != testInstance ||
		spec.Labels[LabelTaskFamily] != "fam" || spec.Labels[LabelTaskRevision] != "3" || spec.Labels[LabelContainerName] != "app" {
		t.Errorf("labels %v", spec.Labels)
	}
	if !slices.Contains(spec.Env, EnvMetadataURIv4+"=http://169.254.170.2/v4/t1abcdef0123456789/app") {
		t.Errorf("env %v", spec.Env)
	}
	if !slices.Contains(spec.ExtraHosts, "daemon:169.254.172.2") || spec.MemoryLimit != 64<<20 || spec.CPUShares != 2 {
		t.Errorf("spec %+v", spec)
	}

	info, ok := h.e.Task(task.Arn)
	if !ok || info.Containers[0].RuntimeID != c.RuntimeID || info.MemoryMiB != 64 || info.DesiredStatus != StatusRunning {
		t.Fatalf("Task() = %+v, %v", info, ok)
	}
	// The view shows what the container was created with (built once per
	// definition, published with every state).
	if ci := info.Containers[0]; !maps.Equal(ci.Labels, spec.Labels) || ci.CPUShares != spec.CPUShares || ci.MemoryMiB != 64 || ci.LogDriver != spec.LogDriver {
		t.Errorf("container view %+v, created with %+v", ci, spec)
	}
	if info2, ok := h.e.TaskByContainerID(c.RuntimeID); !ok || info2.Arn != task.Arn {
		t.Fatalf("TaskByContainerID: %v", ok)
	}
	if snap := h.e.Snapshot(); len(snap) != 1 || snap[0].LastStatus != StatusRunning {
		t.Fatalf("snapshot %+v", snap)
	}
	if s := h.e.Stats(); s.Tasks[StatusRunning] != 1 || s.Pulls != 1 || s.ReservedMemory != 64 {
		t.Errorf("stats %+v", s)
	}

	// The same desired set again changes nothing: once a probe in it
	// reported, the task is the one that ran, with the same state.
	before, _ := h.e.Task(task.Arn)
	h.applied([]protocol.Task{task}, probe("same-set", StatusStopped), StatusStopped)
	if after, ok := h.e.Task(task.Arn); !ok || after.State.Seq != before.State.Seq || after.State.LastStatus != StatusRunning || rt.count("create") != 1 {
		t.Errorf("repeated desired set made changes: %+v (known %v), was %+v", after.State, ok, before.State)
	}

	// Leaving the desired set stops it.
	h.e.SetDesired(nil)
	st = h.waitStatus(task.Arn, StatusStopped, wait)
	if st.StoppedReason != ReasonNotDesired || *containerOf(st, "app").ExitCode != 143 {
		t.Errorf("stopped state %+v", st)
	}
	if s := h.e.Stats(); s.ReservedMemory != 0 {
		t.Errorf("resources not released: %+v", s)
	}
}

func TestFakeEssentialExit(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{Runtime: rt})
	task := newTestTask("t2", ctrDef("app", "busybox", "exit", "3"), nonEssential(ctrDef("side", "busybox", "sleep")))
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusStopped, wait)
	app, side := containerOf(st, "app"), containerOf(st, "side")
	if app.ExitCode == nil || *app.ExitCode != 3 || side.LastStatus != StatusStopped {
		t.Fatalf("containers %+v %+v", app, side)
	}
	if st.StopCode != StopEssentialContainerExited || st.StoppedReason != ReasonEssentialExited || st.StoppedAt.IsZero() {
		t.Fatalf("state %+v", st)
	}
}

func TestFakePullFailure(t *testing.T) {
	rt := newFakeRuntime()
	rt.pullErr["nope"] = errors.New("manifest unknown")
	h := startEngine(t, Config{Runtime: rt})
	task := newTestTask("t3", ctrDef("app", "nope"))
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusStopped, wait)
	want := "CannotPullContainerError: manifest unknown"
	if st.StoppedReason != want || containerOf(st, "app").Reason != want || st.StopCode != StopTaskFailedToStart {
		t.Fatalf("state %+v", st)
	}
	if h.e.Stats().PullFailures != 1 {
		t.Errorf("pull failures not counted")
	}
}

func TestFakeRefusals(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{Runtime: rt, DisablePrivileged: true})
	priv := ctrDef("app", "busybox")
	priv.Privileged = new(true)
	t1 := newTestTask("priv", priv)
	t2 := newTestTask("daemon", priv)
	t2.Kind = protocol.KindDaemon
	t2.Definition.NetworkMode = "daemon"
	t3 := newTestTask("vpc", ctrDef("app", "busybox"))
	t3.Definition.NetworkMode = "awsvpc"
	t4 := newTestTask("scratch", ctrDef("app", "busybox"))
	t4.Definition.Volumes = []shapes.Volume{{Name: "scratch"}}
	h.e.SetDesired([]protocol.Task{t1, t2, t3, t4})

	if st := h.waitStatus(t1.Arn, StatusStopped, wait); st.StoppedReason != ReasonPrivileged {
		t.Errorf("privileged: %q", st.StoppedReason)
	}
	h.waitStatus(t2.Arn, StatusRunning, wait)
	if st := h.waitStatus(t3.Arn, StatusStopped, wait); !strings.Contains(st.StoppedReason, "networkMode awsvpc needs the instance's task network") {
		t.Errorf("awsvpc: %q", st.StoppedReason)
	}
	if st := h.waitStatus(t4.Arn, StatusStopped, wait); !strings.Contains(st.StoppedReason, "no volume directory") {
		t.Errorf("scratch volume: %q", st.StoppedReason)
	}
	for _, task := range []protocol.Task{t1, t3, t4} {
		if got := h.lastStatuses(task.Arn); !slices.Equal(got, []string{StatusStopped}) {
			t.Errorf("%s went through %v", task.Arn, got)
		}
	}
	if rt.count("create") != 1 {
		t.Errorf("refused tasks created containers")
	}
}

func TestFakeServerStop(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{Runtime: rt})
	task := newTestTask("t4", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{task})
	h.waitStatus(task.Arn, StatusRunning, wait)
	task.DesiredStatus, task.StopCode, task.StoppedReason = StatusStopped, "UserInitiated", "stopped by alice"
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusStopped, wait)
	if st.StopCode != "UserInitiated" || st.StoppedReason != "stopped by alice" || st.StoppingAt.IsZero() {
		t.Fatalf("state %+v", st)
	}
	if got := h.lastStatuses(task.Arn); !slices.Equal(got, []string{StatusPending, StatusRunning, StatusStopping, StatusStopped}) {
		t.Errorf("statuses %v", got)
	}
	// RUNNING again is ignored: desired status only moves forward. The
	// task's view showing the RUNNING entry says it has taken it.
	task.DesiredStatus = StatusRunning
	before, _ := h.e.Task(task.Arn)
	// A task first seen desired STOPPED is reported STOPPED without
	// running (it also shows the set was applied).
	gone := probe("t4b", StatusStopped)
	h.applied([]protocol.Task{task}, gone, StatusStopped)
	if st := h.of(gone.Arn)[0]; containerOf(st, "probe").RuntimeID != "" || rt.count("create") != 1 {
		t.Fatalf("state %+v", st)
	}
	after := h.taken(task.Arn, "the RUNNING entry taken", func(d protocol.Task) bool { return d.DesiredStatus == StatusRunning })
	if after.State.Seq != before.State.Seq || after.State.LastStatus != StatusStopped || rt.count("start") != 1 {
		t.Fatalf("restarted a stopped task: %+v, was %+v", after.State, before.State)
	}
}

func TestFakeDependsOn(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{Runtime: rt})
	db := ctrDef("db", "busybox")
	db.HealthCheck = &shapes.HealthCheck{Command: []string{"CMD-SHELL", "true"}, Interval: new(int32(5))}
	task := newTestTask("t5",
		dependsOn(dependsOn(ctrDef("app", "busybox"), "init", "SUCCESS"), "db", "HEALTHY"),
		nonEssential(ctrDef("init", "busybox", "exit", "0")),
		db,
		dependsOn(nonEssential(ctrDef("side", "busybox")), "db", "START"),
	)
	h.e.SetDesired([]protocol.Task{task})
	waitFor(t, "db and side to run", wait, func() bool {
		_, okDB := rt.byName(task.Arn, "db")
		s, okSide := rt.byName(task.Arn, "side")
		return okDB && okSide && s.State == runtime.StateRunning
	})
	if _, ok := rt.byName(task.Arn, "app"); ok {
		t.Fatal("app created before db was healthy")
	}
	if st := h.e.Snapshot(); st[0].LastStatus != StatusPending {
		t.Fatalf("task %s before app runs", st[0].LastStatus)
	}
	dbc, _ := rt.byName(task.Arn, "db")
	rt.setHealth(dbc.ID, runtime.HealthHealthy)
	st := h.waitStatus(task.Arn, StatusRunning, wait)
	if st.HealthStatus != HealthHealthy || containerOf(st, "init").LastStatus != StatusStopped || *containerOf(st, "init").ExitCode != 0 {
		t.Fatalf("state %+v", st)
	}
	app, _ := rt.byName(task.Arn, "app")
	init, _ := rt.byName(task.Arn, "init")
	if !app.StartedAt.After(init.FinishedAt) {
		t.Errorf("app started %v, before init finished %v", app.StartedAt, init.FinishedAt)
	}

	// Unhealthy is reported; stopping goes dependents first: app and side
	// before db.
	rt.setHealth(dbc.ID, runtime.HealthUnhealthy)
	h.wait(task.Arn, "UNHEALTHY", wait, func(s protocol.TaskState) bool { return s.HealthStatus == HealthUnhealthy })
	h.e.SetDesired(nil)
	h.waitStatus(task.Arn, StatusStopped, wait)
	app, _ = rt.byName(task.Arn, "app")
	side, _ := rt.byName(task.Arn, "side")
	dbc, _ = rt.byName(task.Arn, "db")
	if dbc.FinishedAt.Before(app.FinishedAt) || dbc.FinishedAt.Before(side.FinishedAt) {
		t.Errorf("db stopped at %v, before app %v or side %v", dbc.FinishedAt, app.FinishedAt, side.FinishedAt)
	}
}

func TestFakeDependencyFailures(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{Runtime: rt, StartTimeout: 300 * time.Millisecond})
	// SUCCESS after a non-zero exit fails at once.
	t1 := newTestTask("dep1", dependsOn(ctrDef("app", "busybox"), "init", "SUCCESS"), nonEssential(ctrDef("init", "busybox", "exit", "2")))
	// HEALTHY that never comes fails after the dependency's start timeout.
	db := ctrDef("db", "busybox")
	db.HealthCheck = &shapes.HealthCheck{Command: []string{"CMD", "true"}}
	t2 := newTestTask("dep2", dependsOn(ctrDef("app", "busybox"), "db", "HEALTHY"), db)
	h.e.SetDesired([]protocol.Task{t1, t2})

	st := h.waitStatus(t1.Arn, StatusStopped, wait)
	if want := "DependencyError: container app: dependency init exited with code 2, not 0"; st.StoppedReason != want {
		t.Errorf("reason %q, want %q", st.StoppedReason, want)
	}
	st = h.waitStatus(t2.Arn, StatusStopped, wait)
	if want := "DependencyError: container app: dependency db did not reach HEALTHY within 300ms"; st.StoppedReason != want {
		t.Errorf("reason %q, want %q", st.StoppedReason, want)
	}
	if containerOf(st, "app").RuntimeID != "" || containerOf(st, "db").LastStatus != StatusStopped {
		t.Errorf("containers %+v", st.Containers)
	}
}

func TestFakeRestartPolicy(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{Runtime: rt})
	app := ctrDef("app", "busybox")
	app.RestartPolicy = &shapes.ContainerRestartPolicy{Enabled: new(true), IgnoredExitCodes: []int32{7}, RestartAttemptPeriod: new(int32(60))}
	task := newTestTask("t6", app)
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusRunning, wait)
	id := containerOf(st, "app").RuntimeID

	rt.exit(id, 1) // a fast exit: restarted after 1s
	waitFor(t, "a restart", wait, func() bool {
		info, _ := h.e.Task(task.Arn)
		c, _ := rt.byName(task.Arn, "app")
		return info.Containers[0].RestartCount == 1 && c.State == runtime.StateRunning
	})
	if rt.count("create") != 1 {
		t.Errorf("restart made a new container")
	}
	if s := h.of(task.Arn); s[len(s)-1].LastStatus != StatusRunning {
		t.Errorf("task left RUNNING during the restart: %v", h.lastStatuses(task.Arn))
	}
	if h.e.Stats().Restarts != 1 {
		t.Errorf("restart not counted")
	}

	// An ignored exit code stops the task like any essential exit.
	rt.exit(id, 7)
	st = h.waitStatus(task.Arn, StatusStopped, wait)
	if *containerOf(st, "app").ExitCode != 7 || st.StopCode != StopEssentialContainerExited {
		t.Fatalf("state %+v", st)
	}
}

func TestFakeAdmission(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{Runtime: rt, Resources: resources.Capacity{CPU: 4096, MemoryMiB: 1024}})
	mk := func(id, kind string, mem int32) protocol.Task {
		c := ctrDef("app", "busybox")
		c.Memory = new(mem)
		task := newTestTask(id, c)
		task.Kind = kind
		return task
	}
	a, b := mk("a", protocol.KindService, 512), mk("b", protocol.KindService, 512)
	h.e.SetDesired([]protocol.Task{a, b})
	h.waitStatus(a.Arn, StatusRunning, wait)
	h.waitStatus(b.Arn, StatusRunning, wait)

	// Full: a standalone task that cannot fit is refused at once.
	c := mk("c", protocol.KindStandalone, 512)
	h.e.SetDesired([]protocol.Task{a, b, c})
	st := h.waitStatus(c.Arn, StatusStopped, wait)
	if want := "RESOURCE:MEMORY - task needs 512 MiB, 0 MiB free of 1024 MiB"; st.StoppedReason != want {
		t.Fatalf("reason %q, want %q", st.StoppedReason, want)
	}

	// While b stops, a daemon waits for its memory rather than being
	// refused, and a standalone task queued before it does not jump ahead.
	gate := make(chan struct{})
	rt.mu.Lock()
	rt.stopGate = gate
	rt.mu.Unlock()
	d := mk("d", protocol.KindDaemon, 512)
	s := mk("s", protocol.KindStandalone, 512)
	b.DesiredStatus = StatusStopped
	h.e.SetDesired([]protocol.Task{a, b, s, d})
	waitFor(t, "both waiting for b's memory", wait, func() bool {
		info, _ := h.e.Task(d.Arn)
		return h.e.Stats().WaitingForRoom == 2 && info.Waiting != ""
	})
	if info, _ := h.e.Task(d.Arn); info.Waiting != "RESOURCE:MEMORY - task needs 512 MiB, 0 MiB free of 1024 MiB" {
		t.Errorf("waiting reason %q", info.Waiting)
	}
	// Waiting, it is reported PROVISIONING.
	h.waitStatus(d.Arn, StatusProvisioning, wait)
	close(gate)
	h.waitStatus(d.Arn, StatusRunning, wait)
	if got := h.lastStatuses(d.Arn); !slices.Equal(got, []string{StatusProvisioning, StatusPending, StatusRunning}) {
		t.Errorf("statuses of the task that waited: %v", got)
	}
	st = h.waitStatus(s.Arn, StatusStopped, wait)
	if !strings.HasPrefix(st.StoppedReason, "RESOURCE:MEMORY") {
		t.Errorf("standalone: %q", st.StoppedReason)
	}
	if h.of(b.Arn)[len(h.of(b.Arn))-1].LastStatus != StatusStopped {
		t.Errorf("b not stopped")
	}
}

func TestFakeHungPullBlocksNothing(t *testing.T) {
	rt := newFakeRuntime()
	rt.hangPull["huge"] = true
	h := startEngine(t, Config{Runtime: rt})
	slow := newTestTask("slow", ctrDef("app", "huge"))
	fast := newTestTask("fast", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{slow, fast})
	h.waitStatus(fast.Arn, StatusRunning, wait)
	h.waitStatus(slow.Arn, StatusPending, wait)
	// The stuck task still takes a stop order: the pull is abandoned.
	h.e.SetDesired([]protocol.Task{fast})
	st := h.waitStatus(slow.Arn, StatusStopped, wait)
	if c := containerOf(st, "app"); c.RuntimeID != "" || c.Reason != "" {
		t.Fatalf("container %+v", c)
	}
}

func TestFakeHungStart(t *testing.T) {
	rt := newFakeRuntime()
	rt.hangStart = true
	h := startEngine(t, Config{Runtime: rt, StartTimeout: 200 * time.Millisecond})
	task := newTestTask("hang", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusStopped, wait)
	if !strings.HasPrefix(st.StoppedReason, "CannotStartContainerError: ") {
		t.Fatalf("reason %q", st.StoppedReason)
	}
}

func TestFakeChangesNeverBlock(t *testing.T) {
	rt := newFakeRuntime()
	e, err := New(Config{Runtime: rt, Store: newMemStore(), ContainerInstanceArn: testInstance, ReconcileInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var tasks []protocol.Task
	for i := range 50 {
		tasks = append(tasks, newTestTask("n"+string(rune('a'+i%26))+string(rune('a'+i/26)), ctrDef("app", "busybox")))
	}
	e.SetDesired(tasks) // nobody reads Changes
	waitFor(t, "all tasks running with Changes unread", wait, func() bool {
		return e.Stats().Tasks[StatusRunning] == 50
	})
	// Everything is still delivered, in order, once someone reads.
	n := 0
	for n < 50*2 { // PENDING and RUNNING each
		select {
		case <-e.Changes():
			n++
		case <-time.After(wait):
			t.Fatalf("got %d states, want %d", n, 100)
		}
	}
}

func TestFakeVanished(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{Runtime: rt})
	task := newTestTask("t7", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusRunning, wait)
	rt.removeBehindBack(containerOf(st, "app").RuntimeID)
	st = h.waitStatus(task.Arn, StatusStopped, wait)
	if c := containerOf(st, "app"); c.Reason != ReasonVanished || c.ExitCode != nil {
		t.Fatalf("container %+v", c)
	}
	if h.e.Stats().Vanished != 1 {
		t.Errorf("vanish not counted")
	}
}

func TestFakeCleanup(t *testing.T) {
	rt := newFakeRuntime()
	dir := t.TempDir()
	h := startEngine(t, Config{Runtime: rt, CleanupWait: 100 * time.Millisecond, VolumeDir: dir})
	app := ctrDef("app", "busybox", "exit", "0")
	app.MountPoints = []shapes.MountPoint{{SourceVolume: "scratch", ContainerPath: "/data"}}
	task := newTestTask("t8", app)
	task.Definition.Volumes = []shapes.Volume{{Name: "scratch"}}
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusStopped, wait)
	id := containerOf(st, "app").RuntimeID
	if m := rt.spec(id).Mounts; len(m) != 1 || !strings.HasPrefix(m[0].Source, dir+"/tasks/t8/") {
		t.Fatalf("mounts %+v", m)
	}
	waitFor(t, "cleanup", wait, func() bool {
		_, known := h.e.Task(task.Arn)
		_, exists := rt.byName(task.Arn, "app")
		return !known && !exists && !h.store.has(task.Arn)
	})
	// The server still listing it does not bring it back: a task listed
	// after it in the same set runs, and it does not.
	h.applied([]protocol.Task{task}, probe("t8-after", StatusRunning), StatusRunning)
	_, exists := rt.byName(task.Arn, "app")
	states := h.of(task.Arn)
	if _, known := h.e.Task(task.Arn); known || exists || states[len(states)-1].LastStatus != StatusStopped || rt.count("create") != 2 {
		t.Fatal("a cleaned-up task came back")
	}
}

// TestFakeRestartAdopts restarts the engine on the same store and runtime:
// containers are adopted, not recreated or stopped, and the state is the
// same.
func TestFakeRestartAdopts(t *testing.T) {
	rt := newFakeRuntime()
	store := newMemStore()
	h := startEngine(t, Config{Runtime: rt, Store: store})
	run := newTestTask("r1", ctrDef("app", "busybox"), nonEssential(ctrDef("once", "busybox", "exit", "0")))
	h.e.SetDesired([]protocol.Task{run})
	before := h.waitStatus(run.Arn, StatusRunning, wait)
	h.stop()
	if rt.count("stop") != 0 {
		t.Fatal("stopping the engine stopped containers")
	}

	h2 := startEngine(t, Config{Runtime: rt, Store: store})
	after := h2.wait(run.Arn, "re-announced state", wait, func(protocol.TaskState) bool { return true })
	if after.Seq <= before.Seq {
		t.Errorf("seq %d after restart, was %d", after.Seq, before.Seq)
	}
	after.Seq, before.Seq = 0, 0
	if !sameState(before, after) {
		t.Errorf("state changed across restart:\n%+v\n%+v", before, after)
	}
	// The desired set and the listings after it change nothing. A probe
	// shows the set applied; a newer version of the entry, once the task
	// shows it, that the task handled what the listings told it.
	h2.applied([]protocol.Task{run}, probe("r1-probe", StatusStopped), StatusStopped)
	h2.listed(rt)
	run.Version++
	h2.e.SetDesired([]protocol.Task{run})
	h2.taken(run.Arn, "the newer entry taken", func(d protocol.Task) bool { return d.Version == run.Version })
	if rt.count("create") != 2 || rt.count("stop") != 0 || rt.count("start") != 2 {
		t.Fatalf("calls after restart: %v", rt.calls)
	}
	h2.e.SetDesired(nil)
	h2.waitStatus(run.Arn, StatusStopped, wait)
}

func sameState(a, b protocol.TaskState) bool {
	if a.LastStatus != b.LastStatus || a.HealthStatus != b.HealthStatus || len(a.Containers) != len(b.Containers) ||
		!a.StartedAt.Equal(b.StartedAt) || !a.PullStartedAt.Equal(b.PullStartedAt) {
		return false
	}
	for i := range a.Containers {
		x, y := a.Containers[i], b.Containers[i]
		if x.Name != y.Name || x.RuntimeID != y.RuntimeID || x.LastStatus != y.LastStatus || (x.ExitCode == nil) != (y.ExitCode == nil) ||
			(x.ExitCode != nil && *x.ExitCode != *y.ExitCode) || x.Reason != y.Reason {
			return false
		}
	}
	return true
}

// TestFakeCrashBeforeSave: a container exists (created before a crash) but
// the record never learnt its ID. The engine adopts it, no duplicate.
func TestFakeCrashBeforeSave(t *testing.T) {
	rt := newFakeRuntime()
	store := newMemStore()
	task := newTestTask("crash", ctrDef("app", "busybox"))
	// What the engine would have made, as if it died right after Create.
	rt.images["busybox"] = runtime.Image{ID: "sha256:busybox"}
	cfg := Config{Cluster: "c", ContainerInstanceArn: testInstance}
	spec := buildSpec(specInput{cfg: &cfg, task: &task, def: &task.Definition, networkMode: "bridge", cpuShares: 2})
	if _, err := rt.Create(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	h := startEngine(t, Config{Runtime: rt, Store: store})
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusRunning, wait)
	if rt.count("create") != 1 {
		t.Fatalf("%d creates: a duplicate was made", rt.count("create"))
	}
	c, _ := rt.byName(task.Arn, "app")
	if containerOf(st, "app").RuntimeID != c.ID {
		t.Fatal("adopted the wrong container")
	}
}

// TestFakeCorruptRecord: an unreadable record is dropped; the task is
// rebuilt from labels and the next desired set, its container kept.
func TestFakeCorruptRecord(t *testing.T) {
	rt := newFakeRuntime()
	store := newMemStore()
	h := startEngine(t, Config{Runtime: rt, Store: store})
	task := newTestTask("bad", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{task})
	before := h.waitStatus(task.Arn, StatusRunning, wait)
	h.stop()
	store.PutTask(task.Arn, []byte("{not json"))

	h2 := startEngine(t, Config{Runtime: rt, Store: store})
	waitFor(t, "placeholder from labels", wait, func() bool {
		info, ok := h2.e.Task(task.Arn)
		return ok && len(info.Containers) == 1 && info.Containers[0].KnownStatus == StatusRunning
	})
	h2.e.SetDesired([]protocol.Task{task})
	st := h2.waitStatus(task.Arn, StatusRunning, wait)
	if st.Seq <= before.Seq || containerOf(st, "app").RuntimeID != containerOf(before, "app").RuntimeID {
		t.Fatalf("rebuilt state %+v (before %+v)", st, before)
	}
	if rt.count("create") != 1 || rt.count("stop") != 0 {
		t.Fatalf("calls %v", rt.calls)
	}
}

// TestFakeOrphans: containers of tasks nobody knows survive until the first
// desired set, then go.
func TestFakeOrphans(t *testing.T) {
	rt := newFakeRuntime()
	store := newMemStore()
	h := startEngine(t, Config{Runtime: rt, Store: store})
	task := newTestTask("orphan", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusRunning, wait)
	h.stop()
	store.DeleteTask(task.Arn) // forgotten
	// Another agent's container on the same runtime is not touched.
	other := newTestTask("other", ctrDef("app", "busybox"))
	cfg := Config{Cluster: "c", ContainerInstanceArn: "another-instance"}
	if _, err := rt.Create(t.Context(), buildSpec(specInput{cfg: &cfg, task: &other, def: &other.Definition, networkMode: "bridge"})); err != nil {
		t.Fatal(err)
	}

	h2 := startEngine(t, Config{Runtime: rt, Store: store})
	waitFor(t, "placeholder from labels", wait, func() bool { _, ok := h2.e.Task(task.Arn); return ok })
	h2.listed(rt)
	if c, ok := rt.byName(task.Arn, "app"); !ok || c.State != runtime.StateRunning {
		t.Fatal("an unknown task's container was stopped before the first desired set")
	}
	h2.e.SetDesired(nil)
	st2 := h2.waitStatus(task.Arn, StatusStopped, wait)
	if containerOf(st2, "app").RuntimeID != containerOf(st, "app").RuntimeID || st2.StoppedReason != ReasonNotDesired {
		t.Errorf("orphan state %+v", st2)
	}
	waitFor(t, "orphan removed", wait, func() bool {
		_, ok := rt.byName(task.Arn, "app")
		return !ok && !store.has(task.Arn)
	})
	if _, ok := rt.byName(other.Arn, "app"); !ok {
		t.Fatal("another instance's container was removed")
	}

	// A container of this instance without a task label (the daemon
	// namespace holder) belongs to no task: it is left alone.
	holder, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "holder", Image: "busybox", Labels: map[string]string{LabelInstance: testInstance}})
	if err != nil {
		t.Fatal(err)
	}

	// An orphan that appears later (no record, no task) is removed too.
	late := newTestTask("late", ctrDef("app", "busybox"))
	cfg.ContainerInstanceArn = testInstance
	if _, err := rt.Create(t.Context(), buildSpec(specInput{cfg: &cfg, task: &late, def: &late.Definition, networkMode: "bridge"})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "late orphan removed", wait, func() bool {
		_, ok := rt.byName(late.Arn, "app")
		return !ok
	})
	if h2.e.Stats().OrphansRemoved != 1 {
		t.Errorf("stats %+v", h2.e.Stats())
	}
	if _, err := rt.Inspect(t.Context(), holder); err != nil {
		t.Errorf("a container without a task label was removed: %v", err)
	}
}

// TestFakeRestoreExitedWhileDown: a container that exited while the agent
// was down is noticed after the restart.
func TestFakeRestoreExitedWhileDown(t *testing.T) {
	rt := newFakeRuntime()
	store := newMemStore()
	h := startEngine(t, Config{Runtime: rt, Store: store})
	task := newTestTask("down", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusRunning, wait)
	h.stop()
	rt.exit(containerOf(st, "app").RuntimeID, 9)

	h2 := startEngine(t, Config{Runtime: rt, Store: store})
	st = h2.waitStatus(task.Arn, StatusStopped, wait)
	if *containerOf(st, "app").ExitCode != 9 || st.StopCode != StopEssentialContainerExited {
		t.Fatalf("state %+v", st)
	}
}

// TestFakeEventStreamBreaks: an exit whose event was lost is found by the
// listing that follows a broken event stream, long before the periodic one.
func TestFakeEventStreamBreaks(t *testing.T) {
	rt := newFakeRuntime()
	h := startEngine(t, Config{Runtime: rt, ReconcileInterval: time.Hour})
	task := newTestTask("evbreak", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{task})
	st := h.waitStatus(task.Arn, StatusRunning, wait)
	// The engine may reach RUNNING before its event stream is open; a
	// break before that would be lost.
	waitFor(t, "the event stream open", wait, func() bool { return rt.streams() == 1 })
	rt.mu.Lock()
	rt.mute = true
	rt.mu.Unlock()
	rt.exit(containerOf(st, "app").RuntimeID, 5)
	rt.breakEvents()
	st = h.waitStatus(task.Arn, StatusStopped, wait)
	if *containerOf(st, "app").ExitCode != 5 {
		t.Fatalf("state %+v", st)
	}
	waitFor(t, "the event stream reopened", wait, func() bool { return rt.streams() == 1 })
}

// TestFakeRecordFollowsDesired: the persisted record carries the desired
// task as it is now (its encoding is reused only while it is unchanged),
// next to the state, and reads back whole.
func TestFakeRecordFollowsDesired(t *testing.T) {
	rt := newFakeRuntime()
	store := newMemStore()
	h := startEngine(t, Config{Runtime: rt, Store: store})
	task := newTestTask("rec1", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{task})
	h.waitStatus(task.Arn, StatusRunning, wait)
	stored := func() record {
		t.Helper()
		var rec record
		data, _ := store.Tasks()
		if err := json.Unmarshal(data[task.Arn], &rec); err != nil {
			t.Fatalf("stored record: %v", err)
		}
		return rec
	}
	if rec := stored(); rec.Task.Version != task.Version || rec.Task.Definition.Family != "fam" || rec.Status != StatusRunning || len(rec.Containers) != 1 {
		t.Fatalf("record %+v", rec)
	}

	changed := task
	changed.Version++
	changed.Tags = []shapes.Tag{{Key: "team", Value: "b"}}
	h.e.SetDesired([]protocol.Task{changed})
	waitFor(t, "the record to carry the changed task", wait, func() bool { return stored().Task.Version == changed.Version })
	rec := stored()
	if len(rec.Task.Tags) != 1 || rec.Task.Tags[0].Value != "b" || rec.Task.Definition.Family != "fam" || rec.Status != StatusRunning || rec.Containers[0].RuntimeID == "" {
		t.Fatalf("record after the change %+v", rec)
	}
	// The desired task comes back whole from the record it was spliced into.
	if got, want := mustMarshal(t, rec.Task), mustMarshal(t, changed); !bytes.Equal(got, want) {
		t.Fatalf("stored task\n%s\nwant\n%s", got, want)
	}
	h.e.SetDesired(nil)
	h.waitStatus(task.Arn, StatusStopped, wait)
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkEncodeRecord encodes a task's record as every engine step
// does, the desired task's JSON spliced in, beside json.Marshal of the
// same record with that JSON as a RawMessage (the encoding before), which
// validates and compacts it on every call.
func BenchmarkEncodeRecord(b *testing.B) {
	app := ctrDef("app", "busybox", "sleep", "1000")
	for i := range 20 {
		app.Environment = append(app.Environment, shapes.KeyValuePair{Name: fmt.Sprintf("SETTING_%d", i), Value: strings.Repeat("v", 40)})
	}
	tk := &task{arn: taskArn("bench"), desired: newTestTask("bench", app, ctrDef("sidecar", "busybox", "sleep", "1000"))}
	b.Run("splice", func(b *testing.B) {
		tk.desiredJSON = nil
		for b.Loop() {
			if _, err := tk.encodeRecord(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rawmessage", func(b *testing.B) {
		desired, _ := json.Marshal(tk.desired)
		for b.Loop() {
			if _, err := json.Marshal(struct {
				record
				Task json.RawMessage `json:"task"`
			}{tk.record(), desired}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
