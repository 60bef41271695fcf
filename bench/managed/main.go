// Command managed measures managed daemons on managed instances with the
// local provisioner: how long a task on an empty capacity provider takes to
// run, stage by stage, and whether application tasks ever run on an
// instance in service without its critical daemons.
//
//	go run ./bench/managed [-n 3] [-json out.json]
//
// It builds cmd/capstan statically, starts a server in-process (embedded
// etcd in a temporary directory) whose local provisioner runs that build as
// `capstan agent` processes on the local Docker Engine, and runs:
//
//  1. cold start, -n times on fresh capacity providers that each have one
//     critical daemon: RunTask → the app task RUNNING, split into provision
//     (RunTask → instance registered), daemon start (registered → daemon
//     task RUNNING, which activates the instance) and app start (→ app task
//     RUNNING), all read from the record (registeredAt and events);
//  2. coverage: on one capacity provider, (a) a critical daemon then a
//     service of 3 tasks, (b) a critical daemon's container killed
//     (auto-repair replaces the instance), (c) an instance drained, (d) a
//     second critical daemon added while an agent restarts. After each,
//     the cluster's recorded events (CapstanV1.ListEvents, with a cursor)
//     are read into per-instance timelines, and the seconds in which an
//     instance in service ran an application task while a critical daemon
//     targeting it was not RUNNING there are added up. The goal is 0;
//  3. crash: a critical daemon without a health check that exits at once,
//     and one that exits after 0.2 s, each on a capacity provider of its
//     own with -crash-instances app tasks waiting: for -crash-for, how
//     long after the agent's startedAt the server records each start's
//     STOPPED (the evidence for daemons.SteadyFor, the wait before such a
//     daemon counts as ready), and whether an instance became ACTIVE.
//
// -scenarios picks some of cold, coverage and crash.
//
// Each scenario also reports the gap read two other ways: on the agent's
// clock (startedAt, stoppedAt in the task events) and naively (without
// placing the unrecorded auto-repair drain). -events keeps the record,
// -agent-logs the instances' logs, -server-log the server's;
// -sidecar-stop gives the coverage daemon a container that is slow to stop.
//
// At the end the server stops, every instance left is terminated through
// the local provisioner, and every container and daemon network of the
// run's clusters is removed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
)

type options struct {
	n         int
	jsonOut   string
	poll      time.Duration
	settle    time.Duration
	timeout   time.Duration
	dataDir   string
	serverLog string
	agentLogs string
	eventsOut string
	// sidecarStop gives the coverage scenario's critical daemon a
	// non-essential container that ignores SIGTERM for this long.
	sidecarStop    time.Duration
	binary         string
	crashFor       time.Duration
	crashInstances int
	scenarios      map[string]bool
}

func main() { benchkit.Main("managed", parseFlags, run) }

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("managed", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 3, "cold starts, each on a fresh capacity provider")
	fs.StringVar(&o.jsonOut, "json", "", "write the report as JSON to this file")
	fs.DurationVar(&o.poll, "poll", 50*time.Millisecond, "pause between API polls while waiting")
	fs.DurationVar(&o.settle, "settle", 3*time.Second, "wait after each coverage scenario before reading its events")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on the whole run after this long")
	fs.StringVar(&o.dataDir, "data-dir", "", "parent of the run's temporary directory (default: the system temp dir)")
	fs.StringVar(&o.serverLog, "server-log", "", "write the in-process server's debug log to this file")
	fs.StringVar(&o.agentLogs, "agent-logs", "", "copy every instance's agent log into this directory (they are deleted with their instances)")
	fs.StringVar(&o.eventsOut, "events", "", "write every event read (the recorded history the gaps come from) to this file, one JSON object a line")
	fs.DurationVar(&o.sidecarStop, "sidecar-stop", 0, "give the coverage daemon guard a non-essential container that ignores SIGTERM and is killed after this stop timeout (whole seconds; 0: none)")
	fs.StringVar(&o.binary, "binary", "", "statically linked capstan to run as the instances' agent (default: CGO_ENABLED=0 go build ./cmd/capstan)")
	fs.DurationVar(&o.crashFor, "crash-for", 40*time.Second, "how long the crash scenario watches its dying daemons restart (they back off 5 s, 10 s, 20 s...)")
	fs.IntVar(&o.crashInstances, "crash-instances", 2, "instances of each dying daemon in the crash scenario")
	scen := fs.String("scenarios", "cold,coverage,crash", "the scenarios to run, comma-separated")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.scenarios = map[string]bool{}
	for _, s := range strings.Split(*scen, ",") {
		switch s = strings.TrimSpace(s); s {
		case "cold", "coverage", "crash":
			o.scenarios[s] = true
		default:
			return o, fmt.Errorf("-scenarios: %q is not cold, coverage or crash", s)
		}
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.n < 1:
		return o, errors.New("-n must be at least 1")
	case o.poll <= 0:
		return o, errors.New("-poll must be positive")
	case o.settle < 0:
		return o, errors.New("-settle must not be negative")
	case o.crashFor <= 0 || o.crashInstances < 1:
		return o, errors.New("-crash-for must be positive and -crash-instances at least 1")
	case runtime.GOOS != "linux":
		return o, errors.New("local instances need Linux")
	}
	return o, nil
}

// Report is the JSON output.
type Report struct {
	Started  time.Time        `json:"started"`
	Seconds  float64          `json:"runSeconds"`
	Machine  benchkit.Machine `json:"machine"`
	Options  Options          `json:"options"`
	Image    string           `json:"image"`
	Binary   string           `json:"agentBinary"`
	Cold     *Cold            `json:"coldStart,omitempty"`
	Coverage *Coverage        `json:"coverage,omitempty"`
	Crash    *Crash           `json:"crash,omitempty"`
	Cleanup  benchkit.Cleanup `json:"cleanup"`
	Notes    []string         `json:"notes"`
}

// Options are the flags that shape the measurement.
type Options struct {
	N                  int     `json:"n"`
	PollMs             float64 `json:"pollMs"`
	SettleSeconds      float64 `json:"settleSeconds"`
	SidecarStopSeconds float64 `json:"sidecarStopSeconds"`
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	rep := &Report{Started: start.UTC(), Options: Options{N: o.n, PollMs: float64(o.poll.Milliseconds()),
		SettleSeconds: o.settle.Seconds(), SidecarStopSeconds: o.sidecarStop.Seconds()}}

	b := &bench{o: o}
	var err error
	b.Fleet, err = benchkit.OpenFleet(ctx, benchkit.FleetOptions{WorkPrefix: "capstan-bench-managed-", DataDir: o.dataDir, Binary: o.binary,
		ServerLog: o.serverLog, AgentLogs: o.agentLogs, Poll: o.poll}, stdout)
	if err != nil {
		return err
	}
	// Whatever happens from here, the instances and their containers go.
	defer b.Close()
	rep.Machine, rep.Image, rep.Binary = b.Machine, b.Image, b.Bin

	var runErr error
	if o.scenarios["cold"] {
		rep.Cold, runErr = b.coldStarts(ctx)
	}
	if runErr == nil && o.scenarios["coverage"] {
		rep.Coverage, runErr = b.coverage(ctx)
	}
	if runErr == nil && o.scenarios["crash"] {
		rep.Crash, runErr = b.crashes(ctx)
	}
	if runErr != nil {
		fmt.Fprintln(stdout, "error:", runErr)
	}
	rep.Cleanup = b.Cleanup()
	if o.eventsOut != "" {
		if err := benchkit.WriteEvents(o.eventsOut, b.histories); err != nil {
			return err
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()
	rep.Notes = notes(rep)
	printReport(stdout, rep)
	if o.jsonOut != "" {
		if err := benchkit.WriteJSON(o.jsonOut, rep); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "wrote", o.jsonOut)
	}
	return runErr
}

func notes(rep *Report) []string {
	n := []string{
		"Times are read from the record: registeredAt, and each event's detail.updatedAt, which the server stamps when it writes the event, after the change was committed.",
		"The server records no event when the daemons controller activates an instance (REGISTERING → ACTIVE) or when auto-repair drains it; an instance counts as in service while REGISTERING or ACTIVE, and an auto-repaired one leaves service at the recorded STOPPED of the daemon its final status reason names.",
	}
	if rep.Machine.LoadAvgStart != "" {
		n = append(n, "Load average at start "+rep.Machine.LoadAvgStart+", at end "+rep.Machine.LoadAvgEnd+fmt.Sprintf(" on %d CPUs.", rep.Machine.NumCPU))
	}
	return n
}

func printReport(w io.Writer, rep *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if c := rep.Cold; c != nil && len(c.Samples) > 0 {
		fmt.Fprintf(w, "\nCold start: RunTask on an empty capacity provider with one critical daemon → app task RUNNING (%d samples)\n", len(c.Samples))
		fmt.Fprint(tw, "stage\tp50 s\tmax s\t")
		for i := range c.Samples {
			fmt.Fprintf(tw, "#%d\t", i+1)
		}
		fmt.Fprintln(tw)
		for _, st := range coldStages {
			d := c.Stages[st.key]
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t", st.label, d.P50, d.Max)
			for _, s := range c.Samples {
				fmt.Fprintf(tw, "%.2f\t", st.get(s))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		fmt.Fprintf(w, "retiring the %d instances (StopTask, DRAINING) took %.1f s; coverage gap over the scenario %.3f s\n", len(c.Samples), c.RetireSeconds, c.Gap)
		for _, o := range c.Orphans {
			fmt.Fprintf(w, "  orphan instance left registered: %s\n", o)
		}
	}
	if cv := rep.Coverage; cv != nil {
		fmt.Fprintln(w, "\nCoverage gap: seconds an instance in service ran an app task while a critical daemon targeting it was not RUNNING (goal 0)")
		fmt.Fprintln(tw, "scenario\tseconds\tevents\tinstances\tgap s\tgap s, agent clock\tgap s, naive\t")
		for _, s := range cv.Scenarios {
			fmt.Fprintf(tw, "%s\t%.1f\t%d\t%d\t%.3f\t%.3f\t%.3f\t\n", s.Name, s.Seconds, s.Events, s.Instances, s.Gap, s.GapAgentClock, s.GapNaive)
		}
		fmt.Fprintf(tw, "total (a-d)\t\t\t\t%.3f\t%.3f\t%.3f\t\n", cv.Total, cv.TotalAgentClock, cv.TotalNaive)
		tw.Flush()
		fmt.Fprintf(w, "goal (0 s, recorded): %s\n", map[bool]string{true: "met", false: "NOT met"}[cv.Met])
		for _, s := range cv.Scenarios {
			for _, g := range s.Gaps {
				fmt.Fprintf(w, "  %s: %s  %.3f s without %s (%d app tasks), %s → %s\n", s.Name, shortArn(g.Instance), g.Seconds,
					strings.Join(g.Missing, ","), g.Apps, g.From.Format("15:04:05.000"), g.To.Format("15:04:05.000"))
			}
			for _, f := range s.Findings {
				fmt.Fprintf(w, "  %s: %s\n", s.Name, f)
			}
			for _, o := range s.Orphans {
				fmt.Fprintf(w, "  %s: orphan instance: %s\n", s.Name, o)
			}
		}
	}
	if rep.Crash != nil {
		printCrash(w, rep.Crash)
	}
	fmt.Fprintf(w, "\nrun took %.0f s\n", rep.Seconds)
}

func shortArn(arn string) string {
	if i := strings.LastIndexByte(arn, '/'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

// Dist summarises samples in seconds.
type Dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50Seconds"`
	Max float64 `json:"maxSeconds"`
}

// dist takes the median as the middle sample (the lower of the two
// middle ones for an even count), so it is always a measured value.
func dist(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Dist{N: len(s), P50: s[(len(s)-1)/2], Max: s[len(s)-1]}
}
