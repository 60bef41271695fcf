package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/controller/daemons"
	"github.com/capstanhq/capstan/internal/coverage"
)

// Crash is scenario 3: the evidence behind daemons.SteadyFor. A critical
// daemon without a health check that dies soon after it starts must not
// open its instance to tasks; the server holds the instance back until the
// daemon has run SteadyFor (by the agent's startedAt). That is enough only
// if the daemon's STOPPED reaches the server within SteadyFor of its
// startedAt, so this measures that delay for daemons that exit at once and
// a little later, on real Docker through real agents.
type Crash struct {
	Cluster        string        `json:"cluster"`
	SteadyForMs    float64       `json:"steadyForMs"`
	Kinds          []CrashKind   `json:"kinds"`
	Samples        []CrashSample `json:"samples"`
	SeenActive     []string      `json:"instancesSeenActive,omitempty"`
	AppRan         bool          `json:"appTaskRan"`
	WatchedSeconds float64       `json:"watchedSeconds"`
}

// CrashKind is one way of dying and its distribution.
type CrashKind struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	// Stopped is the daemon's STOPPED recorded by the server, minus the
	// agent's startedAt, over the starts recorded RUNNING: what SteadyFor
	// must exceed.
	Stopped MsDist `json:"stoppedAfterStarted"`
	// Ran is the container's life by the agent's clock.
	Ran MsDist `json:"ran"`
	// Flashed counts the starts the server recorded as RUNNING before
	// STOPPED; the others went from PENDING to STOPPED.
	Flashed int `json:"recordedRunning"`
	Starts  int `json:"starts"`
}

// CrashSample is one start of a dying daemon.
type CrashSample struct {
	Kind      string  `json:"kind"`
	Instance  string  `json:"containerInstanceArn"`
	Task      string  `json:"taskArn"`
	Running   bool    `json:"recordedRunning"`
	StoppedMs float64 `json:"stoppedAfterStartedMs"`
	RanMs     float64 `json:"ranMs"`
}

var crashKinds = []struct{ name, script string }{
	{"exits at once", "exit 3"},
	{"exits after 0.2 s", "sleep 0.2; exit 3"},
}

// crashes runs each kind as the critical daemon of its own capacity
// provider, asks for -crash-instances app tasks there (each launches an
// instance that must never become ACTIVE), and watches the restarts for -crash-for.
func (b *bench) crashes(ctx context.Context) (*Crash, error) {
	cluster, err := b.Cluster(ctx, "bench-crash")
	if err != nil {
		return nil, err
	}
	c := &Crash{Cluster: cluster, SteadyForMs: ms(daemons.SteadyFor)}
	h := coverage.NewHistory()
	b.histories = append(b.histories, h)
	// 600 of an instance's 1024 MiB: each app task asks for an instance.
	td, err := b.TaskDefinition(ctx, "crash-job", 600)
	if err != nil {
		return c, err
	}
	groups := map[string]string{} // daemon group → kind
	var cps, apps []string
	for i, k := range crashKinds {
		cp := fmt.Sprintf("crash-%d", i)
		cpArn, err := b.CapacityProvider(ctx, cluster, cp, 600)
		if err != nil {
			return c, err
		}
		name := cp + "-agentd"
		cmd := []string{"sh", "-c", k.script}
		dtd, err := b.C.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(name),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String(name), Image: aws.String(b.Image), Memory: aws.Int32(32), Command: cmd}}})
		if err != nil {
			return c, fmt.Errorf("register daemon task definition %s: %w", name, err)
		}
		if _, err := b.C.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String(name), ClusterArn: aws.String(cluster),
			DaemonTaskDefinitionArn: dtd.DaemonTaskDefinitionArn, CapacityProviderArns: []string{cpArn}, Critical: aws.Bool(true)}); err != nil {
			return c, fmt.Errorf("create daemon %s: %w", name, err)
		}
		groups["daemon:"+name] = k.name
		c.Kinds = append(c.Kinds, CrashKind{Name: k.name, Command: cmd})
		out, err := b.C.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(cluster), TaskDefinition: aws.String(td), Count: aws.Int32(int32(b.o.crashInstances)),
			CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cp)}}})
		if err != nil {
			return c, fmt.Errorf("run task: %w", err)
		}
		for _, t := range out.Tasks {
			apps = append(apps, aws.ToString(t.TaskArn))
		}
		cps = append(cps, cp)
	}
	// Restarts back off 5 s, 10 s, 20 s...: -crash-for gives each
	// instance a few starts. An instance seen ACTIVE, or the app task
	// running, is the failure SteadyFor is there to prevent.
	t0 := time.Now()
	active := map[string]bool{}
	for time.Since(t0) < b.o.crashFor {
		for _, cp := range cps {
			cis, err := b.Instances(ctx, cluster, cp)
			if err != nil {
				return c, err
			}
			for _, ci := range cis {
				if aws.ToString(ci.Status) == "ACTIVE" && !active[aws.ToString(ci.ContainerInstanceArn)] {
					active[aws.ToString(ci.ContainerInstanceArn)] = true
					c.SeenActive = append(c.SeenActive, aws.ToString(ci.ContainerInstanceArn))
				}
			}
		}
		for _, app := range apps {
			t, err := b.Task(ctx, cluster, app)
			if err != nil {
				return c, err
			}
			if aws.ToString(t.LastStatus) == "RUNNING" {
				c.AppRan = true
			}
		}
		if err := benchkit.Sleep(ctx, b.o.poll); err != nil {
			return c, err
		}
	}
	c.WatchedSeconds = time.Since(t0).Seconds()
	for _, app := range apps {
		if _, err := b.C.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(cluster), Task: aws.String(app)}); err != nil {
			return c, err
		}
	}
	if err := h.Fetch(ctx, b.Ev, cluster); err != nil {
		return c, err
	}
	for _, t := range h.Tasks() {
		kind, ok := groups[t.Group]
		if !ok {
			continue
		}
		stopped, ok := t.First("STOPPED")
		if !ok {
			continue // still starting when the watch ended
		}
		s := CrashSample{Kind: kind, Instance: t.Instance, Task: t.Arn}
		// Only a start recorded RUNNING can count as ready; one that went
		// straight to STOPPED is counted, not timed (its record has no
		// startedAt).
		if running, ok := t.First("RUNNING"); ok && !running.Agent.IsZero() {
			s.Running = true
			s.StoppedMs = ms(stopped.At.Sub(running.Agent))
			if !stopped.Agent.IsZero() {
				s.RanMs = ms(stopped.Agent.Sub(running.Agent))
			}
		}
		c.Samples = append(c.Samples, s)
	}
	for i := range c.Kinds {
		k := &c.Kinds[i]
		var stops, runs []float64
		for _, s := range c.Samples {
			if s.Kind != k.Name {
				continue
			}
			k.Starts++
			if s.Running {
				k.Flashed++
				stops, runs = append(stops, s.StoppedMs), append(runs, s.RanMs)
			}
		}
		k.Stopped, k.Ran = distMs(stops), distMs(runs)
	}
	return c, nil
}

// MsDist summarises samples in milliseconds.
type MsDist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50Ms"`
	P90 float64 `json:"p90Ms"`
	Max float64 `json:"maxMs"`
}

// distMs is dist over milliseconds, p90 included (a measured value too).
func distMs(xs []float64) MsDist {
	d := dist(xs)
	m := MsDist{N: d.N, P50: d.P50, Max: d.Max}
	if len(xs) > 0 {
		s := slices.Clone(xs)
		slices.Sort(s)
		m.P90 = s[(len(s)*9-1)/10]
	}
	return m
}

func printCrash(w io.Writer, c *Crash) {
	fmt.Fprintf(w, "\nCritical daemon that dies: its STOPPED recorded after the agent's startedAt, against SteadyFor %.0f ms (%.0f s watched)\n", c.SteadyForMs, c.WatchedSeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "daemon\tstarts\trecorded RUNNING\tstopped p50 ms\tp90 ms\tmax ms\tran p50 ms\tmax ms\t")
	for _, k := range c.Kinds {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", k.Name, k.Starts, k.Flashed, k.Stopped.P50, k.Stopped.P90, k.Stopped.Max, k.Ran.P50, k.Ran.Max)
	}
	tw.Flush()
	verdict := "never ACTIVE, app task never ran"
	if len(c.SeenActive) > 0 || c.AppRan {
		verdict = fmt.Sprintf("OPENED: %d instances seen ACTIVE, app task ran: %v", len(c.SeenActive), c.AppRan)
	}
	fmt.Fprintln(w, "instances:", verdict)
}
