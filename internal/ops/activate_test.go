package ops

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// activation is cluster "c" with a critical daemon "d" of capacity
// provider "cp" at revision "rev2", and what a case puts on instance i1.
type activation struct {
	id  string // i1's ID
	t   *testing.T
	st  *store.Store
	s   *Service
	ctx context.Context
}

func newActivation(t *testing.T) *activation {
	ctx := context.Background()
	st := openStore(t)
	a := &activation{id: fleet.NewInstanceID(), t: t, st: st, s: newService(st), ctx: ctx}
	if _, err := a.s.CreateCluster(ctx, &shapes.CreateClusterRequest{ClusterName: "c"}); err != nil {
		t.Fatal(err)
	}
	d := store.Daemon{Name: "d", Cluster: "c", Status: "ACTIVE", RevisionArn: "rev2",
		Spec: store.DaemonSpec{Critical: true, CapacityProviderArns: []string{a.s.ARNs.CapacityProvider("cp")}}}
	a.put(store.DaemonKey("c", "d"), d)
	return a
}

func (a *activation) put(key string, v any) {
	a.t.Helper()
	if _, err := a.st.Txn().Create(key, v).Commit(a.ctx); err != nil {
		a.t.Fatal(err)
	}
}

// instance puts i1 with status and reason, registered by access key ak.
func (a *activation) instance(status, reason, ak string) {
	ci := instanceRecord(a.id, status, 4096, 4096)
	ci.ContainerInstanceArn = a.s.ARNs.ContainerInstance("c", a.id)
	ci.StatusReason, ci.AccessKeyID, ci.Version = reason, ak, ptr(int64(1))
	a.put(store.ContainerInstanceKey("c", a.id), ci)
}

// task puts a task on i1: group "daemon:d" for the daemon's.
func (a *activation) task(id, group, last, desired string, started time.Time) {
	t := store.Task{ID: id, Cluster: "c", InstanceID: a.id}
	t.Group, t.LastStatus, t.DesiredStatus, t.StartedAt = group, last, desired, shapes.At(started)
	a.put(store.TaskKey("c", id), t)
	if last != "STOPPED" {
		a.put(store.DesiredKey("c", a.id, id), map[string]string{})
	}
}

func (a *activation) placement(p fleet.DaemonPlacement) {
	p.Daemon = "d"
	a.put(fleet.DaemonPlacementKey("c", a.id, "d"), p)
}

// activate asks for ACTIVE; it returns the status answered, or the error.
func (a *activation) activate() (string, error) {
	out, err := a.s.UpdateContainerInstancesState(a.ctx, &shapes.UpdateContainerInstancesStateRequest{
		Cluster: "c", ContainerInstances: []string{a.id}, Status: "ACTIVE"})
	if err != nil {
		return "", err
	}
	if len(out.ContainerInstances) != 1 {
		a.t.Fatalf("answer: %+v", out)
	}
	return out.ContainerInstances[0].Status, nil
}

func (a *activation) record() store.ContainerInstance {
	a.t.Helper()
	it, err := store.Get[store.ContainerInstance](a.ctx, a.st, store.ContainerInstanceKey("c", a.id))
	if err != nil {
		a.t.Fatal(err)
	}
	return it.Value
}

func (a *activation) placed() fleet.DaemonPlacement {
	a.t.Helper()
	it, err := store.Get[fleet.DaemonPlacement](a.ctx, a.st, fleet.DaemonPlacementKey("c", a.id, "d"))
	if err != nil {
		a.t.Fatal(err)
	}
	return it.Value
}

func TestActivateHeldInstanceRegistersAndRetries(t *testing.T) {
	a := newActivation(t)
	a.instance("DRAINING", fleet.RepairFailedReason+": critical daemon d failed 3 times in a row", "")
	a.task("t1", "daemon:d", "STOPPED", "STOPPED", time.Now().Add(-time.Minute))
	last := time.Now().Add(-time.Second)
	a.placement(fleet.DaemonPlacement{TaskID: "t1", RevisionArn: "rev1", TaskRevisionArn: "rev1", Attempts: 3, LastFailure: last, Failure: "exit 1"})

	got, err := a.activate()
	if err != nil {
		t.Fatal(err)
	}
	if got != "REGISTERING" {
		t.Fatalf("answer: status %s, want REGISTERING (its critical daemon does not run)", got)
	}
	ci := a.record()
	if ci.Status != "REGISTERING" || ci.StatusReason != "" || *ci.Version != 2 {
		t.Fatalf("record: status %s reason %q version %d, want REGISTERING, no reason (the hold cleared), version 2", ci.Status, ci.StatusReason, *ci.Version)
	}
	p := a.placed()
	if p.Attempts != 0 || p.Failure != "" || !p.LastFailure.IsZero() {
		t.Fatalf("placement keeps its failures: %+v", p)
	}
	if p.RevisionArn != "rev2" || p.TaskID != "" {
		t.Fatalf("placement %+v: want the daemon's current revision rev2 and the stopped task let go", p)
	}
	// Asked again while it waits: still REGISTERING, nothing written.
	if got, err := a.activate(); err != nil || got != "REGISTERING" {
		t.Fatalf("second activation: %s %v", got, err)
	}
	if v := *a.record().Version; v != 2 {
		t.Fatalf("second activation wrote the instance: version %d", v)
	}
}

// A held instance restarts nothing until activated: an app task that could
// not move off does not keep it held.
func TestActivateHeldWithAppTaskRegisters(t *testing.T) {
	a := newActivation(t)
	a.instance("DRAINING", fleet.RepairFailedReason+": critical daemon d failed 3 times in a row", "")
	a.task("app", "service:web", "RUNNING", "RUNNING", time.Now().Add(-time.Minute))
	a.placement(fleet.DaemonPlacement{RevisionArn: "rev2", Attempts: 3})
	if got, err := a.activate(); err != nil || got != "REGISTERING" {
		t.Fatalf("activate: %s %v, want REGISTERING", got, err)
	}
}

func TestActivateRunningDaemonIsActiveAtOnce(t *testing.T) {
	a := newActivation(t)
	a.instance("DRAINING", "", "")
	a.task("t2", "daemon:d", "RUNNING", "RUNNING", time.Now().Add(-time.Minute))
	a.placement(fleet.DaemonPlacement{TaskID: "t2", RevisionArn: "rev2", TaskRevisionArn: "rev2"})
	got, err := a.activate()
	if err != nil || got != "ACTIVE" {
		t.Fatalf("activate: %s %v, want ACTIVE", got, err)
	}
	if ci := a.record(); ci.Status != "ACTIVE" || *ci.Version != 2 {
		t.Fatalf("record: %s version %d", ci.Status, *ci.Version)
	}
}

func TestActivateDaemonJustStartedWaits(t *testing.T) {
	a := newActivation(t)
	a.instance("DRAINING", "", "")
	a.task("t2", "daemon:d", "RUNNING", "RUNNING", time.Now())
	a.placement(fleet.DaemonPlacement{TaskID: "t2", RevisionArn: "rev2", TaskRevisionArn: "rev2"})
	if got, err := a.activate(); err != nil || got != "REGISTERING" {
		t.Fatalf("activate: %s %v, want REGISTERING (a daemon must run a while first)", got, err)
	}
}

func TestActivateOldRevisionMovesToCurrent(t *testing.T) {
	a := newActivation(t)
	a.instance("DRAINING", "", "")
	a.task("t1", "daemon:d", "RUNNING", "RUNNING", time.Now().Add(-time.Minute))
	a.placement(fleet.DaemonPlacement{TaskID: "t1", RevisionArn: "rev1"}) // recorded before TaskRevisionArn
	if got, err := a.activate(); err != nil || got != "REGISTERING" {
		t.Fatalf("activate: %s %v, want REGISTERING (its daemon moves to rev2)", got, err)
	}
	// The daemons controller replaces the task: it runs rev1, is placed at rev2.
	if p := a.placed(); p.RevisionArn != "rev2" || p.TaskRevisionArn != "rev1" || p.TaskID != "t1" {
		t.Fatalf("placement %+v: want revision rev2, task t1 recorded at rev1", p)
	}
}

func TestActivateOldRevisionBesideAppsStays(t *testing.T) {
	a := newActivation(t)
	a.instance("DRAINING", "", "")
	a.task("t1", "daemon:d", "RUNNING", "RUNNING", time.Now().Add(-time.Minute))
	a.task("app", "family:web", "RUNNING", "RUNNING", time.Now().Add(-time.Minute))
	a.placement(fleet.DaemonPlacement{TaskID: "t1", RevisionArn: "rev1", TaskRevisionArn: "rev1"})
	if got, err := a.activate(); err != nil || got != "ACTIVE" {
		t.Fatalf("activate: %s %v, want ACTIVE (its daemon runs; an app task is there)", got, err)
	}
	if p := a.placed(); p.RevisionArn != "rev1" {
		t.Fatalf("placement %+v: a critical daemon was retargeted beside an app task", p)
	}
}

func TestActivateRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup func(a *activation)
		want  string
	}{
		{"in-place-rollout", func(a *activation) {
			a.instance("DRAINING", "Daemons change in place (daemon deployment x)", "")
			a.placement(fleet.DaemonPlacement{RevisionArn: "rev2"})
		}, "becomes ACTIVE by itself"},
		{"repair-with-apps-leaving", func(a *activation) {
			a.instance("DRAINING", "Daemons change in place (auto-repair: critical daemon d stopped)", "")
			a.task("app", "service:web", "RUNNING", "RUNNING", time.Now())
			a.placement(fleet.DaemonPlacement{RevisionArn: "rev2"})
		}, "still runs 1 application tasks"},
		{"drained-by-hand-with-apps-and-no-daemon", func(a *activation) {
			a.instance("DRAINING", "", "")
			a.task("job", "family:job", "RUNNING", "RUNNING", time.Now())
			a.task("t1", "daemon:d", "STOPPED", "STOPPED", time.Now().Add(-time.Minute))
			a.placement(fleet.DaemonPlacement{TaskID: "t1", RevisionArn: "rev2", TaskRevisionArn: "rev2", Attempts: 1})
		}, "critical daemon d is not running"},
		{"daemon-stopping", func(a *activation) {
			a.instance("DRAINING", "", "")
			a.task("t1", "daemon:d", "RUNNING", "STOPPED", time.Now().Add(-time.Minute))
			a.placement(fleet.DaemonPlacement{TaskID: "t1", RevisionArn: "rev2", TaskRevisionArn: "rev2"})
		}, "is stopping"},
		{"managed-terminating", func(a *activation) {
			a.instance("DRAINING", "scale-in: no application tasks for 5m0s", "AK1")
			a.put(fleet.ManagedInstanceKey("c", "mi-1"), fleet.ManagedInstance{ID: "mi-1", Cluster: "c", CapacityProvider: "cp", AccessKeyID: "AK1", Terminating: true, Reason: "instance lost"})
		}, "being terminated"},
		{"managed-replaced", func(a *activation) {
			a.instance("DRAINING", fleet.ReplacedPrefix+"x (instance mi-2)", "AK1")
			a.put(fleet.ManagedInstanceKey("c", "mi-1"), fleet.ManagedInstance{ID: "mi-1", Cluster: "c", CapacityProvider: "cp", AccessKeyID: "AK1"})
			a.put(fleet.ManagedInstanceKey("c", "mi-2"), fleet.ManagedInstance{ID: "mi-2", Cluster: "c", CapacityProvider: "cp", Requested: true, Replaces: a.id})
		}, "being replaced by managed instance mi-2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newActivation(t)
			c.setup(a)
			before := a.record()
			_, err := a.activate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("activate: %v, want an error saying %q", err, c.want)
			}
			if after := a.record(); after.Status != before.Status || *after.Version != *before.Version {
				t.Fatalf("a refused activation changed the instance: %s v%d → %s v%d", before.Status, *before.Version, after.Status, *after.Version)
			}
		})
	}
}

// A managed instance whose drain stopped its daemon comes back through
// REGISTERING, and the drained instance's deregistration, planned before
// the activation, leaves it be.
func TestActivateManagedDrainedDoesNotRaceRetirement(t *testing.T) {
	a := newActivation(t)
	a.instance("DRAINING", "", "AK1")
	a.put(fleet.ManagedInstanceKey("c", "mi-1"), fleet.ManagedInstance{ID: "mi-1", Cluster: "c", CapacityProvider: "cp", AccessKeyID: "AK1"})
	a.task("t1", "daemon:d", "STOPPED", "STOPPED", time.Now().Add(-time.Minute))
	a.placement(fleet.DaemonPlacement{TaskID: "t1", RevisionArn: "rev2", TaskRevisionArn: "rev2"})
	if got, err := a.activate(); err != nil || got != "REGISTERING" {
		t.Fatalf("activate: %s %v, want REGISTERING", got, err)
	}
	if err := a.s.DeregisterDrained(a.ctx, "c", a.id); err != nil {
		t.Fatal(err)
	}
	if ci := a.record(); ci.Status != "REGISTERING" {
		t.Fatalf("after a stale deregistration of the drained instance: %s, want REGISTERING", ci.Status)
	}
	// Drained again, the same call deregisters it.
	if _, err := a.s.UpdateContainerInstancesState(a.ctx, &shapes.UpdateContainerInstancesStateRequest{
		Cluster: "c", ContainerInstances: []string{a.id}, Status: "DRAINING"}); err != nil {
		t.Fatal(err)
	}
	if err := a.s.DeregisterDrained(a.ctx, "c", a.id); err != nil {
		t.Fatal(err)
	}
	if ci := a.record(); ci.Status != "INACTIVE" {
		t.Fatalf("drained instance: %s, want INACTIVE", ci.Status)
	}
}
