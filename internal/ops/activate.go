package ops

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/rollout"
	"github.com/capstanhq/capstan/internal/store"
)

// steadyFor is how long a critical daemon without a health check must
// have run before an activation counts it as running (the daemons
// controller waits as long before it activates a REGISTERING instance).
const steadyFor = time.Second

// activate brings a DRAINING or REGISTERING instance into service daemon
// first, in one write. It turns ACTIVE only when every critical daemon
// that should run there is RUNNING (HEALTHY if it has a health check) at
// its daemon's current revision; otherwise it turns REGISTERING, as a new
// instance does, and the daemons controller starts the daemons and makes
// it ACTIVE once they run. The operator's ACTIVE is also the "try again"
// of an instance auto-repair gave up on: the hold and the daemons' failure
// counts are cleared. A hand-started machine's daemons move to their
// daemon's current revision (a rollout skipped it while it was drained),
// unless application tasks still run there: a critical daemon is never
// replaced beside them (the next rollout changes it in place, apps first).
// It reports the record as written, and whether anything changed.
func (s *Service) activate(ctx context.Context, it store.Item[store.ContainerInstance]) (store.ContainerInstance, bool, error) {
	ci := it.Value
	id := ci.ID
	tx := s.Store.Txn()
	reason := ci.StatusReason
	draining := ci.Status == "DRAINING"
	held := draining && strings.HasPrefix(reason, fleet.RepairFailedReason)

	managed, err := s.guardManaged(ctx, tx, ci)
	if err != nil {
		return ci, false, err
	}
	if draining && !managed && !held && strings.HasPrefix(reason, rollout.InPlaceReason) && !strings.Contains(reason, fleet.RepairPrefix) {
		return ci, false, fault.ClientError("container instance %s is DRAINING while a daemon deployment changes its daemons in place (%s); it becomes ACTIVE by itself once they run", id, reason)
	}
	tasks, err := s.InstanceTasks(ctx, ci)
	if err != nil {
		return ci, false, err
	}
	apps := 0
	for _, t := range tasks {
		if t.Value.LastStatus != "STOPPED" && !fleet.IsDaemonTask(t.Value) {
			apps++
		}
	}
	wanted, err := s.DaemonsFor(ctx, ci.Cluster, ci.CapacityProviderName)
	if err != nil {
		return ci, false, err
	}
	placements, err := s.Placements(ctx, ci.Cluster, ci.ID)
	if err != nil {
		return ci, false, err
	}
	ready := true
	var missing string // a critical daemon that does not run yet
	for _, d := range wanted {
		p, placed := placements[d.Name]
		var task *store.Task
		if placed && p.Value.TaskID != "" {
			t, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(ci.Cluster, p.Value.TaskID))
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return ci, false, err
			}
			if err == nil {
				task = &t.Value
			}
		}
		live := task != nil && task.LastStatus != "STOPPED"
		if live && task.DesiredStatus == "STOPPED" && d.Spec.Critical {
			// Started again now it would run twice; counted ready it
			// would open the instance just as it stops.
			return ci, false, fault.ClientError("container instance %s: its critical daemon %s is stopping (the drain has reached its daemons); activate it once the daemon has stopped", id, d.Name)
		}
		if placed {
			v, changed := p.Value, false
			if v.RevisionArn != d.RevisionArn && (!live || !managed && apps == 0) {
				if live && v.TaskRevisionArn == "" {
					v.TaskRevisionArn = v.RevisionArn // the task runs the revision it was placed at
				}
				v.RevisionArn, changed = d.RevisionArn, true
			}
			if !live && v.TaskID != "" {
				// The stopped task is not a failed start to count again.
				v.TaskID, v.TaskRevisionArn, changed = "", "", true
			}
			if v.Attempts != 0 || v.Failure != "" || !v.LastFailure.IsZero() {
				v.Attempts, v.LastFailure, v.Failure, changed = 0, time.Time{}, "", true
			}
			if changed {
				tx.Update(p.Key, p.Rev, v)
			}
			p.Value = v
		}
		if !d.Spec.Critical {
			continue // never holds an instance back
		}
		ok := placed && live && task.LastStatus == "RUNNING" &&
			(p.Value.TaskRevisionArn == "" || p.Value.TaskRevisionArn == p.Value.RevisionArn)
		if ok && s.RevisionHasHealthCheck(ctx, p.Value.RevisionArn) {
			ok = task.HealthStatus == "HEALTHY"
		} else if ok {
			ok = s.Now().Sub(task.StartedAt.Time) >= steadyFor
		}
		if !ok {
			ready, missing = false, d.Name
		}
	}
	if !ready && apps > 0 && draining && !held {
		// Stopping the drain would keep them beside no critical daemon
		// (and a REGISTERING instance is taken to hold no app task); the
		// drain restarts the daemon meanwhile. A held instance restarts
		// nothing until activated, so it goes REGISTERING.
		return ci, false, fault.ClientError("container instance %s still runs %d application tasks and its critical daemon %s is not running; activate it once the daemon runs again or the tasks have left", id, apps, missing)
	}
	status := "REGISTERING"
	if ready {
		status = "ACTIVE"
	}
	changed := ci.Status != status || ci.StatusReason != ""
	if changed {
		ci.Status, ci.StatusReason = status, ""
		*ci.Version++
		tx.Update(it.Key, it.Rev, ci)
	} else {
		tx.Unchanged(it.Key, it.Rev)
	}
	if _, err := tx.Commit(ctx); err != nil {
		return ci, false, err
	}
	if !ready {
		s.Log.Info("instance activated daemon first", "instance", ci.ContainerInstanceArn, "waits_for", missing)
	}
	return ci, changed, nil
}

// guardManaged reports whether ci is an instance Capstan provisioned, and
// refuses one its capacity provider is removing or replacing: its
// replacement takes its place, and activating it would race the
// retirement. tx is made to fail if that record changes meanwhile.
func (s *Service) guardManaged(ctx context.Context, tx *store.Txn, ci store.ContainerInstance) (bool, error) {
	if ci.AccessKeyID == "" || ci.CapacityProviderName == "" {
		return false, nil
	}
	ms, err := s.ManagedInstances(ctx, ci.Cluster, ci.CapacityProviderName)
	if err != nil {
		return false, err
	}
	managed := false
	for _, m := range ms {
		if m.Value.Replaces == ci.ID && !m.Value.Terminating {
			return true, fault.ClientError("container instance %s is being replaced by managed instance %s of capacity provider %s; it cannot be activated", ci.ID, m.Value.ID, ci.CapacityProviderName)
		}
		if m.Value.AccessKeyID != ci.AccessKeyID {
			continue
		}
		managed = true
		cur, err := store.Get[fleet.ManagedInstance](ctx, s.Store, fleet.ManagedInstanceKey(ci.Cluster, m.Value.ID))
		if err != nil {
			return true, err
		}
		if cur.Value.Terminating {
			return true, fault.ClientError("container instance %s is being terminated by capacity provider %s (%s); it cannot be activated", ci.ID, ci.CapacityProviderName, cur.Value.Reason)
		}
		tx.Unchanged(cur.Key, cur.Rev)
	}
	if managed && ci.Status == "DRAINING" && (strings.HasPrefix(ci.StatusReason, fleet.ReplacedPrefix) || strings.HasPrefix(ci.StatusReason, fleet.RetiredPrefix)) {
		return true, fault.ClientError("container instance %s is DRAINING to be retired (%s); it cannot be activated", ci.ID, ci.StatusReason)
	}
	return managed, nil
}
