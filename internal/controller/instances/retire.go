package instances

import (
	"context"
	"errors"
	"time"

	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/provision"
	"github.com/capstanhq/capstan/internal/store"
)

// freshFor is how long a new ACTIVE instance's room still counts as
// coming, from when this controller first saw it ACTIVE (registration can
// be long before, on a busy server): the placement of waiting tasks reads
// a fleet view that may not show it yet, and launching for them then would
// be one instance too many.
const freshFor = 30 * time.Second

// retirement is an instance to terminate, and why.
type retirement struct {
	m          store.Item[fleet.ManagedInstance]
	registered bool
	ci         fleet.InstanceBrief
	reason     string
}

// scaleIn drains an instance without application tasks once it has been
// idle for the capacity provider's scaleInAfter.
func (r *Reconciler) scaleIn(ctx context.Context, cp store.CapacityProvider, m store.Item[fleet.ManagedInstance], ci fleet.InstanceBrief, now time.Time, later func(time.Duration)) error {
	after := DefaultScaleInAfter
	if mip := cp.ManagedInstancesProvider; mip != nil && mip.InfrastructureOptimization != nil && mip.InfrastructureOptimization.ScaleInAfter != nil {
		v := *mip.InfrastructureOptimization.ScaleInAfter
		if v < 0 {
			return nil // scale-in disabled
		}
		after = time.Duration(v) * time.Second
	}
	busy := ci.Busy
	switch {
	case busy && !m.Value.IdleSince.IsZero():
		m.Value.IdleSince = time.Time{}
		return r.Svc.UpdateManagedInstance(ctx, m)
	case busy:
		return nil
	case m.Value.IdleSince.IsZero():
		m.Value.IdleSince = now
		later(after)
		return r.Svc.UpdateManagedInstance(ctx, m)
	case now.Sub(m.Value.IdleSince) >= after:
		r.Log.Info("scaling in idle instance", "instance", ci.Arn, "idle_for", now.Sub(m.Value.IdleSince).Round(time.Second))
		return r.Svc.SetInstanceStatus(ctx, ci.Cluster, ci.ID, "DRAINING", "scale-in: no application tasks for "+after.String())
	default:
		later(after - now.Sub(m.Value.IdleSince))
	}
	return nil
}

// terminate deregisters (forcing: its tasks are recorded STOPPED),
// terminates through the provisioner and forgets the instance.
func (r *Reconciler) terminate(ctx context.Context, m store.Item[fleet.ManagedInstance], registered bool, ci fleet.InstanceBrief, reason string) error {
	if !m.Value.Terminating {
		m.Value.Terminating, m.Value.Reason = true, reason
		if err := r.Svc.UpdateManagedInstance(ctx, m); err != nil {
			return err
		}
		cur, err := store.Get[fleet.ManagedInstance](ctx, r.Store, fleet.ManagedInstanceKey(m.Value.Cluster, m.Value.ID))
		if err != nil {
			return err
		}
		m = cur
	}
	// The agent goes first: deregistered while alive, it would register anew.
	if m.Value.Handle != "" {
		if err := r.Provisioner.Terminate(ctx, m.Value.Handle); err != nil && !errors.Is(err, provision.ErrUnknown) {
			return err
		}
	}
	if registered && ci.Status != "INACTIVE" {
		if err := r.Svc.Retire(ctx, ci.Cluster, ci.ID, "Container instance retired: "+m.Value.Reason); err != nil {
			return err
		}
	}
	r.heard(m.Value.ID)
	r.mu.Lock()
	delete(r.active, m.Value.ID)
	r.mu.Unlock()
	return r.Svc.ForgetManagedInstance(ctx, m)
}
