package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/coverage"
)

// ColdSample is one RunTask on an empty capacity provider. Durations are
// seconds from the RunTask call unless named as a stage.
type ColdSample struct {
	Index            int    `json:"index"`
	CapacityProvider string `json:"capacityProvider"`
	Instance         string `json:"containerInstanceArn"`
	// Total is RunTask → the app task's RUNNING as recorded; the stages
	// below add up to it.
	Total       float64 `json:"totalSeconds"`
	Provision   float64 `json:"provisionSeconds"`   // RunTask → instance registeredAt
	DaemonStart float64 `json:"daemonStartSeconds"` // registeredAt → daemon task RUNNING recorded
	AppStart    float64 `json:"appStartSeconds"`    // daemon RUNNING → app task RUNNING recorded
	// Provision split at the managed instance's launch record: deciding
	// to launch, then the agent process starting and registering.
	Launch float64 `json:"launchSeconds"`
	Boot   float64 `json:"bootSeconds"`
	// What the polling client saw (every -poll): the instance ACTIVE and
	// the app task RUNNING.
	SeenActive  float64 `json:"seenActiveSeconds"`
	SeenRunning float64 `json:"seenRunningSeconds"`
	// RegisterEventLagMs is the first instance event's updatedAt minus
	// registeredAt: how much later the record's event is than the write.
	RegisterEventLagMs float64 `json:"registerEventLagMs"`
	// AgentStartedLagMs is the app task's RUNNING event minus the agent's
	// startedAt: report and record.
	AgentStartedLagMs float64 `json:"appRunningRecordedAfterAgentMs"`
}

// Cold is scenario 1.
type Cold struct {
	Cluster string          `json:"cluster"`
	Samples []ColdSample    `json:"samples"`
	Stages  map[string]Dist `json:"stages"`
	// Gap is the coverage gap over the whole scenario, including the
	// drain that retires its instances.
	Gap           float64        `json:"gapSeconds"`
	Gaps          []coverage.Gap `json:"gaps,omitempty"`
	RetireSeconds float64        `json:"retireSeconds"`
	// Orphans are instances left registered after the retirement that no
	// managed instance accounts for.
	Orphans []string `json:"orphanInstances,omitempty"`
}

var coldStages = []struct {
	key, label string
	get        func(ColdSample) float64
}{
	{"total", "total: RunTask → app RUNNING (recorded)", func(s ColdSample) float64 { return s.Total }},
	{"provision", "  provision: → instance registered", func(s ColdSample) float64 { return s.Provision }},
	{"launch", "    launch decided (RunTask → launched)", func(s ColdSample) float64 { return s.Launch }},
	{"boot", "    agent boot (launched → registered)", func(s ColdSample) float64 { return s.Boot }},
	{"daemonStart", "  daemon start: registered → daemon RUNNING", func(s ColdSample) float64 { return s.DaemonStart }},
	{"appStart", "  app start: daemon RUNNING → app RUNNING", func(s ColdSample) float64 { return s.AppStart }},
	{"seenActive", "client saw instance ACTIVE", func(s ColdSample) float64 { return s.SeenActive }},
	{"seenRunning", "client saw app RUNNING", func(s ColdSample) float64 { return s.SeenRunning }},
}

func secs(d time.Duration) float64 { return d.Seconds() }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// coldStarts is scenario 1.
func (b *bench) coldStarts(ctx context.Context) (*Cold, error) {
	cluster, err := b.Cluster(ctx, "bench-cold")
	if err != nil {
		return nil, err
	}
	c := &Cold{Cluster: cluster, Stages: map[string]Dist{}}
	h := coverage.NewHistory()
	b.histories = append(b.histories, h)
	td, err := b.TaskDefinition(ctx, "job", 64)
	if err != nil {
		return c, err
	}
	from := time.Now()
	var daemons []coverage.Daemon
	var apps []string
	for i := 1; i <= b.o.n; i++ {
		s, d, app, err := b.coldSample(ctx, cluster, td, i, h)
		daemons = append(daemons, d)
		if err != nil {
			return c, fmt.Errorf("cold start %d: %w", i, err)
		}
		apps = append(apps, app)
		c.Samples = append(c.Samples, s)
		fmt.Fprintf(b.Out, "cold start %d: %.2f s (provision %.2f, daemon %.2f, app %.2f)\n", i, s.Total, s.Provision, s.DaemonStart, s.AppStart)
	}
	for _, st := range coldStages {
		var xs []float64
		for _, s := range c.Samples {
			xs = append(xs, st.get(s))
		}
		c.Stages[st.key] = dist(xs)
	}
	// Retire the instances (stop the apps, drain) so that they do not
	// load the machine during the coverage scenarios.
	t0 := time.Now()
	for _, app := range apps {
		if _, err := b.C.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(cluster), Task: aws.String(app)}); err != nil {
			return c, err
		}
	}
	var insts []string
	for _, s := range c.Samples {
		insts = append(insts, s.Instance)
	}
	if _, err := b.C.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String(cluster),
		ContainerInstances: insts, Status: types.ContainerInstanceStatusDraining}); err != nil {
		return c, err
	}
	err = b.Until(ctx, 90*time.Second, "cold-start instances retired", func(ctx context.Context) (bool, error) {
		for _, arn := range insts {
			ci, err := b.Instance(ctx, cluster, arn)
			if err != nil || aws.ToString(ci.Status) != "INACTIVE" {
				return false, err
			}
		}
		return true, nil
	})
	c.RetireSeconds = time.Since(t0).Seconds()
	if err != nil {
		return c, err
	}
	if err := benchkit.Sleep(ctx, b.o.settle); err != nil {
		return c, err
	}
	for _, s := range c.Samples {
		o, err := b.orphans(ctx, cluster, s.CapacityProvider)
		if err != nil {
			return c, err
		}
		c.Orphans = append(c.Orphans, o...)
	}
	if err := h.Fetch(ctx, b.Ev, cluster); err != nil {
		return c, err
	}
	c.Gaps = h.Gaps(daemons, from, time.Now(), coverage.Options{InferRepair: true})
	c.Gap = coverage.TotalSeconds(c.Gaps)
	return c, nil
}

func (b *bench) coldSample(ctx context.Context, cluster, td string, i int, h *coverage.History) (ColdSample, coverage.Daemon, string, error) {
	s := ColdSample{Index: i, CapacityProvider: fmt.Sprintf("cold-%d", i)}
	cpArn, err := b.CapacityProvider(ctx, cluster, s.CapacityProvider, 600)
	if err != nil {
		return s, coverage.Daemon{}, "", err
	}
	d, err := b.daemon(ctx, cluster, s.CapacityProvider+"-agentd", s.CapacityProvider, cpArn, true, 0)
	if err != nil {
		return s, d, "", err
	}
	if err := b.WaitDeployment(ctx, d.Arn, 30*time.Second); err != nil {
		return s, d, "", err
	}
	t0 := time.Now()
	out, err := b.C.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(cluster), TaskDefinition: aws.String(td),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(s.CapacityProvider)}}})
	if err != nil {
		return s, d, "", fmt.Errorf("run task: %w", err)
	}
	if len(out.Tasks) != 1 {
		return s, d, "", fmt.Errorf("run task: %+v", out.Failures)
	}
	app := aws.ToString(out.Tasks[0].TaskArn)
	var seenActive, seenRunning time.Time
	err = b.Until(ctx, 2*time.Minute, "app task RUNNING", func(ctx context.Context) (bool, error) {
		if seenActive.IsZero() {
			cis, err := b.Instances(ctx, cluster, s.CapacityProvider)
			if err != nil {
				return false, err
			}
			for _, ci := range cis {
				if aws.ToString(ci.Status) == "ACTIVE" {
					seenActive = time.Now()
				}
			}
		}
		t, err := b.Task(ctx, cluster, app)
		if err != nil {
			return false, err
		}
		switch aws.ToString(t.LastStatus) {
		case "RUNNING":
			seenRunning = time.Now()
			s.Instance = aws.ToString(t.ContainerInstanceArn)
			if seenActive.IsZero() {
				seenActive = seenRunning
			}
			return true, nil
		case "STOPPED":
			return false, fmt.Errorf("app task stopped: %s", aws.ToString(t.StoppedReason))
		}
		return false, nil
	})
	if err != nil {
		return s, d, app, err
	}
	ci, err := b.Instance(ctx, cluster, s.Instance)
	if err != nil {
		return s, d, app, err
	}
	registered := aws.ToTime(ci.RegisteredAt)
	var launched time.Time
	mis, err := b.Srv.Service.ManagedInstances(ctx, cluster, s.CapacityProvider)
	if err != nil {
		return s, d, app, err
	}
	for _, m := range mis {
		launched = m.Value.LaunchedAt
	}
	// The events of this start, read back from the record. They are
	// written after the changes they report, so the last may still be on
	// its way.
	var daemonRunning, appRunning coverage.State
	var inst *coverage.Instance
	err = b.Until(ctx, 10*time.Second, "events of the cold start recorded", func(ctx context.Context) (bool, error) {
		if err := h.Fetch(ctx, b.Ev, cluster); err != nil {
			return false, err
		}
		var ok1, ok2 bool
		if t := h.Task(app); t != nil {
			appRunning, ok1 = t.First("RUNNING")
		}
		for _, t := range h.Tasks() {
			if t.Instance == s.Instance && t.Group == "daemon:"+d.Name {
				daemonRunning, ok2 = t.First("RUNNING")
			}
		}
		inst = h.Instance(s.Instance)
		return ok1 && ok2 && inst != nil, nil
	})
	if err != nil {
		return s, d, app, err
	}
	s.Total = secs(appRunning.At.Sub(t0))
	s.Provision = secs(registered.Sub(t0))
	s.Launch = secs(launched.Sub(t0))
	s.Boot = secs(registered.Sub(launched))
	s.DaemonStart = secs(daemonRunning.At.Sub(registered))
	s.AppStart = secs(appRunning.At.Sub(daemonRunning.At))
	s.SeenActive = secs(seenActive.Sub(t0))
	s.SeenRunning = secs(seenRunning.Sub(t0))
	s.RegisterEventLagMs = ms(inst.States[0].At.Sub(registered))
	if !appRunning.Agent.IsZero() {
		s.AgentStartedLagMs = ms(appRunning.At.Sub(appRunning.Agent))
	}
	return s, d, app, nil
}

// Scenario is one coverage scenario and its gap, read from the record for
// the scenario's window [From, To).
type Scenario struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	Seconds     float64   `json:"seconds"`
	Events      int       `json:"eventsRecorded"`
	Instances   int       `json:"instancesInService"`
	// Gap is the coverage gap on the record's own times, with auto-repair
	// placed where the record implies it. GapAgentClock dates task changes
	// by the agent's timestamps instead; GapNaive leaves auto-repair out
	// (the record has no instance event for it).
	Gap           float64            `json:"gapSeconds"`
	GapAgentClock float64            `json:"gapAgentClockSeconds"`
	GapNaive      float64            `json:"gapNaiveSeconds"`
	Gaps          []coverage.Gap     `json:"gaps,omitempty"`
	Measures      map[string]float64 `json:"measures,omitempty"`
	Findings      []string           `json:"findings,omitempty"`
	// Orphans are the capacity provider's instances that no managed
	// instance accounts for, first seen at the scenario's end.
	Orphans []string `json:"orphanInstances,omitempty"`
}

// Coverage is scenario 2.
type Coverage struct {
	Cluster          string     `json:"cluster"`
	CapacityProvider string     `json:"capacityProvider"`
	Scenarios        []Scenario `json:"scenarios"`
	Total            float64    `json:"totalGapSeconds"`
	TotalAgentClock  float64    `json:"totalGapAgentClockSeconds"`
	TotalNaive       float64    `json:"totalGapNaiveSeconds"`
	Goal             float64    `json:"goalSeconds"`
	Met              bool       `json:"met"`
	// StartImpaired are the DAEMON_TASK_START_IMPAIRED events recorded.
	StartImpaired int `json:"daemonStartImpairedEvents"`
}

// coverage is scenario 2: one capacity provider whose instances hold one
// service task each (600 MiB of 1024), so that moves need new instances.
func (b *bench) coverage(ctx context.Context) (*Coverage, error) {
	cluster, err := b.Cluster(ctx, "bench-cov")
	if err != nil {
		return nil, err
	}
	const cp = "cov"
	cv := &Coverage{Cluster: cluster, CapacityProvider: cp}
	cpArn, err := b.CapacityProvider(ctx, cluster, cp, 600)
	if err != nil {
		return cv, err
	}
	h := coverage.NewHistory()
	b.histories = append(b.histories, h)
	var daemons []coverage.Daemon
	from := time.Now()
	before := 0 // events read when the scenario began
	orphans := map[string]bool{}
	// finish reads the record up to now and adds the scenario's gap.
	finish := func(sc Scenario) error {
		if err := benchkit.Sleep(ctx, b.o.settle); err != nil {
			return err
		}
		o, err := b.orphans(ctx, cluster, cp)
		if err != nil {
			return err
		}
		for _, desc := range o {
			arn, _, _ := strings.Cut(desc, " ")
			if !orphans[arn] {
				orphans[arn] = true
				sc.Orphans = append(sc.Orphans, desc)
			}
		}
		if err := h.Fetch(ctx, b.Ev, cluster); err != nil {
			return err
		}
		sc.From, sc.To = from, time.Now()
		from = sc.To
		sc.Seconds = sc.To.Sub(sc.From).Seconds()
		sc.Events = len(h.Events()) - before
		before = len(h.Events())
		sc.Instances = inService(h, cp, sc.From, sc.To)
		sc.Gaps = h.Gaps(daemons, sc.From, sc.To, coverage.Options{InferRepair: true})
		sc.Gap = coverage.TotalSeconds(sc.Gaps)
		sc.GapAgentClock = coverage.TotalSeconds(h.Gaps(daemons, sc.From, sc.To, coverage.Options{InferRepair: true, AgentClock: true}))
		sc.GapNaive = coverage.TotalSeconds(h.Gaps(daemons, sc.From, sc.To, coverage.Options{}))
		cv.Scenarios = append(cv.Scenarios, sc)
		cv.Total += sc.Gap
		cv.TotalAgentClock += sc.GapAgentClock
		cv.TotalNaive += sc.GapNaive
		cv.StartImpaired = len(h.StartImpaired())
		cv.Met = cv.Total == cv.Goal
		fmt.Fprintf(b.Out, "%s: %.1f s, gap %.3f s (agent clock %.3f, naive %.3f)\n", sc.Name, sc.Seconds, sc.Gap, sc.GapAgentClock, sc.GapNaive)
		return nil
	}
	serviceSettled := func(ctx context.Context, not ...string) (bool, error) {
		ts, err := b.Tasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), ServiceName: aws.String("web")})
		if err != nil {
			return false, err
		}
		run := benchkit.Running(ts)
		if len(ts) != 3 || len(run) != 3 {
			return false, nil
		}
		on := map[string]bool{}
		for _, t := range run {
			inst := aws.ToString(t.ContainerInstanceArn)
			if slices.Contains(not, inst) {
				return false, nil
			}
			on[inst] = true
		}
		return len(on) == 3, nil
	}
	webInstances := func(ctx context.Context) ([]string, error) {
		ts, err := b.Tasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), ServiceName: aws.String("web")})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, t := range benchkit.Running(ts) {
			out = append(out, aws.ToString(t.ContainerInstanceArn))
		}
		slices.Sort(out)
		return out, nil
	}
	gone := func(arn string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			ci, err := b.Instance(ctx, cluster, arn)
			return err == nil && aws.ToString(ci.Status) == "INACTIVE", err
		}
	}

	// (a) a critical daemon, then a service of 3 tasks.
	sc := Scenario{Name: "a: daemon, then service of 3", Description: "CreateDaemon (critical) on an empty capacity provider, then CreateService with 3 tasks of 600 MiB on 1024 MiB instances: three instances are provisioned", Measures: map[string]float64{}}
	guard, err := b.daemon(ctx, cluster, "guard", cp, cpArn, true, int32(b.o.sidecarStop/time.Second))
	if err != nil {
		return cv, err
	}
	daemons = append(daemons, guard)
	td, err := b.TaskDefinition(ctx, "web", 600)
	if err != nil {
		return cv, err
	}
	t0 := time.Now()
	if _, err := b.C.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(cluster), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(3),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cp)}}}); err != nil {
		return cv, fmt.Errorf("create service: %w", err)
	}
	if err := b.Until(ctx, 3*time.Minute, "service of 3 running on 3 instances", func(ctx context.Context) (bool, error) { return serviceSettled(ctx) }); err != nil {
		return cv, err
	}
	sc.Measures["serviceRunningSeconds"] = time.Since(t0).Seconds()
	if err := finish(sc); err != nil {
		return cv, err
	}

	// (b) kill the critical daemon's container on one instance.
	sc = Scenario{Name: "b: critical daemon killed", Description: "the guard daemon's container on one instance is stopped with docker stop -t 0; auto-repair drains the instance, a replacement starts the daemon first, the service task moves, the old instance is terminated", Measures: map[string]float64{}}
	insts, err := webInstances(ctx)
	if err != nil || len(insts) == 0 {
		return cv, fmt.Errorf("service instances: %v %v", insts, err)
	}
	victim := insts[0]
	gts, err := b.Tasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), DaemonName: aws.String("guard")})
	if err != nil {
		return cv, err
	}
	var guardTask string
	for _, t := range benchkit.Running(gts) {
		if aws.ToString(t.ContainerInstanceArn) == victim {
			guardTask = aws.ToString(t.TaskArn)
		}
	}
	cs, err := b.RT.List(ctx, map[string]string{benchkit.LabelTaskArn: guardTask, benchkit.LabelName: "guard"})
	if guardTask == "" || err != nil || len(cs) != 1 {
		return cv, fmt.Errorf("guard container on %s: task %q, %d containers, %v", victim, guardTask, len(cs), err)
	}
	killed := time.Now()
	if err := b.RT.Stop(ctx, cs[0].ID, 0); err != nil {
		return cv, err
	}
	if c, err := b.RT.Inspect(ctx, cs[0].ID); err == nil && !c.FinishedAt.IsZero() {
		killed = c.FinishedAt
	}
	var seenDraining time.Time
	err = b.Until(ctx, 3*time.Minute, "auto-repair: service moved, instance retired", func(ctx context.Context) (bool, error) {
		if seenDraining.IsZero() {
			if ci, err := b.Instance(ctx, cluster, victim); err == nil && aws.ToString(ci.Status) != "ACTIVE" {
				seenDraining = time.Now()
			}
		}
		if ok, err := serviceSettled(ctx, victim); !ok || err != nil {
			return false, err
		}
		return gone(victim)(ctx)
	})
	if err != nil {
		return cv, err
	}
	sc.Measures["repairSeconds"] = time.Since(killed).Seconds()
	sc.Measures["clientSawDrainingAfterKillMs"] = float64(seenDraining.Sub(killed).Milliseconds())
	if err := h.Fetch(ctx, b.Ev, cluster); err != nil {
		return cv, err
	}
	if t := h.Task(guardTask); t != nil {
		left, stopped := coverage.State{}, coverage.State{}
		for _, st := range t.States {
			if left.At.IsZero() && st.Status != "RUNNING" && st.At.After(killed) {
				left = st
			}
			if stopped.At.IsZero() && st.Status == "STOPPED" {
				stopped = st
			}
		}
		if !left.At.IsZero() && !stopped.At.IsZero() {
			sc.Measures["daemonLeftRunningRecordedAfterExitMs"] = ms(left.At.Sub(killed))
			sc.Measures["daemonStoppedRecordedAfterExitMs"] = ms(stopped.At.Sub(killed))
			sc.Findings = append(sc.Findings, fmt.Sprintf("daemon container exited %s; record: %s after %.0f ms, STOPPED (and the drain, in the same write) after %.0f ms",
				killed.Format("15:04:05.000"), left.Status, ms(left.At.Sub(killed)), ms(stopped.At.Sub(killed))))
		}
	}
	if err := finish(sc); err != nil {
		return cv, err
	}

	// (c) drain an instance.
	sc = Scenario{Name: "c: instance drained", Description: "UpdateContainerInstancesState DRAINING on one instance: the service task moves to a new instance, the daemon stops last, the instance is deregistered and terminated", Measures: map[string]float64{}}
	insts, err = webInstances(ctx)
	if err != nil || len(insts) == 0 {
		return cv, fmt.Errorf("service instances: %v %v", insts, err)
	}
	drained := insts[0]
	t0 = time.Now()
	if _, err := b.C.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String(cluster),
		ContainerInstances: []string{drained}, Status: types.ContainerInstanceStatusDraining}); err != nil {
		return cv, err
	}
	err = b.Until(ctx, 3*time.Minute, "drain: service moved, instance retired", func(ctx context.Context) (bool, error) {
		if ok, err := serviceSettled(ctx, drained); !ok || err != nil {
			return false, err
		}
		return gone(drained)(ctx)
	})
	if err != nil {
		return cv, err
	}
	sc.Measures["drainSeconds"] = time.Since(t0).Seconds()
	if err := finish(sc); err != nil {
		return cv, err
	}

	// (d) a second critical daemon, and an agent restart meanwhile.
	sc = Scenario{Name: "d: 2nd daemon + agent restart", Description: "CreateDaemon logs (critical) on the capacity provider with 3 busy instances, and at once one instance's agent restarted in place", Measures: map[string]float64{}}
	insts, err = webInstances(ctx)
	if err != nil || len(insts) == 0 {
		return cv, fmt.Errorf("service instances: %v %v", insts, err)
	}
	restarted := insts[len(insts)-1]
	t0 = time.Now()
	logs, err := b.daemon(ctx, cluster, "logs", cp, cpArn, true, 0)
	if err != nil {
		return cv, err
	}
	daemons = append(daemons, logs)
	down, err := b.restartAgent(ctx, cluster, cp, restarted)
	if err != nil {
		return cv, fmt.Errorf("restart agent: %w", err)
	}
	sc.Measures["oldAgentExitMs"] = float64(down.Milliseconds())
	err = b.Until(ctx, 2*time.Minute, "both daemons on every instance, service settled", func(ctx context.Context) (bool, error) {
		cis, err := b.Instances(ctx, cluster, cp)
		if err != nil {
			return false, err
		}
		per := map[string]int{}
		for _, name := range []string{"guard", "logs"} {
			ts, err := b.Tasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), DaemonName: aws.String(name)})
			if err != nil {
				return false, err
			}
			for _, t := range benchkit.Running(ts) {
				per[aws.ToString(t.ContainerInstanceArn)]++
			}
		}
		active := 0
		for _, ci := range cis {
			if aws.ToString(ci.Status) != "ACTIVE" {
				continue // an orphan is REGISTERING for good
			}
			active++
			if per[aws.ToString(ci.ContainerInstanceArn)] != 2 || !ci.AgentConnected {
				return false, nil
			}
		}
		return active == 3, nil
	})
	if err != nil {
		return cv, err
	}
	sc.Measures["bothDaemonsEverywhereSeconds"] = time.Since(t0).Seconds()
	if ok, err := serviceSettled(ctx); err != nil || !ok {
		sc.Findings = append(sc.Findings, fmt.Sprintf("service not settled after the restart (%v)", err))
	}
	if after, err := webInstances(ctx); err == nil && !slices.Equal(after, insts) {
		sc.Findings = append(sc.Findings, fmt.Sprintf("service tasks moved: %d instances before, %v after", len(insts), len(after)))
	}
	if ci, err := b.Instance(ctx, cluster, restarted); err == nil && aws.ToString(ci.Status) != "ACTIVE" {
		sc.Findings = append(sc.Findings, fmt.Sprintf("the instance whose agent restarted is %s: the restart was taken for a lost instance", aws.ToString(ci.Status)))
	}
	// The daemon runs everywhere: its deployment should finish.
	if err := b.WaitDeployment(ctx, logs.Arn, 15*time.Second); err != nil {
		status := "unknown"
		if d, err := b.C.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(logs.Arn)}); err == nil {
			if dep, err := b.C.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{aws.ToString(d.Daemon.DeploymentArn)}}); err == nil && len(dep.DaemonDeployments) == 1 {
				status = string(dep.DaemonDeployments[0].Status)
			}
		}
		sc.Findings = append(sc.Findings, fmt.Sprintf("the logs deployment is still %s 15 s after the daemon ran on every ACTIVE instance", status))
		sc.Measures["logsDeploymentFinished"] = 0
	} else {
		sc.Measures["logsDeploymentFinished"] = 1
	}
	if err := finish(sc); err != nil {
		return cv, err
	}
	for _, d := range h.StartImpaired() {
		cv.Scenarios[len(cv.Scenarios)-1].Findings = append(cv.Scenarios[len(cv.Scenarios)-1].Findings,
			fmt.Sprintf("DAEMON_TASK_START_IMPAIRED %s on %s: %s", d.FailureType, shortArn(d.ContainerInstanceArn), d.Reason))
	}
	return cv, nil
}

// inService counts the instances of cp the record shows in service
// (REGISTERING or ACTIVE) at some time in [from, to).
func inService(h *coverage.History, cp string, from, to time.Time) int {
	n := 0
	for _, in := range h.Instances() {
		if in.CP != cp {
			continue
		}
		live := false
		for i, s := range in.States {
			end := to
			if i+1 < len(in.States) {
				end = in.States[i+1].At
			}
			if (s.Status == "REGISTERING" || s.Status == "ACTIVE") && s.At.Before(to) && end.After(from) {
				live = true
			}
		}
		if live {
			n++
		}
	}
	return n
}
