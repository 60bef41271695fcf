package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/store"
)

// rolloutView is the part of CapstanV1.DescribeDaemonRollout read here.
type rolloutView struct {
	Status            string `json:"status"`
	CapacityProviders []struct {
		OnTarget  int `json:"onTarget"`
		Remaining int `json:"remaining"`
		Draining  int `json:"draining"`
	} `json:"capacityProviders"`
	Stalled *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"stalled"`
}

// progress reads how far a rollout is.
func (h *harness) progress(ctx context.Context, daemonArn, depArn string, r *Rollout) {
	var v rolloutView
	if err := h.extension(ctx, "DescribeDaemonRollout", map[string]string{"daemonArn": daemonArn, "daemonDeploymentArn": depArn}, &v); err != nil {
		r.Stalled = "DescribeDaemonRollout: " + err.Error()
		return
	}
	r.OnTarget, r.Remaining, r.Draining = 0, 0, 0
	for _, cp := range v.CapacityProviders {
		r.OnTarget += cp.OnTarget
		r.Remaining += cp.Remaining
		r.Draining += cp.Draining
	}
	if v.Stalled != nil {
		r.Stalled = v.Stalled.Kind + ": " + v.Stalled.Message
	}
}

// rollouts runs UpdateDaemon with drainPercent 25, 100 and 10.
func (h *harness) rollouts(ctx context.Context, o options, rep *Report, daemonArn string, instances []string) error {
	for i, drain := range o.drains {
		td, err := h.daemonTaskDefinition(ctx, fmt.Sprintf("example/node-agent:%d", i+2))
		if err != nil {
			return err
		}
		var lat *latencies
		sctx, stopSampling := context.WithCancel(ctx)
		sampled := make(chan struct{})
		stopOutside := func() (*latencies, error) { return nil, nil }
		if i == 0 && (o.inProcess || o.sampleInProcess) {
			lat = newLatencies()
			go func() { defer close(sampled); sample(sctx, h.c, daemonArn, instances, lat) }()
		} else {
			close(sampled)
		}
		if i == 0 {
			if !o.inProcess {
				if stopOutside, err = h.startSampler(daemonArn, instances); err != nil {
					stopSampling()
					return err
				}
			}
		}
		stopProfile := func() {}
		if i == 0 {
			if stopProfile, err = o.profile("rollout", h.host); err != nil {
				stopSampling()
				return err
			}
		}
		var pg *pages
		if o.consolePages > 0 && i == 1 {
			if pg, err = h.openPages(ctx, o.consolePages, daemonArn); err != nil {
				stopProfile()
				stopSampling()
				return err
			}
		}
		written, reconciled := h.srv.Store.Writes(), h.srv.Reconciles()
		waits, waited := h.srv.Store.CacheWaits()
		t := time.Now()
		_, err = h.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(daemonArn), DaemonTaskDefinitionArn: aws.String(td),
			CapacityProviderArns: []string{h.cpArn}, Critical: aws.Bool(true),
			DeploymentConfiguration: &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(drain)}})
		if err != nil {
			stopProfile()
			stopSampling()
			return fmt.Errorf("update daemon (drainPercent %v): %w", drain, err)
		}
		r := Rollout{DrainPercent: drain, Seconds: -1, StealSeconds: -stealSeconds(), ServerCPUSeconds: -cpuSeconds(os.Getpid())}
		_, depArn, err := h.daemonRunning(ctx, daemonArn)
		if err != nil {
			stopSampling()
			return err
		}
		var dep types.DaemonDeployment
		lastLog := time.Now()
		werr := until(ctx, o.rolloutTimeout, 250*time.Millisecond, "deployment finished", func(ctx context.Context) (bool, error) {
			dep, err = h.deployment(ctx, depArn)
			if err != nil {
				return false, err
			}
			if time.Since(lastLog) > 10*time.Second {
				lastLog = time.Now()
				h.progress(ctx, daemonArn, depArn, &r)
				h.logf("  rollout %s: %d on target, %d remaining, %d draining %s", dep.Status, r.OnTarget, r.Remaining, r.Draining, r.Stalled)
			}
			r.Status = string(dep.Status)
			switch dep.Status {
			case types.DaemonDeploymentStatusPending, types.DaemonDeploymentStatusInProgress, "STOP_REQUESTED", "ROLLBACK_IN_PROGRESS":
				return false, nil
			}
			return true, nil
		})
		stopProfile()
		stopSampling()
		<-sampled
		outside, serr := stopOutside()
		if serr != nil {
			return serr
		}
		switch {
		case outside != nil:
			rep.APIClient = "process"
			rep.APISamples, rep.APIP50Ms, rep.APIP99Ms, rep.APIByOp, rep.APIErrors = outside.report()
			rep.APIByPosition = outside.positions()
			if lat != nil {
				rep.APIInProcessSamples, rep.APIInProcessP50Ms, rep.APIInProcessP99Ms, rep.APIInProcessByOp, _ = lat.report()
				rep.APIInProcessByPosition = lat.positions()
			}
		case lat != nil:
			rep.APIClient = "in-process"
			rep.APISamples, rep.APIP50Ms, rep.APIP99Ms, rep.APIByOp, rep.APIErrors = lat.report()
			rep.APIByPosition = lat.positions()
		}
		if werr == nil && dep.Status == types.DaemonDeploymentStatusSuccessful {
			r.Seconds = time.Since(t).Seconds()
		}
		r.Reason = aws.ToString(dep.StatusReason)
		r.StealSeconds += stealSeconds()
		r.ServerCPUSeconds += cpuSeconds(os.Getpid())
		if pg != nil {
			pg.report(&r, o.consolePages)
		}
		r.Reconciles = map[string]controller.Stat{}
		for name, st := range h.srv.Reconciles() {
			was := reconciled[name]
			r.Reconciles[name] = controller.Stat{Passes: st.Passes - was.Passes, Seconds: st.Seconds - was.Seconds}
		}
		r.Writes = store.WritesSince(written, h.srv.Store.Writes())
		nowWaits, nowWaited := h.srv.Store.CacheWaits()
		r.CacheWaits, r.CacheWaitSeconds = nowWaits-waits, (nowWaited - waited).Seconds()
		if o.provisioned {
			if r.Stages, err = replacementStages(ctx, h.srv.Store, clusterName, t); err != nil {
				h.logf("replacement stages: %v", err)
			}
		}
		h.progress(ctx, daemonArn, depArn, &r)
		r.TasksStored, _ = h.srv.Store.Count(ctx, store.TaskPrefix(clusterName))
		r.InstancesStored, _ = h.srv.Store.Count(ctx, store.ContainerInstancePrefix(clusterName))
		r.HeapLiveMiB = float64(heapLive()) / (1 << 20)
		rep.Rollouts = append(rep.Rollouts, r)
		if drain == 25 && rep.RolloutSeconds < 0 {
			rep.RolloutSeconds = r.Seconds
		}
		if r.Seconds < 0 {
			h.logf("rollout drainPercent %v: not finished (%s after %s: %s; %d on target, %d remaining, %d draining; %s)", drain, r.Status,
				o.rolloutTimeout, r.Reason, r.OnTarget, r.Remaining, r.Draining, r.Stalled)
			rep.Notes = append(rep.Notes, fmt.Sprintf("rollout drainPercent %v did not finish within %s (status %s); later rollouts not run", drain, o.rolloutTimeout, r.Status))
			return nil
		}
		h.logf("rollout drainPercent %v: SUCCESSFUL in %.1fs", drain, r.Seconds)
	}
	return nil
}
