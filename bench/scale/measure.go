package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

func measure(ctx context.Context, o options, h *harness, rep *Report) error {
	n := o.instances
	if err := h.setup(ctx); err != nil {
		return err
	}

	// 1. Registration.
	t := time.Now()
	envs, err := h.credentials(ctx, n)
	if err != nil {
		return err
	}
	rep.CredentialsSeconds = time.Since(t).Seconds()
	h.logf("minted %d agent credentials in %.1fs", n, rep.CredentialsSeconds)
	serverBefore := selfStats()
	hostBefore, err := h.host.Stats()
	if err != nil {
		return err
	}
	h.logf("launching %d hollow instances", n)
	t = time.Now()
	if err := h.launch(envs); err != nil {
		return err
	}
	if err := h.waitInstances(ctx, n, o.phaseTimeout); err != nil {
		return err
	}
	rep.RegisterSeconds = time.Since(t).Seconds()
	rep.InstancesPerSecond = float64(n) / rep.RegisterSeconds
	h.logf("registration: %d instances ACTIVE and connected in %.1fs", n, rep.RegisterSeconds)
	serverAfter := selfStats()
	hostAfter, err := h.host.Stats()
	if err != nil {
		return err
	}
	rep.ServerHeapPerInstanceKi = float64(serverAfter.HeapBytes-serverBefore.HeapBytes) / 1024 / float64(n)
	rep.AgentRSSPerInstanceKiB = float64(hostAfter.RSSBytes-hostBefore.RSSBytes) / 1024 / float64(n)
	rep.AgentHeapPerInstanceKiB = float64(hostAfter.HeapBytes-hostBefore.HeapBytes) / 1024 / float64(n)
	rep.AgentGoroutinesPerInst = float64(hostAfter.Goroutines-hostBefore.Goroutines) / float64(n)
	instances, err := h.instanceArns(ctx, types.ContainerInstanceStatusActive)
	if err != nil {
		return err
	}

	// 2. The daemon on every instance.
	t = time.Now()
	daemonArn, err := h.createDaemon(ctx)
	if err != nil {
		return err
	}
	if err := h.waitDaemon(ctx, daemonArn, n, o.phaseTimeout); err != nil {
		return err
	}
	rep.DaemonPlacementSeconds = time.Since(t).Seconds()
	h.logf("daemon RUNNING on all %d instances in %.1fs", n, rep.DaemonPlacementSeconds)

	// 3. A service of 2N tasks.
	app, err := h.appTaskDefinition(ctx)
	if err != nil {
		return err
	}
	rep.ServiceTasks = 2 * n
	h.mem.setPhase("service")
	stopProfile, err := o.profile("service", h.host)
	if err != nil {
		return err
	}
	t = time.Now()
	if err := h.createServices(ctx, aws.ToString(app.TaskDefinition.TaskDefinitionArn), 2*n); err != nil {
		return err
	}
	var placed time.Time
	err = h.waitService(ctx, 2*n, o.phaseTimeout, &placed)
	stopProfile()
	if err != nil {
		return err
	}
	rep.ServiceSeconds = time.Since(t).Seconds()
	rep.RunningPerSecond = float64(2*n) / rep.ServiceSeconds
	rep.PlacedSeconds = placed.Sub(t).Seconds()
	rep.PlacementsPerSecond = float64(2*n) / rep.PlacedSeconds
	h.logf("service: %d tasks placed in %.1fs (%.0f placements/s), RUNNING in %.1fs (%.0f/s)", 2*n, rep.PlacedSeconds, rep.PlacementsPerSecond, rep.ServiceSeconds, rep.RunningPerSecond)
	if o.memProfile != "" {
		writeHeapProfile(o.memProfile)
	}
	problems, err := h.invariants(ctx, n, 2*n)
	if err != nil {
		return err
	}
	rep.Invariants = append(rep.Invariants, problems...)

	h.mem.setPhase("idle")
	h.idle(ctx, o, rep)

	// 4. Rollouts, with API latency sampled during the first.
	if !o.skipRollouts {
		h.mem.setPhase("rollouts")
		if err := h.rollouts(ctx, o, rep, daemonArn, instances); err != nil {
			return err
		}
	}

	// 5. Instance loss.
	h.mem.setPhase("loss")
	return h.loss(ctx, o, rep, daemonArn)
}

// measureProvisioned is a run whose instances the server provisions: the
// daemon is created on an empty capacity provider, then services of 2N
// tasks, two to an instance, make the server launch N hollow instances
// (in the child process) with the daemon first; the rollouts then replace
// instances (drain, launch, daemon, move the tasks, terminate) as they do
// for managed instances. Registration, placement and loss are those of
// the joined run and are not measured here.
func measureProvisioned(ctx context.Context, o options, h *harness, rep *Report) error {
	n := o.instances
	// Two tasks and the daemon fill an instance; a third does not fit.
	h.appCPU = (instanceCPU - 64) / 2
	if err := h.setup(ctx); err != nil {
		return err
	}
	daemonArn, err := h.createDaemon(ctx)
	if err != nil {
		return err
	}
	app, err := h.appTaskDefinition(ctx)
	if err != nil {
		return err
	}
	rep.ServiceTasks = 2 * n
	h.mem.setPhase("provisioning")
	t := time.Now()
	if err := h.createServices(ctx, aws.ToString(app.TaskDefinition.TaskDefinitionArn), 2*n); err != nil {
		return err
	}
	if err := h.waitWhole(ctx, daemonArn, n, o.phaseTimeout); err != nil {
		return err
	}
	rep.ProvisionSeconds = time.Since(t).Seconds()
	h.logf("provisioned: %d instances launched by the server (%d held), the daemon and %d tasks RUNNING in %.1fs", n, h.prov.launched(), 2*n, rep.ProvisionSeconds)
	if o.memProfile != "" {
		writeHeapProfile(o.memProfile)
	}
	problems, err := h.invariants(ctx, n, 2*n)
	if err != nil {
		return err
	}
	rep.Invariants = append(rep.Invariants, problems...)
	instances, err := h.instanceArns(ctx, types.ContainerInstanceStatusActive)
	if err != nil {
		return err
	}
	h.mem.setPhase("idle")
	h.idle(ctx, o, rep)
	if !o.skipRollouts {
		h.mem.setPhase("rollouts")
		if err := h.rollouts(ctx, o, rep, daemonArn, instances); err != nil {
			return err
		}
		h.mem.setPhase("after the rollouts")
		// Replaced instances are terminated once deregistered; one launched
		// beyond the fleet's need would stay (no scale-in in this run).
		if err := until(ctx, time.Minute, time.Second, "replaced instances terminated", func(context.Context) (bool, error) {
			return h.prov.launched() == n, nil
		}); err != nil {
			rep.Invariants = append(rep.Invariants, fmt.Sprintf("the provisioner holds %d instances after the rollouts, want %d", h.prov.launched(), n))
		}
		if rep.RolloutSeconds < 0 {
			return nil // tasks are still moving: the invariants cannot hold yet
		}
		problems, err := h.invariants(ctx, n, 2*n)
		if err != nil {
			return err
		}
		rep.Invariants = append(rep.Invariants, problems...)
	}
	h.mem.setPhase("loss")
	return h.lossProvisioned(ctx, o, rep, daemonArn)
}

// idle measures the CPU of the fleet while nothing changes: the server's
// process (the harness in it is idle too) and the hollow agents'.
func (h *harness) idle(ctx context.Context, o options, rep *Report) {
	if o.idle <= 0 {
		return
	}
	agents := func() float64 {
		st, err := h.host.Stats()
		if err != nil {
			return 0
		}
		return st.CPUSeconds
	}
	stopProfile, err := o.profile("idle", h.host)
	if err != nil {
		h.logf("idle profile: %v", err)
		stopProfile = func() {}
	}
	s0, a0, t := cpuSeconds(os.Getpid()), agents(), time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(o.idle):
	}
	stopProfile()
	if ctx.Err() != nil {
		return
	}
	rep.IdleSeconds = time.Since(t).Seconds()
	rep.IdleServerCores = (cpuSeconds(os.Getpid()) - s0) / rep.IdleSeconds
	rep.IdleAgentCores = (agents() - a0) / rep.IdleSeconds
	h.logf("steady fleet for %.1fs: server %.3f cores, hollow agents %.3f cores", rep.IdleSeconds, rep.IdleServerCores, rep.IdleAgentCores)
}

// loss kills 1% of the instances and measures detection and replacement.
func (h *harness) loss(ctx context.Context, o options, rep *Report, daemonArn string) error {
	n := o.instances
	h.mu.Lock()
	handles := slices.Clone(h.handles)
	h.mu.Unlock()
	arns, t, err := h.kill(ctx, o, rep, handles)
	if err != nil {
		return err
	}
	for _, a := range arns {
		if _, err := h.c.DeregisterContainerInstance(ctx, &ecs.DeregisterContainerInstanceInput{Cluster: aws.String(clusterName),
			ContainerInstance: aws.String(a), Force: aws.Bool(true)}); err != nil {
			return fmt.Errorf("deregister %s: %w", a, err)
		}
	}
	envs, err := h.credentials(ctx, len(arns))
	if err != nil {
		return err
	}
	if err := h.launch(envs); err != nil {
		return err
	}
	if err := h.waitWhole(ctx, daemonArn, n, o.phaseTimeout); err != nil {
		return err
	}
	rep.ReplaceSeconds = time.Since(t).Seconds()
	h.logf("replaced in %.1fs", rep.ReplaceSeconds)
	problems, err := h.invariants(ctx, n, 2*n)
	if err != nil {
		return err
	}
	rep.Invariants = append(rep.Invariants, problems...)
	return nil
}

// kill kills 1% of the instances of handles (spread over them) at once
// and waits until the server reports every one disconnected.
func (h *harness) kill(ctx context.Context, o options, rep *Report, handles []string) (arns []string, killedAt time.Time, err error) {
	k := max(1, o.instances/100)
	var victims []string
	for i := range k {
		victims = append(victims, handles[i*len(handles)/k])
	}
	for _, v := range victims {
		a, err := h.host.Arn(v)
		if err != nil || a == "" {
			return nil, killedAt, fmt.Errorf("instance of %s: %q %v", v, a, err)
		}
		arns = append(arns, a)
	}
	rep.Killed = k
	killedAt = time.Now()
	for _, v := range victims {
		if err := h.host.Kill(v); err != nil {
			return nil, killedAt, fmt.Errorf("kill %s: %w", v, err)
		}
	}
	h.logf("killed %d instances", k)
	err = until(ctx, o.phaseTimeout, 100*time.Millisecond, "lost instances reported disconnected", func(ctx context.Context) (bool, error) {
		cis, err := h.describeInstances(ctx, arns)
		if err != nil {
			return false, err
		}
		for _, ci := range cis {
			if ci.AgentConnected {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, killedAt, err
	}
	rep.DetectSeconds = time.Since(killedAt).Seconds()
	h.logf("loss detected in %.2fs", rep.DetectSeconds)
	return arns, killedAt, nil
}

// lossProvisioned kills 1% of the instances the server provisioned: their
// agents and containers stop, the machines stay (the provider does not
// report them gone). The server must notice, give up on them after
// LostAfter without a session, terminate them and launch replacements on
// its own: replacement is until the service and the daemon are whole on N
// instances and the provider holds exactly N.
func (h *harness) lossProvisioned(ctx context.Context, o options, rep *Report, daemonArn string) error {
	n := o.instances
	arns, t, err := h.kill(ctx, o, rep, h.prov.handles())
	if err != nil {
		return err
	}
	if err := h.waitWhole(ctx, daemonArn, n, o.phaseTimeout); err != nil {
		return err
	}
	if err := until(ctx, o.phaseTimeout, 250*time.Millisecond, "lost instances terminated", func(ctx context.Context) (bool, error) {
		if h.prov.launched() != n {
			return false, nil
		}
		cis, err := h.describeInstances(ctx, arns)
		if err != nil {
			return false, err
		}
		for _, ci := range cis {
			if aws.ToString(ci.Status) != "INACTIVE" {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	rep.ReplaceSeconds = time.Since(t).Seconds()
	h.logf("replaced by the server in %.1fs", rep.ReplaceSeconds)
	problems, err := h.invariants(ctx, n, 2*n)
	if err != nil {
		return err
	}
	rep.Invariants = append(rep.Invariants, problems...)
	return nil
}
