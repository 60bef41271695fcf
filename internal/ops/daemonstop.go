package ops

import (
	"context"
	"errors"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/rollout"
	"github.com/capstanhq/capstan/internal/store"
)

// ECS has STOP_REQUESTED for daemon deployments but no call that asks for
// it; CapstanV1.StopDaemonDeployment is that call.
func (s *Service) registerDaemonStop(h *api.Handler) {
	api.RegisterExtension(h, "StopDaemonDeployment", s.StopDaemonDeployment)
}

// StopDaemonDeploymentRequest names the daemon and, optionally, the
// deployment to stop (default: the daemon's latest; it must be that one).
type StopDaemonDeploymentRequest struct {
	DaemonArn           string `json:"daemonArn"`
	DaemonDeploymentArn string `json:"daemonDeploymentArn,omitempty"`
}

// StopDaemonDeploymentResponse is the deployment as the stop left it.
type StopDaemonDeploymentResponse struct {
	DaemonArn                       string `json:"daemonArn"`
	DaemonDeploymentArn             string `json:"daemonDeploymentArn"`
	Status                          string `json:"status"`
	StatusReason                    string `json:"statusReason"`
	RollbackTargetDaemonRevisionArn string `json:"rollbackTargetDaemonRevisionArn,omitempty"`
}

// stopReason is the deployment's statusReason after an operator's stop.
const stopReason = "Stopped by a StopDaemonDeployment request."

// StopDaemonDeployment moves a deployment that is moving forward (PENDING,
// or IN_PROGRESS including its bake) to STOP_REQUESTED; the rollout
// controller then rolls it back to the revision before, exactly as after
// a tripped circuit breaker. A first deployment has nothing before: the
// rollback takes the daemon off again.
func (s *Service) StopDaemonDeployment(ctx context.Context, req *StopDaemonDeploymentRequest) (*StopDaemonDeploymentResponse, error) {
	if req.DaemonArn == "" {
		return nil, fault.Invalid("daemonArn", "is required")
	}
	var out *StopDaemonDeploymentResponse
	err := fleet.Retry(ctx, func() error {
		d, cl, err := s.liveDaemon(ctx, req.DaemonArn)
		if err != nil {
			return err
		}
		depArn := req.DaemonDeploymentArn
		if depArn == "" {
			depArn = d.Value.DeploymentArn
		}
		c, dn, id, ok := s.ARNs.DaemonChild("daemon-deployment", depArn)
		if !ok || c != d.Value.Cluster || dn != d.Value.Name {
			return fault.Invalid("daemonDeploymentArn", "%q is not a deployment of daemon %s", fleet.Clip(depArn), d.Value.Arn)
		}
		it, err := store.Get[store.DaemonDeployment](ctx, s.Store, store.DaemonDeploymentKey(c, dn, id))
		if errors.Is(err, store.ErrNotFound) {
			return fault.Invalid("daemonDeploymentArn", "daemon deployment %s does not exist", depArn)
		}
		if err != nil {
			return err
		}
		dep := it.Value
		switch {
		case dep.Status != "PENDING" && dep.Status != "IN_PROGRESS":
			return fault.ClientError("daemon deployment %s is %s: only a PENDING or IN_PROGRESS deployment (baking included) can be stopped",
				dep.DaemonDeploymentArn, dep.Status)
		case d.Value.DeploymentArn != dep.DaemonDeploymentArn:
			return fault.ClientError("daemon deployment %s is not daemon %s's latest deployment (%s) and is being superseded",
				dep.DaemonDeploymentArn, d.Value.Arn, d.Value.DeploymentArn)
		}
		rollout.RequestStop(&dep, s.Now(), stopReason)
		// The daemon is read unchanged: an update racing the stop wins
		// or loses whole.
		tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev).Unchanged(d.Key, d.Rev)
		tx.Update(it.Key, it.Rev, dep)
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		out = &StopDaemonDeploymentResponse{DaemonArn: d.Value.Arn, DaemonDeploymentArn: dep.DaemonDeploymentArn, Status: dep.Status, StatusReason: dep.StatusReason}
		if dep.Rollback != nil {
			out.RollbackTargetDaemonRevisionArn = dep.Rollback.RollbackTargetDaemonRevisionArn
		}
		return nil
	})
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	return out, nil
}
