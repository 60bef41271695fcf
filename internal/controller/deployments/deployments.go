// Package deployments drives daemon deployment records through their
// states. This version settles deployments whose capacity providers have no
// instances (nothing to replace); instance replacement plugs into Step.
package deployments

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/store"
)

// Reconciler advances one deployment per call.
type Reconciler struct {
	Store *store.Store
	Now   func() time.Time
	Log   *slog.Logger
	// DaemonRemoved runs after a DeleteDaemon deployment removed its daemon.
	DaemonRemoved func(ctx context.Context) error
	// Emit, when set, records an event; it must not fail the reconcile.
	Emit func(ctx context.Context, cluster string, ev events.Event)
	// Progress counts the instances a deployment covers and those that
	// still have to change; nil counts container instances only.
	Progress func(ctx context.Context, dep store.DaemonDeployment) (total, remaining int, err error)
}

// Step is the pure decision for a deployment given the world: whether its
// daemon still points at it, how many instances of its capacity providers
// exist, and how many of them have yet to change. It returns the next
// record and whether it changed.
func Step(dep store.DaemonDeployment, current bool, instances, remaining int, now time.Time) (store.DaemonDeployment, bool) {
	if !InFlight(dep.Status) {
		return dep, false
	}
	at := shapes.At(now)
	if !current {
		dep.Status = "STOPPED"
		dep.StoppedAt = at
		dep.StatusReason = "Superseded by a newer deployment."
		complete(&dep)
		return dep, true
	}
	switch dep.Status {
	case "PENDING":
		dep.Status = "IN_PROGRESS"
		dep.StartedAt = at
		if dep.CircuitBreaker != nil {
			dep.CircuitBreaker.Threshold = ptr(int32(BreakerThreshold(instances)))
		}
		return dep, true
	case "IN_PROGRESS":
		if remaining == 0 {
			// Every instance in scope is on the target (none, for a delete);
			// new instances get the target revision when they register.
			dep.Status = "SUCCESSFUL"
			dep.FinishedAt = at
			dep.StatusReason = "Deployment completed successfully."
			complete(&dep)
			return dep, true
		}
	}
	return dep, false
}

func complete(dep *store.DaemonDeployment) {
	if dep.CircuitBreaker != nil && dep.CircuitBreaker.Status == "MONITORING" {
		dep.CircuitBreaker.Status = "MONITORING_COMPLETE"
	}
	if dep.Alarms != nil && dep.Alarms.Status == "MONITORING" {
		dep.Alarms.Status = "MONITORING_COMPLETE"
	}
}

// BreakerThreshold is the circuit-breaker threshold for a rollout over n
// instances: half of them, at least 3 and at most 200 (the ECS service
// breaker's formula; ECS documents none for daemons).
func BreakerThreshold(n int) int { return min(max((n+1)/2, 3), 200) }

// InFlight reports whether a deployment in this status can still change.
func InFlight(status string) bool {
	switch status {
	case "PENDING", "IN_PROGRESS", "STOP_REQUESTED", "ROLLBACK_IN_PROGRESS":
		return true
	}
	return false
}

func ptr[T any](v T) *T { return &v }

// Reconcile advances the deployment at key until it settles or needs
// instances replaced.
func (r *Reconciler) Reconcile(ctx context.Context, key string) (time.Duration, error) {
	for {
		it, err := store.Get[store.DaemonDeployment](ctx, r.Store, key)
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		dep := it.Value
		if !InFlight(dep.Status) {
			return 0, nil
		}
		daemon, err := store.Get[store.Daemon](ctx, r.Store, store.DaemonKey(dep.Cluster, dep.Daemon))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
		current := err == nil && daemon.Value.DeploymentArn == dep.DaemonDeploymentArn
		n, remaining, err := r.progress(ctx, dep)
		if err != nil {
			return 0, err
		}
		next, changed := Step(dep, current, n, remaining, r.Now())
		if !changed {
			if remaining > 0 && dep.Status == "IN_PROGRESS" {
				// Daemon tasks change state on their own; look again soon.
				return 2 * time.Second, nil
			}
			return 0, nil
		}
		tx := r.Store.Txn().Update(key, it.Rev, next)
		removed := false
		if current && next.Status == "SUCCESSFUL" && next.TargetRevisionArn == "" {
			// A finished DeleteDaemon removes the daemon; its revisions and
			// deployments stay describable.
			tx.Delete(daemon.Key, daemon.Rev)
			removed = true
		}
		if _, err := tx.Commit(ctx); err != nil {
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			return 0, err
		}
		r.Log.Info("daemon deployment", "deployment", dep.DaemonDeploymentArn, "from", dep.Status, "to", next.Status)
		r.emitTransition(ctx, dep, next)
		if removed && r.DaemonRemoved != nil {
			if err := r.DaemonRemoved(ctx); err != nil {
				return 0, err
			}
		}
	}
}

func (r *Reconciler) progress(ctx context.Context, dep store.DaemonDeployment) (int, int, error) {
	if r.Progress != nil {
		return r.Progress(ctx, dep)
	}
	n, err := r.instances(ctx, dep)
	return n, n, err
}

// instances counts the container instances of the deployment's capacity
// providers in its cluster.
func (r *Reconciler) instances(ctx context.Context, dep store.DaemonDeployment) (int, error) {
	items, _, err := store.List[store.ContainerInstance](ctx, r.Store, store.ContainerInstancePrefix(dep.Cluster), "", 0)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, it := range items {
		ci := it.Value
		if ci.Status == "INACTIVE" {
			continue
		}
		for _, cp := range dep.CapacityProviderArns {
			if strings.HasSuffix(cp, ":capacity-provider/"+ci.CapacityProviderName) {
				n++
				break
			}
		}
	}
	return n, nil
}

// BatchSize is how many of n instances a batch replaces: drainPercent of
// them rounded up, at least 1 (and 1 for a drainPercent of 0).
func BatchSize(n int, drainPercent float64) int {
	if n <= 0 {
		return 1
	}
	b := int(math.Ceil(float64(n) * drainPercent / 100))
	return min(max(b, 1), n)
}
