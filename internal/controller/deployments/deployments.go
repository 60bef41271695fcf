// Package deployments rolls daemon deployments out: batch by batch it
// replaces the instances of the daemon's capacity providers that do not
// run the target revision (managed instances are drained and replaced by
// new ones, hand-started instances change in place), watches the circuit
// breaker and the alarms, bakes, and rolls back towards the previous
// revision when either trips. internal/rollout decides; Reconcile reads
// the fleet and carries the decisions out.
package deployments

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/alarms"
	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/rollout"
	"github.com/capstanhq/capstan/internal/store"
)

// Reconciler advances one deployment per call.
type Reconciler struct {
	Store *store.Store
	Fleet rollout.Fleet
	// Alarms is nil when the server has no alarm source.
	Alarms alarms.Source
	// ProgressDeadline stops a rollout without progress for this long
	// (0: never).
	ProgressDeadline time.Duration
	Now              func() time.Time
	Log              *slog.Logger
	// DaemonRemoved runs after a DeleteDaemon deployment removed its daemon.
	DaemonRemoved func(ctx context.Context) error
	// Emit, when set, records an event; it must not fail the reconcile.
	Emit func(ctx context.Context, cluster string, ev events.Event)

	pacer controller.Pacer
}

// MinPass is the least time between two passes over one deployment. Every
// pass reads the whole fleet, and during a rollout the fleet changes (and
// the pass writes progress, waking itself) many times a second: passes
// coalesce instead of following every change.
const MinPass = 250 * time.Millisecond

// passSpacing spaces a deployment's passes by at least this many times a
// pass's duration (at most Poll), so that one rollout's passes take a
// bounded share of the server however big the fleet.
const passSpacing = 10

// Reconcile advances the deployment at key until it waits for the fleet.
func (r *Reconciler) Reconcile(ctx context.Context, key string) (time.Duration, error) {
	if wait := r.pacer.Due(key, MinPass); wait > 0 {
		return wait, nil
	}
	// Passes are spaced by their cost too: at 5,000 instances a pass reads
	// the whole fleet in ~40 ms, and a rolling window always has changes.
	begun := time.Now()
	defer func() { r.pacer.Rest(key, controller.Spacing(passSpacing, time.Since(begun), rollout.Poll)) }()
	// Where a long pass spends its time, at debug level.
	var st passStats
	defer func() {
		if st.writes > 0 || st.conflicts > 0 {
			r.Log.Debug("deployment pass", "key", key, "writes", st.writes, "conflicts", st.conflicts, "started", st.started,
				"looking", st.looking, "replacing", st.replacing, "committing", st.committing, "took", time.Since(begun))
		}
	}()
	for {
		it, err := store.Get[store.DaemonDeployment](ctx, r.Store, key)
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		dep := it.Value
		if !rollout.InFlight(dep.Status) {
			return 0, nil
		}
		daemon, err := store.Get[store.Daemon](ctx, r.Store, store.DaemonKey(dep.Cluster, dep.Daemon))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
		w := rollout.World{Current: err == nil && daemon.Value.DeploymentArn == dep.DaemonDeploymentArn, Now: r.Now(), Deadline: r.ProgressDeadline,
			MaxOps: r.Store.MaxTxnOps() - 8}
		var rollbackTo *store.DaemonRevision
		// The pass reads the whole fleet and every entry of a window of
		// thousands: it waits once for this process's writes to reach the
		// cache, not before each read (passes of 30 s at 5,000 instances,
		// waiting out the agents' reports in between). Its write is checked
		// against the revisions read, so a stale read costs a retry.
		rctx, err := r.Store.ReadOnly(ctx)
		if err != nil {
			return 0, err
		}
		if w.Current {
			t0 := time.Now()
			if err := r.look(rctx, dep, &w); err != nil {
				return 0, err
			}
			st.looking += time.Since(t0)
			if dep.Status == "STOP_REQUESTED" && dep.Rollback != nil && dep.Rollback.RollbackTargetDaemonRevisionArn != "" {
				rev, err := store.Get[store.DaemonRevision](ctx, r.Store, store.DaemonRevisionKey(dep.Cluster, dep.Daemon, rollout.LastSegment(dep.Rollback.RollbackTargetDaemonRevisionArn)))
				if err != nil {
					return 0, err
				}
				rollbackTo = &rev.Value
				w.RollbackCPs = rev.Value.CapacityProviderArns
			}
		}
		dec := rollout.Plan(dep, w)
		if !dec.Changed {
			return dec.Requeue, nil
		}
		next := dec.Dep
		tx := r.Store.Txn()
		t0 := time.Now()
		for _, s := range dec.Start {
			e, err := r.Fleet.Replace(rctx, tx, next, s)
			if err != nil {
				return 0, err
			}
			next.Rollout.Replacing = append(next.Rollout.Replacing, e)
		}
		st.replacing += time.Since(t0)
		if !rollout.InFlight(next.Status) && w.Current {
			if err := r.Fleet.Snapshot(ctx, &next); err != nil {
				return 0, err
			}
		}
		tx.Update(key, it.Rev, next)
		removed := false
		switch {
		case dec.SwitchDaemon:
			d := daemon.Value
			d.RevisionArn = ""
			if rollbackTo != nil {
				d.RevisionArn = rollbackTo.DaemonRevisionArn
				d.Spec = specOf(*rollbackTo)
			}
			d.UpdatedAt = w.Now
			tx.Update(daemon.Key, daemon.Rev, d)
		case w.Current && next.Status == "SUCCESSFUL" && next.TargetRevisionArn == "":
			// A finished DeleteDaemon removes the daemon; its revisions and
			// deployments stay describable.
			tx.Delete(daemon.Key, daemon.Rev)
			removed = true
		}
		t0 = time.Now()
		_, err = tx.Commit(ctx)
		st.committing += time.Since(t0)
		if err != nil {
			if errors.Is(err, store.ErrConflict) {
				st.conflicts++
				continue
			}
			return 0, err
		}
		st.writes++
		st.started += len(dec.Start)
		if dep.Status != next.Status {
			r.Log.Info("daemon deployment", "deployment", dep.DaemonDeploymentArn, "from", dep.Status, "to", next.Status, "reason", next.StatusReason)
		}
		for _, s := range dec.Start {
			r.Log.Info("daemon deployment replaces instance", "deployment", dep.DaemonDeploymentArn, "instance", s.Instance.Arn, "in_place", s.InPlace)
		}
		r.emitTransition(ctx, dep, next)
		if removed && r.DaemonRemoved != nil {
			if err := r.DaemonRemoved(ctx); err != nil {
				return 0, err
			}
		}
		if !rollout.InFlight(next.Status) {
			return 0, nil
		}
		if dec.Requeue > 0 && len(dec.Start) == 0 && dep.Status == next.Status {
			return dec.Requeue, nil
		}
	}
}

type passStats struct {
	writes, conflicts, started     int
	looking, replacing, committing time.Duration
}

// look fills the world of a current deployment.
func (r *Reconciler) look(ctx context.Context, dep store.DaemonDeployment, w *rollout.World) error {
	var err error
	if w.Instances, err = r.Fleet.Instances(ctx, dep); err != nil {
		return err
	}
	var ids []string
	for _, e := range dep.Rollout.Replacing {
		if e.ManagedInstance != "" {
			ids = append(ids, e.ManagedInstance)
		}
	}
	if len(ids) > 0 {
		if w.Replacements, err = r.Fleet.ReplacementStates(ctx, dep.Cluster, ids); err != nil {
			return err
		}
	}
	names := rollout.AlarmNames(dep)
	if len(names) == 0 || (dep.Status != "PENDING" && dep.Status != "IN_PROGRESS") {
		return nil
	}
	if r.Alarms == nil {
		w.AlarmErr = "the server has no alarm source (--alarm-source)"
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := r.Alarms.Firing(actx, names)
	if err != nil {
		w.AlarmErr = err.Error()
		return nil
	}
	w.Firing = map[string]bool{}
	for _, n := range st.Firing {
		w.Firing[n] = true
	}
	if len(st.Unknown) > 0 {
		w.AlarmErr = "no alerting rule named " + strings.Join(st.Unknown, ", ") + " in the alarm source"
	}
	return nil
}

// specOf is the daemon configuration a revision snapshots.
func specOf(rev store.DaemonRevision) store.DaemonSpec {
	sp := store.DaemonSpec{TaskDefinitionArn: rev.DaemonTaskDefinitionArn, CapacityProviderArns: slices.Clone(rev.CapacityProviderArns),
		DeploymentConfiguration: rev.DeploymentConfiguration, PropagateTags: rev.PropagateTags, Critical: true}
	if rev.Critical != nil {
		sp.Critical = *rev.Critical
	}
	if rev.EnableECSManagedTags != nil {
		sp.EnableECSManagedTags = *rev.EnableECSManagedTags
	}
	if rev.EnableExecuteCommand != nil {
		sp.EnableExecuteCommand = *rev.EnableExecuteCommand
	}
	return sp
}
