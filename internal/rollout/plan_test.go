package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

const (
	cpA  = "arn:aws:ecs:us-east-1:000000000000:capacity-provider/a"
	revO = "arn:aws:ecs:us-east-1:000000000000:daemon-revision/c/d/1"
	revN = "arn:aws:ecs:us-east-1:000000000000:daemon-revision/c/d/2"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func deployment(status string) store.DaemonDeployment {
	d := store.DaemonDeployment{}
	d.Status = status
	d.TargetRevisionArn = revN
	d.SourceRevisionArns = []string{revO}
	d.TargetDaemonRevision = &shapes.DaemonDeploymentRevisionDetail{Arn: revN, CapacityProviders: []shapes.DaemonDeploymentCapacityProvider{{Arn: cpA}}}
	d.CapacityProviderArns = []string{cpA}
	d.DeploymentConfiguration = &shapes.DaemonDeploymentConfiguration{DrainPercent: ptr(50.0), BakeTimeInMinutes: ptr(int32(0))}
	d.CircuitBreaker = &shapes.DaemonCircuitBreaker{Status: "MONITORING", Threshold: ptr(int32(3)), FailureCount: ptr(int32(0))}
	d.Alarms = &shapes.DaemonDeploymentAlarms{Status: "DISABLED"}
	return d
}

func fleet(n int, rev string, running bool) []Instance {
	var out []Instance
	for i := range n {
		id := string(rune('a' + i))
		out = append(out, Instance{ID: id, Arn: "arn:ci/" + id, CapacityProvider: cpA, Status: "ACTIVE", RegisteredAt: t0.Add(time.Duration(i) * time.Second),
			Managed: true, Connected: true, Revision: rev, Running: running})
	}
	return out
}

func TestStartComputesBatchAndThreshold(t *testing.T) {
	d := Plan(deployment("PENDING"), World{Current: true, Instances: fleet(8, revO, true), Now: t0})
	if d.Dep.Status != "IN_PROGRESS" || d.Dep.Rollout.BatchSize != 4 || *d.Dep.CircuitBreaker.Threshold != 4 || !d.Dep.StartedAt.Equal(t0) {
		t.Fatalf("status %s batch %d threshold %d", d.Dep.Status, d.Dep.Rollout.BatchSize, *d.Dep.CircuitBreaker.Threshold)
	}
}

func TestWindowReplacesOldestFirst(t *testing.T) {
	dep := Plan(deployment("PENDING"), World{Current: true, Instances: fleet(4, revO, true), Now: t0}).Dep
	d := Plan(dep, World{Current: true, Instances: fleet(4, revO, true), Now: t0})
	if len(d.Start) != 2 || d.Start[0].Instance.ID != "a" || d.Start[1].Instance.ID != "b" || d.Start[0].InPlace || d.Start[0].Target != revN {
		t.Fatalf("first batch %+v", d.Start)
	}
	// The window is full: nothing new starts while both drain and their
	// replacements are not past REGISTERING.
	dep = d.Dep
	dep.Rollout.Replacing = []store.Replacement{{Instance: "a", ManagedInstance: "mi-1"}, {Instance: "b", ManagedInstance: "mi-2"}}
	inst := fleet(4, revO, true)
	inst[0].Status, inst[1].Status = "DRAINING", "DRAINING"
	if d := Plan(dep, World{Current: true, Instances: inst, Now: t0.Add(time.Second)}); len(d.Start) != 0 {
		t.Fatalf("started %+v while the window is full", d.Start)
	}
	// b is done (gone, its replacement ACTIVE), a is not: one slot frees
	// and the next oldest begins without waiting for a.
	inst = append([]Instance{inst[0]}, inst[2:]...)
	inst = append(inst, Instance{ID: "n1", CapacityProvider: cpA, Status: "REGISTERING", Managed: true, Connected: true, Revision: revN})
	d = Plan(dep, World{Current: true, Instances: inst, Now: t0.Add(2 * time.Second), Replacements: map[string]string{"mi-1": "LAUNCHING", "mi-2": "ACTIVE"}})
	if len(d.Start) != 1 || d.Start[0].Instance.ID != "c" || d.Dep.Rollout.Replaced != 1 || len(d.Dep.Rollout.Replacing) != 1 {
		t.Fatalf("after one finished: start %+v replacing %+v replaced %d", d.Start, d.Dep.Rollout.Replacing, d.Dep.Rollout.Replaced)
	}
}

func TestWindowNeverHoldsMoreThanABatch(t *testing.T) {
	dep := deployment("IN_PROGRESS")
	dep.Rollout.BatchSize = 3
	inst := fleet(10, revO, true)
	for i := range inst {
		inst[i].Managed = false // in place: an entry ends when its instance runs the target
	}
	running := map[string]bool{}
	for step := range 40 {
		d := Plan(dep, World{Current: true, Instances: inst, Now: t0.Add(time.Duration(step) * time.Second)})
		dep = d.Dep
		for _, s := range d.Start {
			dep.Rollout.Replacing = append(dep.Rollout.Replacing, store.Replacement{Instance: s.Instance.ID, InPlace: true})
		}
		if n := len(dep.Rollout.Replacing); n > 3 {
			t.Fatalf("step %d: %d instances in flight, batch is 3", step, n)
		}
		if dep.Status == "SUCCESSFUL" {
			return
		}
		// One in-flight instance finishes per step, the newest first: the
		// oldest is a straggler that finishes last.
		if k := len(dep.Rollout.Replacing); k > 0 {
			e := dep.Rollout.Replacing[k-1]
			if k == 1 || step > 30 {
				e = dep.Rollout.Replacing[0]
			}
			for i := range inst {
				if inst[i].ID == e.Instance && !running[e.Instance] {
					inst[i].Revision, running[e.Instance] = revN, true
					break
				}
			}
		}
	}
	t.Fatalf("not finished: %+v", dep.Rollout)
}

func TestDrainingInstancesTakeRoomInTheBatch(t *testing.T) {
	dep := deployment("IN_PROGRESS")
	dep.Rollout.BatchSize = 2
	inst := fleet(4, revO, true)
	inst[0].Status = "DRAINING" // a superseded deployment's batch
	if d := Plan(dep, World{Current: true, Instances: inst, Now: t0}); len(d.Start) != 1 || d.Start[0].Instance.ID != "b" {
		t.Fatalf("%+v", d.Start)
	}
	inst[1].Status = "DRAINING"
	inst[2].Status = "REGISTERING"
	if d := Plan(dep, World{Current: true, Instances: inst, Now: t0}); len(d.Start) != 1 || !d.Start[0].Retire {
		t.Fatalf("with the batch full only instances that never served go: %+v", d.Start)
	}
}

func TestCompletesAfterBake(t *testing.T) {
	dep := deployment("IN_PROGRESS")
	dep.DeploymentConfiguration.BakeTimeInMinutes = ptr(int32(2))
	inst := fleet(3, revN, true)
	d := Plan(dep, World{Current: true, Instances: inst, Now: t0})
	if d.Dep.Status != "IN_PROGRESS" || !d.Dep.Rollout.BakeUntil.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("bake: %s until %v", d.Dep.Status, d.Dep.Rollout.BakeUntil)
	}
	d = Plan(d.Dep, World{Current: true, Instances: inst, Now: t0.Add(2 * time.Minute)})
	if d.Dep.Status != "SUCCESSFUL" || !d.Dep.FinishedAt.Equal(t0.Add(2*time.Minute)) || d.Dep.CircuitBreaker.Status != "MONITORING_COMPLETE" {
		t.Fatalf("after bake: %s", d.Dep.Status)
	}
	// Without bake time it completes at once; an instance on the target
	// whose daemon is not running holds it.
	inst[1].Running = false
	if d := Plan(deployment("IN_PROGRESS"), World{Current: true, Instances: inst, Now: t0}); d.Dep.Status != "IN_PROGRESS" || len(d.Start) != 0 {
		t.Fatalf("not running: %s, start %v", d.Dep.Status, d.Start)
	}
}

func TestBreakerTripsAndRollsBack(t *testing.T) {
	dep := deployment("IN_PROGRESS")
	dep.CircuitBreaker.FailureCount = ptr(int32(3))
	d := Plan(dep, World{Current: true, Instances: fleet(2, revO, true), Now: t0})
	if d.Dep.Status != "STOP_REQUESTED" || d.Dep.CircuitBreaker.Status != "TRIGGERED" || d.Dep.Rollback.RollbackTargetDaemonRevisionArn != revO {
		t.Fatalf("%s %+v", d.Dep.Status, d.Dep.Rollback)
	}
	d.Dep.Rollout.Replacing = []store.Replacement{{Instance: "a", ManagedInstance: "mi-1"}}
	d = Plan(d.Dep, World{Current: true, Instances: fleet(2, revO, true), Now: t0, RollbackCPs: []string{cpA}})
	if d.Dep.Status != "ROLLBACK_IN_PROGRESS" || !d.SwitchDaemon || len(d.Dep.Rollout.Replacing) != 0 {
		t.Fatalf("%s switch %v batch %v", d.Dep.Status, d.SwitchDaemon, d.Dep.Rollout.Replacing)
	}
	// Instances on the new revision are replaced back; one that never
	// served (REGISTERING) is retired without a replacement.
	inst := append(fleet(1, revO, true), fleet(2, revN, false)[1])
	r := Plan(d.Dep, World{Current: true, Instances: inst, Now: t0})
	if len(r.Start) != 1 || r.Start[0].Instance.ID != "b" || r.Start[0].Target != revO || r.Start[0].Retire {
		t.Fatalf("rollback batch %+v", r.Start)
	}
	inst[1].Status = "REGISTERING"
	if r := Plan(d.Dep, World{Current: true, Instances: inst, Now: t0}); len(r.Start) != 1 || !r.Start[0].Retire {
		t.Fatalf("registering instance: %+v", r.Start)
	}
	r = Plan(d.Dep, World{Current: true, Instances: fleet(2, revO, true), Now: t0})
	if r.Dep.Status != "ROLLBACK_SUCCESSFUL" || r.Dep.FinishedAt.IsZero() {
		t.Fatalf("%s", r.Dep.Status)
	}
}

func TestAlarms(t *testing.T) {
	dep := deployment("PENDING")
	dep.Alarms = &shapes.DaemonDeploymentAlarms{Status: "MONITORING", AlarmNames: []string{"old", "new"}}
	d := Plan(dep, World{Current: true, Instances: fleet(2, revO, true), Now: t0, Firing: map[string]bool{"old": true}})
	if len(d.Dep.Rollout.FiringAtStart) != 1 {
		t.Fatalf("firing at start %v", d.Dep.Rollout.FiringAtStart)
	}
	// Already firing at the start: ignored.
	if r := Plan(d.Dep, World{Current: true, Instances: fleet(2, revO, true), Now: t0, Firing: map[string]bool{"old": true}}); r.Dep.Status != "IN_PROGRESS" {
		t.Fatalf("ignored alarm stopped the rollout: %s", r.Dep.Status)
	}
	r := Plan(d.Dep, World{Current: true, Instances: fleet(2, revO, true), Now: t0, Firing: map[string]bool{"old": true, "new": true}})
	if r.Dep.Status != "STOP_REQUESTED" || r.Dep.Alarms.Status != "TRIGGERED" || strings.Join(r.Dep.Alarms.TriggeredAlarmNames, ",") != "new" {
		t.Fatalf("%s %+v", r.Dep.Status, r.Dep.Alarms)
	}
	// During the bake window too.
	bake := deployment("IN_PROGRESS")
	bake.Alarms = &shapes.DaemonDeploymentAlarms{Status: "MONITORING", AlarmNames: []string{"new"}}
	bake.Rollout.BakeUntil = t0.Add(time.Minute)
	if r := Plan(bake, World{Current: true, Instances: fleet(2, revN, true), Now: t0, Firing: map[string]bool{"new": true}}); r.Dep.Status != "STOP_REQUESTED" {
		t.Fatalf("alarm during bake: %s", r.Dep.Status)
	}
}

func TestSupersededStops(t *testing.T) {
	d := Plan(deployment("IN_PROGRESS"), World{Current: false, Now: t0})
	if d.Dep.Status != "STOPPED" || !d.Dep.StoppedAt.Equal(t0) || d.Dep.CircuitBreaker.Status != "MONITORING_COMPLETE" {
		t.Fatalf("%s", d.Dep.Status)
	}
}

func TestStallAndDeadline(t *testing.T) {
	dep := deployment("IN_PROGRESS")
	dep.Rollout.LastProgressAt = t0
	dep.Rollout.Replacing = []store.Replacement{{Instance: "a", ManagedInstance: "mi-1"}}
	inst := fleet(2, revO, true)
	inst[0].Status = "DRAINING"
	w := World{Current: true, Instances: inst, Now: t0.Add(StallAfter), Replacements: map[string]string{"mi-1": ReplacementLaunching}, Deadline: time.Minute}
	d := Plan(dep, w)
	if d.Dep.Rollout.Stalled == nil || d.Dep.Rollout.Stalled.Kind != store.StallProvisioning {
		t.Fatalf("stall %+v", d.Dep.Rollout.Stalled)
	}
	dep.Rollout.StopReasons = []string{"Essential container in task exited"}
	dep.CircuitBreaker.FailureCount = ptr(int32(1))
	if d := Plan(dep, w); d.Dep.Rollout.Stalled.Kind != store.StallRevisionFailing || !strings.Contains(d.Dep.Rollout.Stalled.Message, "exited") {
		t.Fatalf("stall %+v", d.Dep.Rollout.Stalled)
	}
	w.Now = t0.Add(time.Minute)
	if d := Plan(dep, w); d.Dep.Status != "STOPPED" || !strings.Contains(d.Dep.StatusReason, "No progress") {
		t.Fatalf("deadline: %s %q", d.Dep.Status, d.Dep.StatusReason)
	}
}

func TestInPlaceForHandStartedInstances(t *testing.T) {
	inst := fleet(2, revO, true)
	inst[0].Managed = false
	dep := deployment("IN_PROGRESS")
	dep.Rollout.BatchSize = 2
	d := Plan(dep, World{Current: true, Instances: inst, Now: t0})
	if len(d.Start) != 2 || !d.Start[0].InPlace || d.Start[1].InPlace {
		t.Fatalf("%+v", d.Start)
	}
}

func TestBatchSize(t *testing.T) {
	for _, c := range []struct {
		n    int
		p    float64
		want int
	}{{4, 25, 1}, {4, 50, 2}, {8, 25, 2}, {5, 25, 2}, {3, 0, 1}, {10, 100, 10}, {0, 25, 1}} {
		if got := BatchSize(c.n, c.p); got != c.want {
			t.Errorf("BatchSize(%d, %v) = %d, want %d", c.n, c.p, got, c.want)
		}
	}
}

func TestBreakerThreshold(t *testing.T) {
	for n, want := range map[int]int{0: 3, 1: 3, 5: 3, 6: 3, 7: 4, 10: 5, 100: 50, 399: 200, 5000: 200} {
		if got := BreakerThreshold(n); got != want {
			t.Errorf("BreakerThreshold(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestBigBatchBeginsOverSeveralWrites(t *testing.T) {
	dep := deployment("IN_PROGRESS")
	dep.Rollout.BatchSize = 60
	inst := fleet(100, revO, true)
	for i := range inst {
		inst[i].ID, inst[i].Arn = fmt.Sprintf("i%03d", i), fmt.Sprintf("arn:ci/i%03d", i)
	}
	d := Plan(dep, World{Current: true, Instances: inst, Now: t0})
	if len(d.Start) != MaxStartOps/3 {
		t.Fatalf("first write: %d starts", len(d.Start))
	}
	// The reconciler records the entries and their instances drain.
	started := map[string]bool{}
	total := 0
	for len(d.Start) > 0 {
		for _, s := range d.Start {
			if started[s.Instance.ID] {
				t.Fatalf("%s started twice", s.Instance.ID)
			}
			started[s.Instance.ID] = true
			d.Dep.Rollout.Replacing = append(d.Dep.Rollout.Replacing, store.Replacement{Instance: s.Instance.ID, ManagedInstance: "mi-" + s.Instance.ID})
			for i := range inst {
				if inst[i].ID == s.Instance.ID {
					inst[i].Status = "DRAINING"
				}
			}
		}
		total += len(d.Start)
		d = Plan(d.Dep, World{Current: true, Instances: inst, Now: t0, Replacements: map[string]string{}})
	}
	if total != 60 {
		t.Fatalf("batch of %d", total)
	}
}

// A provisioned instance that is still registering and has no daemon yet
// (a replacement the rollout launched, most often) is waited for: neither
// retired nor replaced, and the rollout is not done until it is ready. At
// N=5,000, 229 fresh replacements were retired so, each costing another.
func TestRegisteringInstanceWithoutDaemonIsWaitedFor(t *testing.T) {
	dep := deployment("IN_PROGRESS")
	inst := fleet(1, revN, true)
	inst = append(inst, Instance{ID: "n1", Arn: "arn:ci/n1", CapacityProvider: cpA, Status: "REGISTERING", Managed: true, Connected: true, RegisteredAt: t0})
	d := Plan(dep, World{Current: true, Instances: inst, Now: t0})
	if len(d.Start) != 0 || d.Dep.Status != "IN_PROGRESS" {
		t.Fatalf("fresh instance: starts %+v, status %s", d.Start, d.Dep.Status)
	}
	// With an old revision placed on it, it is retired before it serves.
	inst[1].Revision = revO
	if d := Plan(dep, World{Current: true, Instances: inst, Now: t0}); len(d.Start) != 1 || !d.Start[0].Retire {
		t.Fatalf("registering on the old revision: %+v", d.Start)
	}
}
