package deployments

import (
	"context"
	"time"

	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/store"
)

// emitTransition reports a committed change of a deployment's status. The
// API creates deployments PENDING without an event, so leaving PENDING
// reports having been PENDING first, dated when the deployment was created.
func (r *Reconciler) emitTransition(ctx context.Context, from, to store.DaemonDeployment) {
	if r.Emit == nil || from.Status == to.Status {
		return
	}
	if from.Status == "PENDING" {
		r.Emit(ctx, from.Cluster, events.DaemonDeploymentStateChangeEvent(deploymentChange(from, from.CreatedAt.Time)))
	}
	r.Emit(ctx, to.Cluster, events.DaemonDeploymentStateChangeEvent(deploymentChange(to, r.Now())))
}

func deploymentChange(d store.DaemonDeployment, at time.Time) events.DeploymentChange {
	return events.DeploymentChange{
		Status:                  d.Status,
		ClusterArn:              d.ClusterArn,
		DaemonArn:               d.DaemonArn,
		DaemonDeploymentArn:     d.DaemonDeploymentArn,
		TargetDaemonRevisionArn: d.TargetRevisionArn,
		UpdatedAt:               at,
	}
}
