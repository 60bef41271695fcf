package ops

import (
	"context"
	"errors"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/rollout"
	"github.com/capstanhq/capstan/internal/store"
)

// DescribeDaemonRolloutRequest names a daemon and, optionally, one of its
// deployments (default: the latest).
type DescribeDaemonRolloutRequest struct {
	DaemonArn           string `json:"daemonArn"`
	DaemonDeploymentArn string `json:"daemonDeploymentArn,omitempty"`
}

// DescribeDaemonRolloutResponse is a rollout as an operator follows it.
type DescribeDaemonRolloutResponse struct {
	DaemonArn                       string                    `json:"daemonArn"`
	DaemonDeploymentArn             string                    `json:"daemonDeploymentArn"`
	Status                          string                    `json:"status"`
	StatusReason                    string                    `json:"statusReason,omitempty"`
	TargetDaemonRevisionArn         string                    `json:"targetDaemonRevisionArn,omitempty"`
	RollbackTargetDaemonRevisionArn string                    `json:"rollbackTargetDaemonRevisionArn,omitempty"`
	BatchSize                       int                       `json:"batchSize"`
	Replaced                        int                       `json:"replaced"`
	CapacityProviders               []RolloutCapacityProvider `json:"capacityProviders"`
	CircuitBreaker                  RolloutBreaker            `json:"circuitBreaker"`
	Alarms                          RolloutAlarms             `json:"alarms"`
	BakeTimeInMinutes               int                       `json:"bakeTimeInMinutes"`
	BakeEndsAt                      shapes.Timestamp          `json:"bakeEndsAt,omitzero"`
	Stalled                         *RolloutStall             `json:"stalled,omitempty"`
	StopReasons                     []string                  `json:"stopReasons"`
	ProgressDeadlineSeconds         int                       `json:"progressDeadlineSeconds"`
	LastProgressAt                  shapes.Timestamp          `json:"lastProgressAt,omitzero"`
	CreatedAt                       shapes.Timestamp          `json:"createdAt,omitzero"`
	StartedAt                       shapes.Timestamp          `json:"startedAt,omitzero"`
	FinishedAt                      shapes.Timestamp          `json:"finishedAt,omitzero"`
	StoppedAt                       shapes.Timestamp          `json:"stoppedAt,omitzero"`
}

// DescribeDaemonRollout reports a daemon deployment's progress with what
// ECS does not show: per capacity provider progress, the batch, the bake
// window, and why it is stuck.
func (s *Service) DescribeDaemonRollout(ctx context.Context, req *DescribeDaemonRolloutRequest) (*DescribeDaemonRolloutResponse, error) {
	d, _, err := s.liveDaemon(ctx, req.DaemonArn)
	depArn := req.DaemonDeploymentArn
	switch {
	case err == nil && depArn == "":
		depArn = d.Value.DeploymentArn
	case err != nil && depArn == "":
		// A deleted daemon's deployments stay describable by ARN.
		return nil, err
	}
	dep, err := s.deploymentByArn(ctx, depArn)
	if errors.Is(err, store.ErrNotFound) || (err == nil && dep.DaemonArn != req.DaemonArn) {
		return nil, fault.Invalid("daemonDeploymentArn", "no deployment %q of daemon %s", fleet.Clip(depArn), req.DaemonArn)
	}
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	ro := dep.Rollout
	out := &DescribeDaemonRolloutResponse{DaemonArn: dep.DaemonArn, DaemonDeploymentArn: dep.DaemonDeploymentArn, Status: dep.Status, StatusReason: dep.StatusReason,
		TargetDaemonRevisionArn: dep.TargetRevisionArn, BatchSize: ro.BatchSize, Replaced: ro.Replaced, StopReasons: append([]string{}, ro.StopReasons...),
		ProgressDeadlineSeconds: int(s.ProgressDeadline / time.Second), CreatedAt: dep.CreatedAt, StartedAt: dep.StartedAt,
		FinishedAt: dep.FinishedAt, StoppedAt: dep.StoppedAt, CapacityProviders: []RolloutCapacityProvider{}}
	if !ro.LastProgressAt.IsZero() {
		out.LastProgressAt = shapes.At(ro.LastProgressAt)
	}
	if !ro.BakeUntil.IsZero() {
		out.BakeEndsAt = shapes.At(ro.BakeUntil)
	}
	if dep.Rollback != nil {
		out.RollbackTargetDaemonRevisionArn = dep.Rollback.RollbackTargetDaemonRevisionArn
	}
	if dc := dep.DeploymentConfiguration; dc != nil && dc.BakeTimeInMinutes != nil {
		out.BakeTimeInMinutes = int(*dc.BakeTimeInMinutes)
	}
	if cb := dep.CircuitBreaker; cb != nil {
		out.CircuitBreaker.Status = cb.Status
		if cb.FailureCount != nil {
			out.CircuitBreaker.FailureCount = int(*cb.FailureCount)
		}
		if cb.Threshold != nil {
			out.CircuitBreaker.Threshold = int(*cb.Threshold)
		}
	}
	out.Alarms = RolloutAlarms{AlarmNames: []string{}, TriggeredAlarmNames: []string{}, IgnoredAlarmNames: append([]string{}, ro.FiringAtStart...), Error: ro.AlarmError}
	if a := dep.Alarms; a != nil {
		out.Alarms.Status = a.Status
		out.Alarms.AlarmNames = append(out.Alarms.AlarmNames, a.AlarmNames...)
		out.Alarms.TriggeredAlarmNames = append(out.Alarms.TriggeredAlarmNames, a.TriggeredAlarmNames...)
	}
	if st := ro.Stalled; st != nil && rollout.InFlight(dep.Status) {
		out.Stalled = &RolloutStall{Kind: st.Kind, Message: st.Message, Since: shapes.At(st.Since)}
	}
	if !rollout.InFlight(dep.Status) {
		// As it ended: the counts the deployment kept.
		if t := dep.TargetDaemonRevision; t != nil {
			for _, cp := range t.CapacityProviders {
				run, drain, without := int(deref(cp.RunningInstanceCount)), int(deref(cp.DrainingInstanceCount)), int(deref(cp.WithoutDaemonInstanceCount))
				out.CapacityProviders = append(out.CapacityProviders, RolloutCapacityProvider{Arn: cp.Arn, Name: fleet.LastPart(cp.Arn),
					Instances: run + drain + without, OnTarget: run, Draining: drain, Remaining: without})
			}
		}
		return out, nil
	}
	insts, err := s.Rollout().Instances(ctx, dep)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	byCP := map[string]*RolloutCapacityProvider{}
	for _, cp := range dep.CapacityProviderArns {
		byCP[cp] = &RolloutCapacityProvider{Arn: cp, Name: fleet.LastPart(cp)}
	}
	for _, in := range insts {
		c := byCP[in.CapacityProvider]
		if c == nil {
			continue
		}
		c.Instances++
		on := rollout.Ready(dep, in)
		switch {
		case in.Status == "DRAINING" || in.Status == "DEREGISTERING":
			c.Draining++
		case on:
			c.OnTarget++
		case in.Status == "REGISTERING":
			c.Launching++
		default:
			c.Remaining++
		}
	}
	var ids []string
	for _, e := range ro.Replacing {
		if e.ManagedInstance != "" {
			ids = append(ids, e.ManagedInstance)
		}
	}
	if states, err := s.Rollout().ReplacementStates(ctx, dep.Cluster, ids); err == nil {
		for _, e := range ro.Replacing {
			if states[e.ManagedInstance] == rollout.ReplacementLaunching {
				if old, ok := byCP[s.ARNs.CapacityProvider(cpOfInstance(insts, e.Instance))]; ok {
					old.Launching++
				}
			}
		}
	}
	for _, cp := range dep.CapacityProviderArns {
		out.CapacityProviders = append(out.CapacityProviders, *byCP[cp])
	}
	return out, nil
}

func cpOfInstance(insts []rollout.Instance, id string) string {
	for _, in := range insts {
		if in.ID == id {
			return fleet.LastPart(in.CapacityProvider)
		}
	}
	return ""
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// RolloutCapacityProvider is how far a rollout is on one capacity provider.
type RolloutCapacityProvider struct {
	Arn       string `json:"arn"`
	Name      string `json:"name"`
	Instances int    `json:"instances"`
	OnTarget  int    `json:"onTarget"`
	Draining  int    `json:"draining"`
	Remaining int    `json:"remaining"`
	Launching int    `json:"launching"`
}

// RolloutStall is why a rollout does not progress.
type RolloutStall struct {
	Kind    string           `json:"kind"`
	Message string           `json:"message"`
	Since   shapes.Timestamp `json:"since,omitzero"`
}

// RolloutAlarms is the alarm watch of a rollout.
type RolloutAlarms struct {
	Status              string   `json:"status"`
	AlarmNames          []string `json:"alarmNames"`
	TriggeredAlarmNames []string `json:"triggeredAlarmNames"`
	IgnoredAlarmNames   []string `json:"ignoredAlarmNames"`
	Error               string   `json:"error,omitempty"`
}

// RolloutBreaker is the circuit breaker of a rollout.
type RolloutBreaker struct {
	FailureCount int    `json:"failureCount"`
	Threshold    int    `json:"threshold"`
	Status       string `json:"status"`
}
