package rollout

import (
	"testing"

	"github.com/capstanhq/capstan/internal/store"
)

// Joined (not provisioned) instances change in place: an ACTIVE one is
// drained first, a REGISTERING one (no app task yet) is changed at once,
// and within the drainPercent window.
func TestInPlaceStepDrainsActiveInstances(t *testing.T) {
	inst := fleet(4, revO, true)
	for i := range inst {
		inst[i].Managed = false
	}
	inst[1].Status = "REGISTERING"
	dep := deployment("IN_PROGRESS")
	dep.Rollout.BatchSize = 2 // 50% of 4
	d := Plan(dep, World{Current: true, Instances: inst, Now: t0})
	if len(d.Start) != 2 {
		t.Fatalf("started %d, want the window of 2: %+v", len(d.Start), d.Start)
	}
	a, b := d.Start[0], d.Start[1]
	if a.Instance.ID != "a" || !a.InPlace || !a.Drain || a.Retire || a.Target != revN {
		t.Fatalf("ACTIVE joined instance: %+v", a)
	}
	if b.Instance.ID != "b" || !b.InPlace || b.Drain || b.Retire {
		t.Fatalf("REGISTERING joined instance: %+v", b)
	}
	// Provisioned instances are replaced, never drained in place.
	m := fleet(1, revO, true)
	if d := Plan(dep, World{Current: true, Instances: m, Now: t0}); len(d.Start) != 1 || d.Start[0].InPlace || d.Start[0].Drain {
		t.Fatalf("managed: %+v", d.Start)
	}
}

// An in-place entry is done only once its instance is ACTIVE again on the
// target with the daemon running: while it drains (app tasks leaving, the
// daemon being replaced) it holds its slot in the window.
func TestInPlaceEntryHoldsItsSlotUntilActive(t *testing.T) {
	inst := fleet(2, revO, true)
	for i := range inst {
		inst[i].Managed = false
	}
	dep := deployment("IN_PROGRESS")
	dep.Rollout.BatchSize = 1
	dep.Rollout.LastProgressAt = t0
	dep.Rollout.Replacing = []store.Replacement{{Instance: "a", InPlace: true}}
	w := World{Current: true, Instances: inst, Now: t0}

	// Draining: the placement moved, the old daemon task still runs.
	inst[0].Status, inst[0].Revision = "DRAINING", revN
	d := Plan(dep, w)
	if len(d.Dep.Rollout.Replacing) != 1 || len(d.Start) != 0 {
		t.Fatalf("draining entry: replacing %+v, start %+v", d.Dep.Rollout.Replacing, d.Start)
	}
	// The new daemon runs but the instance is not yet active: still held.
	inst[0].Running = true
	if d := Plan(dep, w); len(d.Dep.Rollout.Replacing) != 1 || len(d.Start) != 0 {
		t.Fatalf("running but draining: %+v", d.Dep.Rollout.Replacing)
	}
	// Activated again: done, and the next instance begins.
	inst[0].Status = "ACTIVE"
	d = Plan(dep, w)
	if len(d.Dep.Rollout.Replacing) != 0 || d.Dep.Rollout.Replaced != 1 || len(d.Start) != 1 || d.Start[0].Instance.ID != "b" || !d.Start[0].Drain {
		t.Fatalf("activated: replacing %+v replaced %d start %+v", d.Dep.Rollout.Replacing, d.Dep.Rollout.Replaced, d.Start)
	}
}

// A breaker trip while joined instances change in place: their entries stay
// in the window, and each is moved back to the rollback target where it
// stands (drained, or still registering), not left on the failing revision.
func TestInPlaceRollbackRetargetsTheBatch(t *testing.T) {
	inst := fleet(2, revN, false)
	for i := range inst {
		inst[i].Managed = false
	}
	inst[0].Status, inst[1].Status = "DRAINING", "REGISTERING"
	dep := deployment("IN_PROGRESS")
	dep.Rollout.BatchSize = 1
	dep.Rollout.Replacing = []store.Replacement{{Instance: "a", InPlace: true}, {Instance: "b", InPlace: true}, {Instance: "x", ManagedInstance: "mi-1"}}
	dep.CircuitBreaker.FailureCount = ptr(int32(3))
	w := World{Current: true, Instances: inst, Now: t0, RollbackCPs: []string{cpA}}
	d := Plan(dep, w)
	if d.Dep.Status != "STOP_REQUESTED" {
		t.Fatalf("breaker: %s", d.Dep.Status)
	}
	d = Plan(d.Dep, w)
	if d.Dep.Status != "ROLLBACK_IN_PROGRESS" || len(d.Dep.Rollout.Replacing) != 2 {
		t.Fatalf("rollback start keeps only the in-place entries: %s %+v", d.Dep.Status, d.Dep.Rollout.Replacing)
	}
	r := Plan(d.Dep, w)
	if len(r.Start) != 2 || len(r.Dep.Rollout.Replacing) != 0 || !r.Changed {
		t.Fatalf("retargets: start %+v replacing %+v", r.Start, r.Dep.Rollout.Replacing)
	}
	for _, s := range r.Start {
		if !s.InPlace || s.Drain || s.Retire || s.Target != revO {
			t.Fatalf("retarget of %s: %+v", s.Instance.ID, s)
		}
	}
	// Moved back (placement on the rollback target): nothing more to send.
	inst[0].Revision, inst[1].Revision = revO, revO
	d.Dep.Rollout.Replacing = []store.Replacement{{Instance: "a", InPlace: true}, {Instance: "b", InPlace: true}}
	if r := Plan(d.Dep, w); len(r.Start) != 0 || len(r.Dep.Rollout.Replacing) != 2 {
		t.Fatalf("on the rollback target: start %+v replacing %+v", r.Start, r.Dep.Rollout.Replacing)
	}
}
