package main

import (
	"context"
	"fmt"
	"github.com/capstanhq/capstan/internal/ops"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/coverage"
)

const (
	daemonName  = "guard"
	serviceName = "web"
	// appMemory is the service task's memory: with 1024 MiB instances only
	// one fits on each, as does the distinctInstance constraint.
	appMemory = 600
)

// Run is one rollout. Times in Replaced and Batches are seconds after the
// UpdateDaemon call unless named otherwise.
type Run struct {
	Name             string  `json:"name"`
	Instances        int     `json:"instances"`
	DrainPercent     float64 `json:"drainPercent"`
	Cluster          string  `json:"cluster"`
	CapacityProvider string  `json:"capacityProvider"`
	DaemonArn        string  `json:"daemonArn"`
	DeploymentArn    string  `json:"daemonDeploymentArn"`
	TargetTaskDef    string  `json:"targetDaemonTaskDefinitionArn"`
	SetupSeconds     float64 `json:"setupSeconds"`
	// UpdateAt is when UpdateDaemon was called (this program's clock, the
	// server's too: it runs in-process).
	UpdateAt     time.Time `json:"updateDaemonAt"`
	Status       string    `json:"status"`
	StatusReason string    `json:"statusReason,omitempty"`
	// TotalSeconds is UpdateDaemon → the deployment's finishedAt;
	// SeenSeconds → the polling client saw it finished.
	TotalSeconds float64 `json:"totalSeconds"`
	SeenSeconds  float64 `json:"seenSeconds"`
	// BatchSize is what DescribeDaemonRollout reports; Expected is
	// ceil(N × drainPercent / 100), at least 1.
	BatchSize         int     `json:"batchSize"`
	BatchSizeExpected int     `json:"batchSizeExpected"`
	Batches           []Batch `json:"batches"`
	// TailSeconds is the last batch's last INACTIVE → finishedAt.
	TailSeconds float64           `json:"tailSeconds"`
	Replaced    []*Replaced       `json:"replaced"`
	Phases      map[string]Stat   `json:"phases"`
	Gap         float64           `json:"gapSeconds"`
	Gaps        []coverage.Gap    `json:"gaps,omitempty"`
	GapSetup    float64           `json:"gapDuringSetupSeconds"`
	Events      int               `json:"events"`
	Stalls      []string          `json:"stalls,omitempty"`
	Findings    []string          `json:"findings,omitempty"`
	Measures    map[string]string `json:"endState,omitempty"`
	// The service: desired count, the lowest count its minimumHealthyPercent
	// (100) allows, and the lowest RUNNING count recorded during the
	// rollout.
	ServiceDesired        int `json:"serviceDesired"`
	ServiceMinimumHealthy int `json:"serviceMinimumHealthy"`
	ServiceMinRunning     int `json:"serviceMinRunning"`
	// Instances of the capacity provider at once: DRAINING; DRAINING or
	// DEREGISTERING; and in any status but INACTIVE.
	MaxDraining   int `json:"maxDraining"`
	MaxLeaving    int `json:"maxDrainingOrDeregistering"`
	PeakInstances int `json:"peakInstances"`
	// Unrequested are instances of the capacity provider that registered
	// during the rollout without being a rollout's replacement: launched
	// by the capacity provider for a waiting task.
	Unrequested []string `json:"unrequestedInstances,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// Batch is one batch as the record shows it: old instances whose DRAINING
// came after every INACTIVE of the batch before.
type Batch struct {
	Index     int     `json:"index"`
	Instances int     `json:"instances"`
	Start     float64 `json:"firstDrainingSeconds"`
	End       float64 `json:"lastInactiveSeconds"`
	Seconds   float64 `json:"seconds"`
	// WaitBefore is the previous batch's last INACTIVE (or UpdateDaemon)
	// → this batch's first DRAINING: terminating the old instances and
	// the controller noticing.
	WaitBefore float64 `json:"waitBeforeSeconds"`
}

// Replaced is one old instance and its replacement, with the recorded
// moments the phases are read from (zero when the record lacks one).
type Replaced struct {
	Old             string `json:"oldInstance"`
	ManagedInstance string `json:"replacementManagedInstance,omitempty"`
	Replacement     string `json:"replacementInstance,omitempty"`
	Batch           int    `json:"batch"`

	Draining       time.Time `json:"oldDraining,omitzero"`
	AppStopping    time.Time `json:"oldAppStopping,omitzero"`
	LastAppStopped time.Time `json:"oldLastAppStopped,omitzero"`
	DaemonStopped  time.Time `json:"oldDaemonStopped,omitzero"`
	Inactive       time.Time `json:"oldInactive,omitzero"`

	Requested     time.Time `json:"replacementRequested,omitzero"`
	Launched      time.Time `json:"replacementLaunched,omitzero"`
	Registered    time.Time `json:"replacementRegistered,omitzero"`
	DaemonFirst   time.Time `json:"replacementDaemonFirstEvent,omitzero"`
	DaemonRunning time.Time `json:"replacementDaemonRunning,omitzero"`
	Active        time.Time `json:"replacementActive,omitzero"`
	AppRunning    time.Time `json:"replacementAppRunning,omitzero"`

	Phases map[string]float64 `json:"phases"`
}

type phaseDef struct {
	key, label, def string
	from, to        func(*Replaced) time.Time
}

// phaseDefs are the phases of one instance's replacement. Every moment is
// the server's record; see the Replaced fields.
var phaseDefs = []phaseDef{
	{"drain", "drain", "old instance DRAINING recorded → its last service task STOPPED recorded",
		func(r *Replaced) time.Time { return r.Draining }, func(r *Replaced) time.Time { return r.LastAppStopped }},
	{"drain.moved", "  until moved", "… → the old service task's STOPPING recorded (the scheduler stops it once its successor RUNS, on any instance: start-before-stop)",
		func(r *Replaced) time.Time { return r.Draining }, func(r *Replaced) time.Time { return r.AppStopping }},
	{"drain.stop", "  app stop", "… STOPPING → STOPPED recorded (the agent stops the container; the task's shell runs its TERM trap after the current `sleep 1`)",
		func(r *Replaced) time.Time { return r.AppStopping }, func(r *Replaced) time.Time { return r.LastAppStopped }},
	{"provision", "provision", "old instance DRAINING recorded (the replacement is requested in the same write) → replacement registeredAt",
		func(r *Replaced) time.Time { return r.Draining }, func(r *Replaced) time.Time { return r.Registered }},
	{"provision.launch", "  launch", "… → the instances controller's launch returned (managed instance launchedAt, polled)",
		func(r *Replaced) time.Time { return r.Draining }, func(r *Replaced) time.Time { return r.Launched }},
	{"provision.boot", "  agent boot", "… launchedAt → registeredAt (agent process starts and registers)",
		func(r *Replaced) time.Time { return r.Launched }, func(r *Replaced) time.Time { return r.Registered }},
	{"daemonStart", "daemon start", "replacement registeredAt → replacement ACTIVE recorded",
		func(r *Replaced) time.Time { return r.Registered }, func(r *Replaced) time.Time { return r.Active }},
	{"daemonStart.session", "  agent ready", "… registeredAt → the daemon task's first recorded event (the agent's first report: it opens its session after creating the daemon network and namespace holder)",
		func(r *Replaced) time.Time { return r.Registered }, func(r *Replaced) time.Time { return r.DaemonFirst }},
	{"daemonStart.run", "  daemon RUNNING", "… → the critical daemon task RUNNING recorded on the replacement",
		func(r *Replaced) time.Time { return r.DaemonFirst }, func(r *Replaced) time.Time { return r.DaemonRunning }},
	{"daemonStart.activate", "  activation", "… daemon RUNNING → replacement ACTIVE (a critical daemon without health check must run 1 s)",
		func(r *Replaced) time.Time { return r.DaemonRunning }, func(r *Replaced) time.Time { return r.Active }},
	{"appMove", "app move", "replacement ACTIVE recorded → first service task RUNNING recorded on it, if that came before the old instance was INACTIVE (a replacement left idle in its batch is a finding, not a sample)",
		func(r *Replaced) time.Time { return r.Active }, func(r *Replaced) time.Time { return r.AppRunning }},
	{"terminate", "terminate", "old instance's last service task STOPPED → old instance INACTIVE recorded",
		func(r *Replaced) time.Time { return r.LastAppStopped }, func(r *Replaced) time.Time { return r.Inactive }},
	{"terminate.daemonStop", "  daemon stop", "… → the old instance's critical daemon task STOPPED recorded",
		func(r *Replaced) time.Time { return r.LastAppStopped }, func(r *Replaced) time.Time { return r.DaemonStopped }},
	{"terminate.deregister", "  deregister", "… daemon STOPPED → INACTIVE",
		func(r *Replaced) time.Time { return r.DaemonStopped }, func(r *Replaced) time.Time { return r.Inactive }},
	{"instance", "whole instance", "old instance DRAINING → old instance INACTIVE recorded",
		func(r *Replaced) time.Time { return r.Draining }, func(r *Replaced) time.Time { return r.Inactive }},
}

// seenManaged is what polling saw of a replacement's managed instance
// record: launchedAt is rewritten when the instances controller launches
// it.
type seenManaged struct {
	requestedByRollout bool
	replaces           string // container instance ID
	requested          time.Time
	launched           time.Time
	arn                string
	registered         time.Time
}

var replacedBy = regexp.MustCompile(`\(instance (mi-[0-9a-f]+)\)`)

// rollout runs one scenario: set-up, the rollout, the reading, the
// tear-down.
func (b *bench) rollout(ctx context.Context, n int, pct float64) (*Run, error) {
	ps := strings.ReplaceAll(fmt.Sprintf("%g", pct), ".", "p")
	r := &Run{Name: fmt.Sprintf("%d instances, drainPercent %g", n, pct), Instances: n, DrainPercent: pct, Phases: map[string]Stat{},
		ServiceDesired: n, ServiceMinimumHealthy: n, BatchSizeExpected: max(1, int(math.Ceil(float64(n)*pct/100))), Measures: map[string]string{}}
	fmt.Fprintf(b.Out, "\n== %s\n", r.Name)
	cluster, err := b.Cluster(ctx, fmt.Sprintf("bench-ro%d-%s", n, ps))
	if err != nil {
		return r, err
	}
	r.Cluster = cluster
	r.CapacityProvider = fmt.Sprintf("ro%d-%s-%s", n, ps, benchkit.RandomHex(4))
	cp := r.CapacityProvider
	h := coverage.NewHistory()
	b.histories = append(b.histories, h)
	defer func() {
		t0 := time.Now()
		if err := b.teardown(context.WithoutCancel(ctx), cluster, cp); err != nil {
			fmt.Fprintf(b.Out, "tear-down of %s: %v (the final clean-up removes what is left)\n", cluster, err)
		} else {
			fmt.Fprintf(b.Out, "tear-down: %.1f s\n", time.Since(t0).Seconds())
		}
	}()

	// Set-up.
	setup := time.Now()
	cpArn, err := b.CapacityProvider(ctx, cluster, cp, 3600)
	if err != nil {
		return r, err
	}
	td1, err := b.daemonTaskDefinition(ctx, daemonName, "1")
	if err != nil {
		return r, err
	}
	guard, err := b.daemon(ctx, cluster, daemonName, td1, cp, cpArn)
	if err != nil {
		return r, err
	}
	r.DaemonArn = guard.Arn
	if err := b.WaitDeployment(ctx, guard.Arn, time.Minute); err != nil {
		return r, err
	}
	appTD, err := b.TaskDefinition(ctx, serviceName, appMemory)
	if err != nil {
		return r, err
	}
	if _, err := b.C.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(cluster), ServiceName: aws.String(serviceName),
		TaskDefinition: aws.String(appTD), DesiredCount: aws.Int32(int32(n)),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cp)}},
		PlacementConstraints:     []types.PlacementConstraint{{Type: types.PlacementConstraintTypeDistinctInstance}},
		DeploymentConfiguration:  &types.DeploymentConfiguration{MinimumHealthyPercent: aws.Int32(100), MaximumPercent: aws.Int32(200)}}); err != nil {
		return r, fmt.Errorf("create service: %w", err)
	}
	if err := b.Until(ctx, time.Duration(n)*40*time.Second, fmt.Sprintf("service of %d on %d ACTIVE instances with the daemon", n, n), func(ctx context.Context) (bool, error) {
		ok, _, err := b.steady(ctx, cluster, cp, n, "")
		return ok, err
	}); err != nil {
		return r, err
	}
	_, old, err := b.steady(ctx, cluster, cp, n, "")
	if err != nil {
		return r, err
	}
	r.SetupSeconds = time.Since(setup).Seconds()
	fmt.Fprintf(b.Out, "set-up: %d instances with the daemon and a service task each in %.1f s\n", len(old), r.SetupSeconds)
	if err := benchkit.Sleep(ctx, b.o.settle); err != nil {
		return r, err
	}

	// The rollout.
	td2, err := b.daemonTaskDefinition(ctx, daemonName, "2")
	if err != nil {
		return r, err
	}
	r.TargetTaskDef = td2
	r.UpdateAt = time.Now()
	up, err := b.C.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(guard.Arn), DaemonTaskDefinitionArn: aws.String(td2),
		CapacityProviderArns: []string{cpArn}, Critical: aws.Bool(true),
		DeploymentConfiguration: &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(pct)}})
	if err != nil {
		return r, fmt.Errorf("update daemon: %w", err)
	}
	r.DeploymentArn = aws.ToString(up.DeploymentArn)
	seen := map[string]*seenManaged{}
	stalls := map[string]bool{}
	var lastStatus string
	var roErr error
	deadline := r.UpdateAt.Add(b.o.rolloutTimeout)
	for {
		ro, err := b.Srv.Service.DescribeDaemonRollout(ctx, &ops.DescribeDaemonRolloutRequest{DaemonArn: guard.Arn, DaemonDeploymentArn: r.DeploymentArn})
		if err == nil {
			if ro.Status != lastStatus {
				fmt.Fprintf(b.Out, "  %6.2f s  deployment %s\n", time.Since(r.UpdateAt).Seconds(), ro.Status)
				lastStatus = ro.Status
			}
			r.Status, r.StatusReason, r.BatchSize = ro.Status, ro.StatusReason, max(r.BatchSize, ro.BatchSize)
			if st := ro.Stalled; st != nil {
				msg := fmt.Sprintf("stalled (%s) since %.1f s: %s", st.Kind, st.Since.Sub(r.UpdateAt).Seconds(), st.Message)
				if !stalls[msg] {
					stalls[msg] = true
					r.Stalls = append(r.Stalls, msg)
					fmt.Fprintf(b.Out, "  %6.2f s  %s\n", time.Since(r.UpdateAt).Seconds(), msg)
				}
			}
			if !ro.FinishedAt.IsZero() {
				r.TotalSeconds = ro.FinishedAt.Sub(r.UpdateAt).Seconds()
			}
		}
		b.watchManaged(ctx, cluster, cp, seen)
		if err == nil && !inFlight(r.Status) {
			r.SeenSeconds = time.Since(r.UpdateAt).Seconds()
			break
		}
		if time.Now().After(deadline) {
			roErr = fmt.Errorf("deployment still %s %s after UpdateDaemon", r.Status, b.o.rolloutTimeout)
			break
		}
		if err := benchkit.Sleep(ctx, b.o.poll); err != nil {
			return r, err
		}
	}
	if roErr == nil && r.Status != "SUCCESSFUL" {
		roErr = fmt.Errorf("deployment ended %s: %s", r.Status, r.StatusReason)
	}
	fmt.Fprintf(b.Out, "rollout: %s after %.1f s (recorded finish %.1f s)\n", r.Status, r.SeenSeconds, r.TotalSeconds)

	// The service should be whole again on N new instances.
	end := time.Now()
	if roErr == nil {
		err := b.Until(ctx, time.Minute, "service steady after the rollout", func(ctx context.Context) (bool, error) {
			ok, _, err := b.steady(ctx, cluster, cp, n, td2)
			return ok, err
		})
		if err != nil {
			r.Findings = append(r.Findings, err.Error())
		}
	}
	if err := benchkit.Sleep(ctx, b.o.settle); err != nil {
		return r, err
	}
	b.watchManaged(ctx, cluster, cp, seen)
	b.endState(ctx, r, cluster, cp, old, td2)
	end = time.Now()
	if err := h.Fetch(ctx, b.Ev, cluster); err != nil {
		return r, fmt.Errorf("read events: %w", err)
	}
	r.Events = len(h.Events())
	b.analyse(r, h, guard, old, seen, end, setup)
	return r, roErr
}

func inFlight(status string) bool {
	switch status {
	case "", "PENDING", "IN_PROGRESS", "STOP_REQUESTED", "ROLLBACK_IN_PROGRESS":
		return true
	}
	return false
}

// watchManaged notes every replacement's managed instance record.
func (b *bench) watchManaged(ctx context.Context, cluster, cp string, seen map[string]*seenManaged) {
	ms, err := b.Srv.Service.ManagedInstances(ctx, cluster, cp)
	if err != nil {
		return
	}
	for _, it := range ms {
		m := it.Value
		s := seen[m.ID]
		if s == nil {
			s = &seenManaged{requestedByRollout: m.Requested, replaces: m.Replaces}
			seen[m.ID] = s
		}
		if m.Handle == "" && s.requested.IsZero() {
			s.requested = m.LaunchedAt
		}
		if m.Handle != "" {
			s.launched = m.LaunchedAt
		}
		if s.arn == "" {
			if ci, ok, err := b.Srv.Service.InstanceOf(ctx, m); err == nil && ok {
				s.arn, s.registered = ci.ContainerInstanceArn, ci.RegisteredAt.Time
			}
		}
	}
}

// steady reports whether the service runs n tasks on n distinct ACTIVE
// instances of cp and every ACTIVE instance runs the daemon (of task
// definition td unless it is ""). Before the rollout (td "") there must be
// exactly n ACTIVE instances; after it, more are allowed (an instance the
// capacity provider launched during the rollout may be idle). It returns
// the ACTIVE instances.
func (b *bench) steady(ctx context.Context, cluster, cp string, n int, td string) (bool, []string, error) {
	cis, err := b.Instances(ctx, cluster, cp)
	if err != nil {
		return false, nil, err
	}
	var active []string
	for _, ci := range cis {
		if aws.ToString(ci.Status) == "ACTIVE" {
			active = append(active, aws.ToString(ci.ContainerInstanceArn))
		}
	}
	sort.Strings(active)
	ts, err := b.Tasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), ServiceName: aws.String(serviceName)})
	if err != nil {
		return false, active, err
	}
	apps := map[string]bool{}
	for _, t := range benchkit.Running(ts) {
		apps[aws.ToString(t.ContainerInstanceArn)] = true
	}
	ds, err := b.Tasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), DaemonName: aws.String(daemonName)})
	if err != nil {
		return false, active, err
	}
	guarded := map[string]bool{}
	for _, t := range benchkit.Running(ds) {
		if td == "" || aws.ToString(t.TaskDefinitionArn) == td {
			guarded[aws.ToString(t.ContainerInstanceArn)] = true
		}
	}
	if len(benchkit.Running(ts)) != n || len(apps) != n || len(active) < n || (td == "" && len(active) != n) {
		return false, active, nil
	}
	for _, a := range active {
		if !guarded[a] || (td == "" && !apps[a]) {
			return false, active, nil
		}
	}
	for a := range apps {
		if !slices.Contains(active, a) {
			return false, active, nil
		}
	}
	return true, active, nil
}

// endState records where the fleet ended: instances of cp by status, how
// many old ones are left, how many ACTIVE ones run the target daemon.
func (b *bench) endState(ctx context.Context, r *Run, cluster, cp string, old []string, td string) {
	cis, err := b.Instances(ctx, cluster, cp)
	if err != nil {
		r.Findings = append(r.Findings, "end state: "+err.Error())
		return
	}
	by := map[string]int{}
	left := 0
	for _, ci := range cis {
		by[aws.ToString(ci.Status)]++
		if aws.ToString(ci.Status) != "INACTIVE" && slices.Contains(old, aws.ToString(ci.ContainerInstanceArn)) {
			left++
		}
	}
	var parts []string
	for _, s := range []string{"REGISTERING", "ACTIVE", "DRAINING", "DEREGISTERING", "INACTIVE"} {
		if by[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", by[s], s))
		}
	}
	r.Measures["instances"] = strings.Join(parts, ", ")
	r.Measures["oldInstancesLeft"] = fmt.Sprint(left)
	ds, err := b.Tasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), DaemonName: aws.String(daemonName)})
	if err == nil {
		on, other := 0, 0
		for _, t := range benchkit.Running(ds) {
			if aws.ToString(t.TaskDefinitionArn) == td {
				on++
			} else {
				other++
			}
		}
		r.Measures["daemonTasksOnTarget"] = fmt.Sprint(on)
		r.Measures["daemonTasksOtherRevision"] = fmt.Sprint(other)
	}
	if left > 0 {
		r.Findings = append(r.Findings, fmt.Sprintf("%d of the %d old instances are still not INACTIVE at the end", left, len(old)))
	}
}

// analyse reads the record into phases, batches and the rollout's
// safety measures.
func (b *bench) analyse(r *Run, h *coverage.History, guard coverage.Daemon, old []string, seen map[string]*seenManaged, end, setup time.Time) {
	cp := r.CapacityProvider
	byID := map[string]*seenManaged{}
	for id, s := range seen {
		byID[id] = s
	}
	replacementOf := map[string]string{} // old instance ID → managed instance ID
	managedOf := map[string]string{}     // container instance ARN → managed instance ID
	for id, s := range seen {
		if s.requestedByRollout {
			replacementOf[s.replaces] = id
		}
		if s.arn != "" {
			managedOf[s.arn] = id
		}
	}
	svc, dmn := "service:"+serviceName, "daemon:"+daemonName
	firstOn := func(inst, group, status string, after time.Time) time.Time {
		var at time.Time
		for _, t := range h.Tasks() {
			if t.Instance != inst || t.Group != group {
				continue
			}
			for _, s := range t.States {
				if s.Status == status && !s.At.Before(after) && (at.IsZero() || s.At.Before(at)) {
					at = s.At
					break
				}
			}
		}
		return at
	}
	firstState := func(inst, status string) time.Time {
		if in := h.Instance(inst); in != nil {
			for _, s := range in.States {
				if s.Status == status {
					return s.At
				}
			}
		}
		return time.Time{}
	}
	for _, arn := range old {
		rp := &Replaced{Old: arn, Phases: map[string]float64{}}
		r.Replaced = append(r.Replaced, rp)
		if in := h.Instance(arn); in != nil {
			for _, s := range in.States {
				if s.Status == "DRAINING" && rp.Draining.IsZero() {
					rp.Draining = s.At
					if m := replacedBy.FindStringSubmatch(s.Reason); m != nil {
						rp.ManagedInstance = m[1]
					}
				}
				if s.Status == "INACTIVE" && rp.Inactive.IsZero() {
					rp.Inactive = s.At
				}
			}
		}
		if rp.ManagedInstance == "" {
			rp.ManagedInstance = replacementOf[shortArn(arn)]
		}
		// The old instance's service tasks: the last one's STOPPED.
		stoppedAll := true
		for _, t := range h.Tasks() {
			if t.Instance != arn || t.Group != svc {
				continue
			}
			st, ok := t.First("STOPPED")
			if !ok {
				stoppedAll = false
				continue
			}
			if st.At.After(rp.LastAppStopped) {
				rp.LastAppStopped = st.At
				rp.AppStopping = time.Time{}
				for _, x := range t.States {
					if x.Status == "STOPPING" || x.Status == "DEACTIVATING" || x.Status == "STOPPED" {
						rp.AppStopping = x.At
						break
					}
				}
			}
		}
		if !stoppedAll {
			rp.LastAppStopped = time.Time{}
			r.Findings = append(r.Findings, fmt.Sprintf("old instance %s: a service task has no recorded STOPPED", shortArn(arn)))
		}
		rp.DaemonStopped = firstOn(arn, dmn, "STOPPED", r.UpdateAt)
		if s := byID[rp.ManagedInstance]; s != nil {
			rp.Requested, rp.Launched, rp.Registered, rp.Replacement = s.requested, s.launched, s.registered, s.arn
			if rp.Replacement != "" {
				rp.DaemonRunning = firstOn(rp.Replacement, dmn, "RUNNING", r.UpdateAt)
				for _, t := range h.Tasks() {
					if t.Instance == rp.Replacement && t.Group == dmn && len(t.States) > 0 && (rp.DaemonFirst.IsZero() || t.States[0].At.Before(rp.DaemonFirst)) {
						rp.DaemonFirst = t.States[0].At
					}
				}
				rp.Active = firstState(rp.Replacement, "ACTIVE")
				rp.AppRunning = firstOn(rp.Replacement, svc, "RUNNING", r.UpdateAt)
				if !rp.AppRunning.IsZero() && !rp.Inactive.IsZero() && rp.AppRunning.After(rp.Inactive) {
					r.Findings = append(r.Findings, fmt.Sprintf("replacement %s (for %s) ran its first service task only %.2f s after the old instance was INACTIVE (a later batch's task)",
						shortArn(rp.Replacement), shortArn(arn), rp.AppRunning.Sub(rp.Inactive).Seconds()))
					rp.AppRunning = time.Time{}
				}
			}
		}
		for _, p := range phaseDefs {
			from, to := p.from(rp), p.to(rp)
			if !from.IsZero() && !to.IsZero() {
				rp.Phases[p.key] = to.Sub(from).Seconds()
			}
		}
		switch {
		case rp.Replacement != "" && firstOn(rp.Replacement, svc, "RUNNING", r.UpdateAt).IsZero():
			r.Findings = append(r.Findings, fmt.Sprintf("replacement %s (for %s) never ran a service task", shortArn(rp.Replacement), shortArn(arn)))
		case rp.Draining.IsZero():
			r.Findings = append(r.Findings, fmt.Sprintf("old instance %s: no DRAINING recorded", shortArn(arn)))
		case rp.Replacement == "":
			r.Findings = append(r.Findings, fmt.Sprintf("old instance %s: no registered replacement found (managed instance %q)", shortArn(arn), rp.ManagedInstance))
		case !rp.AppRunning.IsZero() && !rp.Active.IsZero() && rp.AppRunning.Before(rp.Active):
			r.Findings = append(r.Findings, fmt.Sprintf("replacement %s: service task RUNNING %.3f s before the instance was ACTIVE", shortArn(rp.Replacement), rp.Active.Sub(rp.AppRunning).Seconds()))
		}
		if !rp.DaemonStopped.IsZero() && !rp.LastAppStopped.IsZero() && rp.DaemonStopped.Before(rp.LastAppStopped) {
			r.Findings = append(r.Findings, fmt.Sprintf("old instance %s: daemon STOPPED %.3f s before its last service task", shortArn(arn), rp.LastAppStopped.Sub(rp.DaemonStopped).Seconds()))
		}
	}
	for _, p := range phaseDefs {
		var xs []float64
		for _, rp := range r.Replaced {
			if v, ok := rp.Phases[p.key]; ok {
				xs = append(xs, v)
			}
		}
		r.Phases[p.key] = stat(xs)
	}

	// Batches: old instances in DRAINING order; one begins a new batch
	// once every old instance of the current one is INACTIVE.
	reps := slices.Clone(r.Replaced)
	reps = slices.DeleteFunc(reps, func(rp *Replaced) bool { return rp.Draining.IsZero() })
	sort.Slice(reps, func(i, j int) bool { return reps[i].Draining.Before(reps[j].Draining) })
	rel := func(t time.Time) float64 { return t.Sub(r.UpdateAt).Seconds() }
	var cur *Batch
	var curEnd time.Time
	prevEnd := r.UpdateAt
	for _, rp := range reps {
		if cur == nil || (!curEnd.IsZero() && rp.Draining.After(curEnd)) {
			if cur != nil {
				prevEnd = curEnd
			}
			r.Batches = append(r.Batches, Batch{Index: len(r.Batches) + 1, Start: rel(rp.Draining), WaitBefore: rp.Draining.Sub(prevEnd).Seconds()})
			cur, curEnd = &r.Batches[len(r.Batches)-1], time.Time{}
		}
		cur.Instances++
		rp.Batch = cur.Index
		if rp.Inactive.IsZero() {
			curEnd = time.Time{}
			continue
		}
		if rp.Inactive.After(curEnd) {
			curEnd = rp.Inactive
		}
		cur.End = rel(curEnd)
		cur.Seconds = cur.End - cur.Start
	}
	if cur != nil && !curEnd.IsZero() && r.TotalSeconds > 0 {
		r.TailSeconds = r.TotalSeconds - rel(curEnd)
	}
	for _, bt := range r.Batches {
		if bt.Instances > r.BatchSize && r.BatchSize > 0 {
			r.Findings = append(r.Findings, fmt.Sprintf("batch %d replaced %d instances, more than the batch size %d", bt.Index, bt.Instances, r.BatchSize))
		}
	}
	if r.BatchSize != r.BatchSizeExpected {
		r.Findings = append(r.Findings, fmt.Sprintf("batch size %d, expected ceil(%d × %g%%) = %d", r.BatchSize, r.Instances, r.DrainPercent, r.BatchSizeExpected))
	}

	// Instances that registered during the rollout but replace nothing.
	isRepl := map[string]bool{}
	for _, rp := range r.Replaced {
		isRepl[rp.Replacement] = true
	}
	for _, in := range h.Instances() {
		if in.CP != cp || isRepl[in.Arn] || slices.Contains(old, in.Arn) || len(in.States) == 0 || in.States[0].At.Before(r.UpdateAt) {
			continue
		}
		apps := 0
		for _, t := range h.Tasks() {
			if t.Instance == in.Arn && t.Group == svc {
				apps++
			}
		}
		desc := fmt.Sprintf("%s registered at %.2f s (not a replacement), ran %d service task(s)", shortArn(in.Arn), rel(in.States[0].At), apps)
		if id := managedOf[in.Arn]; id != "" {
			desc += fmt.Sprintf("; managed instance %s, launched at %.2f s", id, rel(seen[id].launched))
		}
		r.Unrequested = append(r.Unrequested, desc)
		r.Findings = append(r.Findings, "extra instance "+desc)
	}

	// Safety, over UpdateDaemon → end.
	r.Gaps = h.Gaps([]coverage.Daemon{guard}, r.UpdateAt, end, coverage.Options{InferRepair: true})
	r.Gap = coverage.TotalSeconds(r.Gaps)
	r.GapSetup = coverage.TotalSeconds(h.Gaps([]coverage.Daemon{guard}, setup, r.UpdateAt, coverage.Options{InferRepair: true}))
	r.ServiceMinRunning = h.MinRunning(svc, r.UpdateAt, end)
	r.MaxDraining = h.MaxConcurrent(cp, []string{"DRAINING"}, r.UpdateAt, end)
	r.MaxLeaving = h.MaxConcurrent(cp, []string{"DRAINING", "DEREGISTERING"}, r.UpdateAt, end)
	r.PeakInstances = h.MaxConcurrent(cp, []string{"REGISTERING", "ACTIVE", "DRAINING", "DEREGISTERING"}, r.UpdateAt, end)
	if r.ServiceMinRunning < r.ServiceMinimumHealthy {
		r.Findings = append(r.Findings, fmt.Sprintf("the service ran only %d tasks at its lowest (desired %d, minimumHealthyPercent 100)", r.ServiceMinRunning, r.ServiceDesired))
	}
	if r.MaxDraining > r.BatchSize {
		r.Findings = append(r.Findings, fmt.Sprintf("%d instances DRAINING at once, batch size %d", r.MaxDraining, r.BatchSize))
	}
	if r.Gap > 0 {
		r.Findings = append(r.Findings, fmt.Sprintf("coverage gap %.3f s over %d intervals", r.Gap, len(r.Gaps)))
	}
	fmt.Fprintf(b.Out, "read %d events: %d batches, gap %.3f s, service min %d/%d, max DRAINING %d (batch %d), peak %d instances\n",
		r.Events, len(r.Batches), r.Gap, r.ServiceMinRunning, r.ServiceDesired, r.MaxDraining, r.BatchSize, r.PeakInstances)
}

// teardown scales the service to 0 and removes it, drains every instance
// of cp (again for any launched meanwhile), and waits until they are
// INACTIVE and terminated, so the next rollout has the machine to itself.
func (b *bench) teardown(ctx context.Context, cluster, cp string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if _, err := b.C.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(cluster), Service: aws.String(serviceName), DesiredCount: aws.Int32(0)}); err == nil {
		b.Until(ctx, time.Minute, "service scaled to 0", func(ctx context.Context) (bool, error) {
			ts, err := b.Tasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), ServiceName: aws.String(serviceName)})
			return err == nil && len(ts) == 0, err
		})
		b.C.DeleteService(ctx, &ecs.DeleteServiceInput{Cluster: aws.String(cluster), Service: aws.String(serviceName), Force: aws.Bool(true)})
	}
	return b.Until(ctx, 2*time.Minute, "instances retired and terminated", func(ctx context.Context) (bool, error) {
		cis, err := b.Instances(ctx, cluster, cp)
		if err != nil {
			return false, err
		}
		var arns []string
		live := 0
		for _, ci := range cis {
			switch aws.ToString(ci.Status) {
			case "INACTIVE":
			case "ACTIVE":
				arns = append(arns, aws.ToString(ci.ContainerInstanceArn))
				live++
			default:
				live++
			}
		}
		for i := 0; i < len(arns); i += 10 {
			if _, err := b.C.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String(cluster),
				ContainerInstances: arns[i:min(i+10, len(arns))], Status: types.ContainerInstanceStatusDraining}); err != nil {
				return false, err
			}
		}
		ms, err := b.Srv.Service.ManagedInstances(ctx, cluster, cp)
		return err == nil && live == 0 && len(ms) == 0, err
	})
}
