package engine

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/agent/resources"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/runtime"
)

func TestTaskStatus(t *testing.T) {
	ess := func(p phase) cview { return cview{essential: true, phase: p} }
	opt := func(p phase) cview { return cview{phase: p} }
	tests := []struct {
		name               string
		prev               string
		admitted, stopping bool
		cs                 []cview
		want               string
	}{
		{"waiting for room", "", false, false, []cview{ess(phaseNone)}, StatusProvisioning},
		{"pulling", StatusProvisioning, true, false, []cview{ess(phaseNone)}, StatusPending},
		{"created", StatusPending, true, false, []cview{ess(phaseCreated)}, StatusPending},
		{"essential running", StatusPending, true, false, []cview{ess(phaseRunning)}, StatusRunning},
		{"side not started", StatusPending, true, false, []cview{ess(phaseRunning), opt(phasePulled)}, StatusPending},
		{"side exited", StatusPending, true, false, []cview{ess(phaseRunning), opt(phaseStopped)}, StatusRunning},
		{"essential waits for init", StatusPending, true, false, []cview{ess(phasePulled), opt(phaseStopped)}, StatusPending},
		{"never back to pending", StatusRunning, true, false, []cview{ess(phaseRunning), opt(phaseCreated)}, StatusRunning},
		{"stopping", StatusRunning, true, true, []cview{ess(phaseStopped), opt(phaseRunning)}, StatusStopping},
		{"stopped", StatusStopping, true, true, []cview{ess(phaseStopped), opt(phaseStopped)}, StatusStopped},
		{"refused before admission", "", false, true, []cview{ess(phaseStopped)}, StatusStopped},
		{"stop order while provisioning", StatusProvisioning, false, true, []cview{ess(phaseNone)}, StatusStopping},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := taskStatus(tt.prev, tt.admitted, tt.stopping, tt.cs); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestTaskHealth(t *testing.T) {
	c := func(essential bool, h string) cview { return cview{essential: essential, health: h} }
	tests := []struct {
		cs   []cview
		want string
	}{
		{nil, HealthUnknown},
		{[]cview{c(true, "")}, HealthUnknown},
		{[]cview{c(true, HealthHealthy)}, HealthHealthy},
		{[]cview{c(true, HealthHealthy), c(true, HealthUnknown)}, HealthUnknown},
		{[]cview{c(true, HealthHealthy), c(true, HealthUnhealthy)}, HealthUnhealthy},
		{[]cview{c(true, HealthHealthy), c(false, HealthUnhealthy)}, HealthHealthy},
		{[]cview{c(true, HealthHealthy), c(true, "")}, HealthHealthy},
	}
	for i, tt := range tests {
		if got := taskHealth(tt.cs); got != tt.want {
			t.Errorf("%d: got %s, want %s", i, got, tt.want)
		}
	}
}

func TestResolve(t *testing.T) {
	code := func(n int) *int { return &n }
	tests := []struct {
		cond      string
		d         depState
		met       bool
		failedHas string
	}{
		{"START", depState{phase: phasePulled}, false, ""},
		{"START", depState{phase: phaseRunning, started: true}, true, ""},
		{"START", depState{phase: phaseStopped, started: true, exitCode: code(1)}, true, ""},
		{"START", depState{name: "db", phase: phaseStopped}, false, "db stopped without starting"},
		{"COMPLETE", depState{phase: phaseRunning, started: true}, false, ""},
		{"COMPLETE", depState{phase: phaseStopped, started: true, exitCode: code(4)}, true, ""},
		{"COMPLETE", depState{name: "x", phase: phaseStopped}, false, "x stopped without running"},
		{"SUCCESS", depState{phase: phaseStopped, started: true, exitCode: code(0)}, true, ""},
		{"SUCCESS", depState{name: "init", phase: phaseStopped, started: true, exitCode: code(2)}, false, "init exited with code 2, not 0"},
		{"SUCCESS", depState{phase: phaseRunning, started: true, exitCode: code(2), restart: true}, false, ""},
		{"HEALTHY", depState{phase: phaseRunning, started: true, health: HealthUnknown}, false, ""},
		{"HEALTHY", depState{phase: phaseRunning, started: true, health: HealthUnhealthy}, false, ""},
		{"HEALTHY", depState{phase: phaseRunning, started: true, health: HealthHealthy}, true, ""},
		{"HEALTHY", depState{phase: phaseRunning, started: true, health: HealthHealthy, restart: true}, false, ""},
		{"HEALTHY", depState{name: "db", phase: phaseStopped, started: true}, false, "db stopped before it was healthy"},
		{"SOMETIME", depState{}, false, "unknown dependency condition"},
	}
	for i, tt := range tests {
		met, failed := resolve(tt.cond, tt.d)
		if met != tt.met || (tt.failedHas == "") != (failed == "") || !strings.Contains(failed, tt.failedHas) {
			t.Errorf("%d %s %+v: met=%v failed=%q, want %v %q", i, tt.cond, tt.d, met, failed, tt.met, tt.failedHas)
		}
	}
}

func TestWaitDeadline(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if d := waitDeadline("START", at, time.Minute); !d.IsZero() {
		t.Errorf("START has a deadline: %v", d)
	}
	if d := waitDeadline("HEALTHY", time.Time{}, time.Minute); !d.IsZero() {
		t.Errorf("a dependency that has not started gives no deadline: %v", d)
	}
	if d := waitDeadline("SUCCESS", at, time.Minute); !d.Equal(at.Add(time.Minute)) {
		t.Errorf("SUCCESS deadline %v", d)
	}
}

func TestRestartDecision(t *testing.T) {
	on := &shapes.ContainerRestartPolicy{Enabled: new(true), IgnoredExitCodes: []int32{0}, RestartAttemptPeriod: new(int32(60))}
	tests := []struct {
		name     string
		p        *shapes.ContainerRestartPolicy
		code     int
		uptime   time.Duration
		fast     int
		restart  bool
		delay    time.Duration
		nextFast int
	}{
		{"no policy", nil, 1, time.Hour, 0, false, 0, 0},
		{"disabled", &shapes.ContainerRestartPolicy{Enabled: new(false)}, 1, time.Hour, 0, false, 0, 0},
		{"ignored code", on, 0, time.Hour, 0, false, 0, 0},
		{"ran long enough: at once", on, 1, 61 * time.Second, 5, true, 0, 0},
		{"first fast exit", on, 1, time.Second, 0, true, time.Second, 1},
		{"third fast exit", on, 1, time.Second, 2, true, 4 * time.Second, 3},
		{"capped at the period", on, 1, time.Second, 10, true, 60 * time.Second, 11},
		{"default period", &shapes.ContainerRestartPolicy{Enabled: new(true)}, 1, time.Second, 20, true, 300 * time.Second, 21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, d, n := restartDecision(tt.p, tt.code, tt.uptime, tt.fast)
			if r != tt.restart || d != tt.delay || n != tt.nextFast {
				t.Errorf("got %v %v %d, want %v %v %d", r, d, n, tt.restart, tt.delay, tt.nextFast)
			}
		})
	}
}

func TestTaskNeed(t *testing.T) {
	pm := func(host int32, proto string) shapes.PortMapping {
		return shapes.PortMapping{ContainerPort: new(int32(80)), HostPort: new(host), Protocol: proto}
	}
	tests := []struct {
		name string
		def  shapes.TaskDefinition
		want resources.Need
	}{
		{
			name: "sum of containers, reservation first",
			def: shapes.TaskDefinition{NetworkMode: "bridge", ContainerDefinitions: []shapes.ContainerDefinition{
				{Cpu: new(int32(256)), Memory: new(int32(512)), MemoryReservation: new(int32(128))},
				{Memory: new(int32(64)), PortMappings: []shapes.PortMapping{pm(8080, "tcp"), pm(0, "tcp"), pm(53, "udp")}},
			}},
			want: resources.Need{CPU: 256, MemoryMiB: 192, Ports: []resources.Port{{Port: 8080, Protocol: "tcp"}, {Port: 53, Protocol: "udp"}}},
		},
		{
			name: "task level wins",
			def: shapes.TaskDefinition{Cpu: "1024", Memory: "2048", ContainerDefinitions: []shapes.ContainerDefinition{
				{Cpu: new(int32(256)), Memory: new(int32(512))},
			}},
			want: resources.Need{CPU: 1024, MemoryMiB: 2048},
		},
		{
			name: "no ports outside bridge and host",
			def: shapes.TaskDefinition{NetworkMode: "daemon", ContainerDefinitions: []shapes.ContainerDefinition{
				{Memory: new(int32(32)), PortMappings: []shapes.PortMapping{pm(9000, "tcp")}},
			}},
			want: resources.Need{MemoryMiB: 32},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := taskNeed(&tt.def); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCPUShares(t *testing.T) {
	c := func(cpu int32) shapes.ContainerDefinition {
		if cpu == 0 {
			return shapes.ContainerDefinition{}
		}
		return shapes.ContainerDefinition{Cpu: new(cpu)}
	}
	tests := []struct {
		taskCPU string
		cs      []shapes.ContainerDefinition
		want    []int64
	}{
		{"", []shapes.ContainerDefinition{c(0)}, []int64{2}},
		{"", []shapes.ContainerDefinition{c(512), c(0)}, []int64{512, 2}},
		{"1024", []shapes.ContainerDefinition{c(0)}, []int64{1024}},
		{"1024", []shapes.ContainerDefinition{c(256), c(0), c(0)}, []int64{256, 384, 384}},
		{"1024", []shapes.ContainerDefinition{c(1024), c(0)}, []int64{1024, 2}},
	}
	for i, tt := range tests {
		def := shapes.TaskDefinition{Cpu: tt.taskCPU, ContainerDefinitions: tt.cs}
		if got := cpuShares(&def); !slices.Equal(got, tt.want) {
			t.Errorf("%d: got %v, want %v", i, got, tt.want)
		}
	}
}

func TestApplyOverrides(t *testing.T) {
	def := shapes.TaskDefinition{Cpu: "256", ContainerDefinitions: []shapes.ContainerDefinition{
		{Name: "app", Command: []string{"a"}, Environment: []shapes.KeyValuePair{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}},
		{Name: "side", Command: []string{"s"}},
	}}
	o := &shapes.TaskOverride{Cpu: "1 vCPU", Memory: "1GB", ContainerOverrides: []shapes.ContainerOverride{
		{Name: "app", Command: []string{"b"}, Memory: new(int32(99)), Environment: []shapes.KeyValuePair{{Name: "B", Value: "3"}, {Name: "C", Value: "4"}}},
		{Name: "missing", Command: []string{"x"}},
	}}
	got := applyOverrides(def, o)
	if got.Cpu != "1024" || got.Memory != "1024" {
		t.Errorf("task size %s/%s", got.Cpu, got.Memory)
	}
	app := got.ContainerDefinitions[0]
	if !slices.Equal(app.Command, []string{"b"}) || *app.Memory != 99 ||
		!reflect.DeepEqual(app.Environment, []shapes.KeyValuePair{{Name: "A", Value: "1"}, {Name: "B", Value: "3"}, {Name: "C", Value: "4"}}) {
		t.Errorf("app %+v", app)
	}
	if !slices.Equal(got.ContainerDefinitions[1].Command, []string{"s"}) {
		t.Errorf("side changed")
	}
	if def.ContainerDefinitions[0].Command[0] != "a" || len(def.ContainerDefinitions[0].Environment) != 2 || def.Cpu != "256" {
		t.Errorf("the original definition changed: %+v", def)
	}
}

func TestDependencies(t *testing.T) {
	def := shapes.TaskDefinition{PidMode: "task", ContainerDefinitions: []shapes.ContainerDefinition{
		{Name: "init", Essential: new(false)},
		{Name: "app", DependsOn: []shapes.ContainerDependency{{ContainerName: "init", Condition: "SUCCESS"}}, Links: []string{"db:database"}},
		{Name: "db"},
		{Name: "side", DependsOn: []shapes.ContainerDependency{{ContainerName: "db", Condition: "HEALTHY"}}},
	}}
	holder := namespaceHolder(&def)
	if holder != 2 {
		t.Fatalf("holder %d, want db (the first essential container without dependencies)", holder)
	}
	deps := dependencies(&def, holder)
	want := [][]dep{
		{{container: 2, condition: "START", implicit: "pidMode task"}},
		{{container: 0, condition: "SUCCESS"}, {container: 2, condition: "START", implicit: "pidMode task"}},
		nil,
		{{container: 2, condition: "HEALTHY"}},
	}
	if !reflect.DeepEqual(deps, want) {
		t.Errorf("deps\n%+v\nwant\n%+v", deps, want)
	}
	if got := stopBlockers(deps); !reflect.DeepEqual(got, [][]int{{1}, nil, {0, 1, 3}, nil}) {
		t.Errorf("stop blockers %v", got)
	}
	def.PidMode = ""
	if namespaceHolder(&def) != -1 {
		t.Error("a holder without task namespaces")
	}
	def.IpcMode = "task"
	def.ContainerDefinitions[2].DependsOn = []shapes.ContainerDependency{{ContainerName: "init", Condition: "START"}}
	if h := namespaceHolder(&def); h != 0 {
		t.Errorf("holder %d, want init (no essential container is free of dependencies)", h)
	}
}

// TestObserve feeds a task the runtime's views in awkward orders: a fast
// exit stamped before its start (Docker does this), and listings taken
// before an exit or a restart arriving after it.
func TestObserve(t *testing.T) {
	e, err := New(Config{Runtime: newFakeRuntime(), Store: newMemStore(), ContainerInstanceArn: testInstance})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	running := func(start int) runtime.Container {
		return runtime.Container{ID: "c1", State: runtime.StateRunning, StartedAt: at(start)}
	}
	exited := func(start, finish, code int) runtime.Container {
		return runtime.Container{ID: "c1", State: runtime.StateExited, StartedAt: at(start), FinishedAt: at(finish), ExitCode: code}
	}
	app := ctrDef("app", "busybox")
	app.RestartPolicy = &shapes.ContainerRestartPolicy{Enabled: new(true), IgnoredExitCodes: []int32{9}, RestartAttemptPeriod: new(int32(60))}
	type step struct {
		rc        runtime.Container
		phase     phase
		restart   bool // waiting for a restart
		stopping  bool
		startedAt int
		late      bool // to be stopped again
	}
	tests := []struct {
		name  string
		def   shapes.ContainerDefinition
		steps []step
	}{
		{"exit stamped before start", ctrDef("app", "busybox"), []step{
			{rc: running(10), phase: phaseRunning, startedAt: 10},
			{rc: exited(10, 9, 3), phase: phaseStopped, stopping: true, startedAt: 10},
		}},
		{"stale running after exit", ctrDef("app", "busybox"), []step{
			{rc: exited(10, 20, 0), phase: phaseStopped, stopping: true, startedAt: 10},
			{rc: running(10), phase: phaseStopped, stopping: true, startedAt: 10},
		}},
		{"started again behind our back", nonEssential(ctrDef("app", "busybox")), []step{
			{rc: exited(10, 20, 0), phase: phaseStopped, startedAt: 10},
			{rc: running(30), phase: phaseRunning, startedAt: 30},
		}},
		{"started late after the task stopped", ctrDef("app", "busybox"), []step{
			{rc: exited(10, 20, 0), phase: phaseStopped, stopping: true, startedAt: 10},
			{rc: running(30), phase: phaseStopped, stopping: true, late: true, startedAt: 10},
		}},
		{"restart pending ignores its own run", app, []step{
			{rc: running(10), phase: phaseRunning, startedAt: 10},
			{rc: exited(10, 20, 1), phase: phaseRunning, restart: true, startedAt: 10},
			{rc: running(10), phase: phaseRunning, restart: true, startedAt: 10},
			{rc: exited(10, 20, 1), phase: phaseRunning, restart: true, startedAt: 10},
			{rc: running(50), phase: phaseRunning, startedAt: 50},
			{rc: exited(10, 20, 1), phase: phaseRunning, startedAt: 50},
			{rc: exited(50, 60, 9), phase: phaseStopped, stopping: true, startedAt: 50},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := newTestTask(tt.name, tt.def)
			tk := e.taskBase(task.Arn)
			tk.define(task)
			tk.admitted = true
			c := tk.cs[0]
			c.id = "c1"
			for i, s := range tt.steps {
				if s.late {
					tk.times.Stopped = at(25) // the task has finished
				}
				tk.observe(c, s.rc)
				if c.lateRun != s.late {
					t.Fatalf("step %d: lateRun %v", i, c.lateRun)
				}
				if c.phase != s.phase || !c.restartAt.IsZero() != s.restart || tk.stopping != s.stopping || !c.startedAt.Equal(at(s.startedAt)) {
					t.Fatalf("step %d: phase %v restart %v stopping %v startedAt %v; want %v %v %v %v",
						i, c.phase, !c.restartAt.IsZero(), tk.stopping, c.startedAt.Sub(t0), s.phase, s.restart, s.stopping, at(s.startedAt).Sub(t0))
				}
			}
		})
	}
}
