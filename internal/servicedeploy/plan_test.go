package servicedeploy

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// task builds a task from a compact description: deployment, last status,
// instance status; created `age` before t0 and, when RUNNING, started then.
func task(id, dep, last, instance string, age time.Duration) Task {
	t := Task{ID: id, Deployment: dep, LastStatus: last, Desired: "RUNNING", Instance: instance, CreatedAt: t0.Add(-age)}
	if last == "RUNNING" {
		t.StartedAt = t.CreatedAt.Add(time.Second)
	}
	return t
}

func with(t Task, f func(*Task)) Task { f(&t); return t }

func stopping(t Task) Task { return with(t, func(t *Task) { t.Desired = "STOPPED" }) }

func unhealthy(t Task) Task { return with(t, func(t *Task) { t.Health = "UNHEALTHY" }) }

// failed is a task of dep that stopped on its own before running, `ago` before t0.
func failed(id, dep string, ago time.Duration) Task {
	return Task{ID: id, Deployment: dep, LastStatus: "STOPPED", Desired: "STOPPED", Instance: "ACTIVE",
		StopCode: "TaskFailedToStart", CreatedAt: t0.Add(-ago - time.Second), StoppedAt: t0.Add(-ago)}
}

func specOf(desired, minPct, maxPct int) Spec {
	return Spec{Desired: desired, MinimumHealthyPercent: minPct, MaximumPercent: maxPct, Primary: "new"}
}

func TestDecide(t *testing.T) {
	h := time.Hour
	cases := []struct {
		name    string
		spec    Spec
		tasks   []Task
		start   int
		stops   []Stop
		steady  bool
		stalled bool
	}{
		{name: "new service starts all", spec: specOf(3, 100, 200), start: 3},
		{name: "desired running is steady", spec: specOf(2, 100, 200), steady: true,
			tasks: []Task{task("a", "new", "RUNNING", "ACTIVE", h), task("b", "new", "RUNNING", "ACTIVE", h)}},
		{name: "pending tasks are waited for", spec: specOf(2, 100, 200),
			tasks: []Task{task("a", "new", "PENDING", "ACTIVE", 0), task("b", "new", "RUNNING", "ACTIVE", h)}},
		{name: "a task that exited is replaced", spec: specOf(2, 100, 200), start: 1,
			tasks: []Task{task("a", "new", "RUNNING", "ACTIVE", h),
				with(task("b", "new", "STOPPED", "ACTIVE", h), func(t *Task) { t.Desired, t.StopCode = "STOPPED", "EssentialContainerExited" })}},
		{name: "scale in stops pending first then newest", spec: specOf(1, 100, 200),
			tasks: []Task{task("old", "new", "RUNNING", "ACTIVE", 3*h), task("mid", "new", "RUNNING", "ACTIVE", 2*h), task("p", "new", "PENDING", "ACTIVE", h)},
			stops: []Stop{{"p", ScaleIn}, {"mid", ScaleIn}}},
		{name: "scale to zero stops all", spec: specOf(0, 100, 200),
			tasks: []Task{task("a", "new", "RUNNING", "ACTIVE", h), task("b", "new", "RUNNING", "ACTIVE", 2*h)},
			stops: []Stop{{"a", ScaleIn}, {"b", ScaleIn}}},
		{name: "rollout 100/200 starts all new first", spec: specOf(2, 100, 200), start: 2,
			tasks: []Task{task("o1", "old", "RUNNING", "ACTIVE", h), task("o2", "old", "RUNNING", "ACTIVE", h)}},
		{name: "rollout 100/200 keeps old while new are pending", spec: specOf(2, 100, 200),
			tasks: []Task{task("o1", "old", "RUNNING", "ACTIVE", h), task("o2", "old", "RUNNING", "ACTIVE", h),
				task("n1", "new", "PENDING", "ACTIVE", 0), task("n2", "new", "RUNNING", "ACTIVE", 0)},
			stops: []Stop{{"o1", Replaced}}},
		{name: "rollout 100/200 stops old once new run", spec: specOf(2, 100, 200),
			tasks: []Task{task("o1", "old", "RUNNING", "ACTIVE", 2*h), task("o2", "old", "RUNNING", "ACTIVE", h),
				task("n1", "new", "RUNNING", "ACTIVE", 0), task("n2", "new", "RUNNING", "ACTIVE", 0)},
			stops: []Stop{{"o2", Replaced}, {"o1", Replaced}}},
		{name: "rollout 50/200 stops half at once", spec: specOf(4, 50, 200), start: 4,
			tasks: []Task{task("o1", "old", "RUNNING", "ACTIVE", 4*h), task("o2", "old", "RUNNING", "ACTIVE", 3*h),
				task("o3", "old", "RUNNING", "ACTIVE", 2*h), task("o4", "old", "RUNNING", "ACTIVE", h)},
			stops: []Stop{{"o4", Replaced}, {"o3", Replaced}}},
		{name: "rollout 0/100 stops first, starts when room frees", spec: specOf(2, 0, 100),
			tasks: []Task{task("o1", "old", "RUNNING", "ACTIVE", h), task("o2", "old", "RUNNING", "ACTIVE", h)},
			stops: []Stop{{"o1", Replaced}, {"o2", Replaced}}},
		{name: "rollout 100/100 cannot move", spec: specOf(2, 100, 100), stalled: true,
			tasks: []Task{task("o1", "old", "RUNNING", "ACTIVE", h), task("o2", "old", "RUNNING", "ACTIVE", h)}},
		{name: "old pending tasks stop at once", spec: specOf(1, 100, 200),
			tasks: []Task{task("o1", "old", "PENDING", "ACTIVE", h), task("n1", "new", "RUNNING", "ACTIVE", 0)},
			stops: []Stop{{"o1", Replaced}}},
		{name: "stopping tasks still count against maximumPercent", spec: specOf(2, 100, 100),
			tasks: []Task{task("a", "new", "RUNNING", "ACTIVE", h), stopping(task("b", "new", "RUNNING", "ACTIVE", h))}},
		{name: "draining running task is replaced first", spec: specOf(2, 100, 200), start: 1,
			tasks: []Task{task("d", "new", "RUNNING", "DRAINING", h), task("a", "new", "RUNNING", "ACTIVE", h)}},
		{name: "draining running task stops once replaced", spec: specOf(2, 100, 200),
			tasks: []Task{task("d", "new", "RUNNING", "DRAINING", h), task("a", "new", "RUNNING", "ACTIVE", h), task("r", "new", "RUNNING", "ACTIVE", 0)},
			stops: []Stop{{"d", Draining}}},
		{name: "draining pending task stops at once", spec: specOf(1, 100, 200), start: 1,
			tasks: []Task{task("d", "new", "PENDING", "DRAINING", 0)},
			stops: []Stop{{"d", Draining}}},
		{name: "deregistering instance drains too", spec: specOf(1, 100, 200), start: 1,
			tasks: []Task{task("d", "new", "RUNNING", "DEREGISTERING", h)}},
		{name: "task on a gone instance is stopped and replaced", spec: specOf(1, 100, 200), start: 1,
			tasks: []Task{task("g", "new", "RUNNING", "", h)},
			stops: []Stop{{"g", Orphaned}}},
		{name: "unhealthy task is stopped and replaced", spec: specOf(2, 100, 200), start: 1,
			tasks: []Task{unhealthy(task("u", "new", "RUNNING", "ACTIVE", h)), task("a", "new", "RUNNING", "ACTIVE", h)},
			stops: []Stop{{"u", Unhealthy}}},
		{name: "unhealthy within the grace period is kept", spec: with2(specOf(1, 100, 200), func(s *Spec) { s.GracePeriod = 2 * h }),
			tasks: []Task{unhealthy(task("u", "new", "RUNNING", "ACTIVE", h))}, steady: true},
		{name: "deleting stops everything", spec: with2(specOf(2, 100, 200), func(s *Spec) { s.Deleting = true }),
			tasks: []Task{task("a", "new", "RUNNING", "ACTIVE", h), task("o", "old", "RUNNING", "DRAINING", h)},
			stops: []Stop{{"a", Deleted}, {"o", Deleted}}},
		{name: "repeated failed launches are throttled", spec: specOf(2, 100, 200),
			tasks: []Task{failed("f1", "new", 3*time.Second), failed("f2", "new", 2*time.Second), failed("f3", "new", time.Second)}},
		{name: "after the wait one launch probes", spec: specOf(2, 100, 200), start: 1,
			tasks: []Task{failed("f1", "new", 3*h), failed("f2", "new", 2*h), failed("f3", "new", h)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(tc.spec, tc.tasks, t0)
			if p.Start != tc.start || !slices.Equal(p.Stops, tc.stops) || p.Steady != tc.steady || p.Stalled != tc.stalled {
				t.Fatalf("got start=%d stops=%v steady=%v stalled=%v, want start=%d stops=%v steady=%v stalled=%v",
					p.Start, p.Stops, p.Steady, p.Stalled, tc.start, tc.stops, tc.steady, tc.stalled)
			}
		})
	}
}

func with2(s Spec, f func(*Spec)) Spec { f(&s); return s }

func TestDecideRecheckAndThrottle(t *testing.T) {
	sp := specOf(1, 100, 200)
	sp.GracePeriod = time.Minute
	u := unhealthy(task("u", "new", "RUNNING", "ACTIVE", 30*time.Second))
	if p := Decide(sp, []Task{u}, t0); !p.Recheck.Equal(u.StartedAt.Add(time.Minute)) {
		t.Fatalf("recheck %v, want the end of the grace period", p.Recheck)
	}
	p := Decide(specOf(1, 100, 200), []Task{failed("a", "new", 3*time.Second), failed("b", "new", 2*time.Second), failed("c", "new", time.Second)}, t0)
	if !p.Throttled || p.Failures != 3 || !p.RetryAt.Equal(t0.Add(-time.Second+throttleBase)) {
		t.Fatalf("throttled=%v failures=%d retryAt=%v", p.Throttled, p.Failures, p.RetryAt)
	}
}

func TestDecideDrained(t *testing.T) {
	sp := specOf(1, 100, 200)
	sp.Others = []string{"old", "older"}
	tasks := []Task{task("n", "new", "RUNNING", "ACTIVE", time.Hour), stopping(task("o", "old", "RUNNING", "ACTIVE", time.Hour)),
		with(task("x", "older", "STOPPED", "ACTIVE", time.Hour), func(t *Task) { t.Desired = "STOPPED" })}
	p := Decide(sp, tasks, t0)
	if !slices.Equal(p.Drained, []string{"older"}) || p.Steady {
		t.Fatalf("drained %v steady %v: a deployment with a task still stopping is not drained", p.Drained, p.Steady)
	}
}

func TestThrottle(t *testing.T) {
	ran := func(id string, ago, lasted time.Duration, code string) Task {
		return Task{ID: id, Deployment: "d", LastStatus: "STOPPED", Desired: "STOPPED", StopCode: code,
			CreatedAt: t0.Add(-ago - lasted - time.Second), StartedAt: t0.Add(-ago - lasted), StoppedAt: t0.Add(-ago)}
	}
	s := time.Second
	cases := []struct {
		name     string
		tasks    []Task
		failures int
		wait     time.Duration // after the newest failure; 0 for none
	}{
		{"no tasks", nil, 0, 0},
		{"two failures do not throttle", []Task{failed("a", "d", 2*s), failed("b", "d", s)}, 2, 0},
		{"three failures wait the base", []Task{failed("a", "d", 3*s), failed("b", "d", 2*s), failed("c", "d", s)}, 3, throttleBase},
		{"each further failure doubles", []Task{failed("a", "d", 5*s), failed("b", "d", 4*s), failed("c", "d", 3*s), failed("e", "d", 2*s), failed("f", "d", s)}, 5, 4 * throttleBase},
		{"a quick exit counts", []Task{failed("a", "d", 3*s), failed("b", "d", 2*s), ran("c", s, 5*s, "EssentialContainerExited")}, 3, throttleBase},
		{"a task that ran long ends the run", []Task{failed("a", "d", 90*s), failed("b", "d", 80*s), ran("c", 2*s, time.Minute, "EssentialContainerExited"), failed("e", "d", s)}, 1, 0},
		{"a task still running long ends the run", []Task{failed("a", "d", 4*s), failed("b", "d", 3*s), failed("c", "d", 3*s),
			{ID: "r", Deployment: "d", LastStatus: "RUNNING", Desired: "RUNNING", CreatedAt: t0.Add(-2 * s), StartedAt: t0.Add(-time.Minute)}}, 0, 0},
		{"a task stopped by the scheduler after running ends the run", []Task{failed("a", "d", 6*s), failed("b", "d", 5*s), ran("c", 2*s, s, "ServiceSchedulerInitiated")}, 0, 0},
		{"pending tasks are not judged", []Task{failed("a", "d", 4*s), failed("b", "d", 3*s), failed("c", "d", 2*s),
			{ID: "p", Deployment: "d", LastStatus: "PENDING", Desired: "RUNNING", CreatedAt: t0}}, 3, throttleBase},
		{"other deployments do not count", []Task{failed("a", "x", 3*s), failed("b", "x", 2*s), failed("c", "d", s)}, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, until := Throttle("d", tc.tasks, t0)
			var want time.Time
			if tc.wait > 0 {
				newest := time.Time{}
				for _, x := range tc.tasks {
					if x.LastStatus == "STOPPED" && x.StoppedAt.After(newest) && x.Deployment == "d" {
						newest = x.StoppedAt
					}
				}
				want = newest.Add(tc.wait)
			}
			if n != tc.failures || !until.Equal(want) {
				t.Fatalf("got %d failures until %v, want %d until %v", n, until, tc.failures, want)
			}
		})
	}
	// The wait is capped.
	var many []Task
	for i := range 40 {
		many = append(many, failed(fmt.Sprint(i), "d", time.Duration(40-i)*time.Second))
	}
	if _, until := Throttle("d", many, t0); !until.Equal(t0.Add(-time.Second + throttleMax)) {
		t.Fatalf("cap: until %v", until)
	}
}

func TestPercentRounding(t *testing.T) {
	for _, c := range []struct{ desired, pct, minH, maxT int }{
		{4, 50, 2, 2}, {3, 50, 2, 1}, {1, 100, 1, 1}, {1, 150, 2, 1}, {3, 150, 5, 4}, {0, 100, 0, 0}, {5, 200, 10, 10},
	} {
		if got := MinHealthy(c.desired, c.pct); got != c.minH {
			t.Errorf("MinHealthy(%d, %d) = %d, want %d", c.desired, c.pct, got, c.minH)
		}
		if got := MaxTasks(c.desired, c.pct); got != c.maxT {
			t.Errorf("MaxTasks(%d, %d) = %d, want %d", c.desired, c.pct, got, c.maxT)
		}
	}
}

// Tasks on draining instances stop instance by instance, the
// longest-registered instance first, whatever the tasks' own ages: a
// rollout drains the oldest instances first and waits for each to empty.
func TestDrainingStopsGoInstanceByInstance(t *testing.T) {
	h := time.Hour
	on := func(tk Task, id string, registered time.Duration) Task {
		return with(tk, func(t *Task) { t.InstanceID, t.InstanceSince = id, t0.Add(-registered) })
	}
	// Instance "old" (registered 3 h ago) holds the older tasks; "young"
	// (2 h ago) the newer ones, which newest-first alone would stop first.
	tasks := []Task{
		on(task("y1", "new", "RUNNING", "DRAINING", h), "young", 2*h),
		on(task("o1", "new", "RUNNING", "DRAINING", 2*h), "old", 3*h),
		on(task("y2", "new", "RUNNING", "DRAINING", h), "young", 2*h),
		on(task("o2", "new", "RUNNING", "DRAINING", 2*h), "old", 3*h),
		// Their replacements run: two may stop at minimumHealthyPercent 100.
		on(task("r1", "new", "RUNNING", "ACTIVE", 0), "fresh", 0),
		on(task("r2", "new", "RUNNING", "ACTIVE", 0), "fresh", 0),
	}
	p := Decide(specOf(4, 100, 200), tasks, t0)
	var got []string
	for _, s := range p.Stops {
		got = append(got, s.ID)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"o1", "o2"}) {
		t.Fatalf("stops %v, want the longest-registered draining instance's tasks o1 and o2", got)
	}
}

// BenchmarkDecide plans a service of 5,000 tasks in the middle of a
// replacement rollout: a quarter on draining instances, some pending
// replacements, some stopped.
func BenchmarkDecide(b *testing.B) {
	var tasks []Task
	for i := range 5000 {
		inst := "ACTIVE"
		if i%4 == 0 {
			inst = "DRAINING"
		}
		t := task(fmt.Sprintf("t%05d", i), "new", "RUNNING", inst, time.Duration(i)*time.Second)
		t.InstanceID, t.InstanceSince = fmt.Sprintf("i%05d", i/2), t.CreatedAt
		tasks = append(tasks, t)
	}
	for i := range 600 {
		tasks = append(tasks, task(fmt.Sprintf("p%05d", i), "new", "PENDING", "ACTIVE", 0))
	}
	for i := range 2000 {
		tasks = append(tasks, failed(fmt.Sprintf("s%05d", i), "new", time.Hour))
	}
	sp := specOf(5000, 100, 200)
	b.ReportAllocs()
	for b.Loop() {
		Decide(sp, tasks, t0)
	}
}
