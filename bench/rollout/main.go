// Command rollout measures daemon rollouts by instance replacement on
// managed instances from the local provisioner.
//
//	go run ./bench/rollout [-instances 4,8] [-drain 25,50] [-json out.json]
//
// It builds cmd/capstan statically and starts a server in-process
// (embedded etcd in a temporary directory) whose local provisioner runs
// that build as `capstan agent` processes on the local Docker Engine. For
// every pair of instance count N and drainPercent P it runs one rollout,
// each in a cluster of its own:
//
//  1. set-up: a managed-instances capacity provider (1 vCPU, 1024 MiB
//     instances, scale-in after an hour), a critical daemon "guard"
//     (busybox, revision 1), and a service "web" of N tasks of 600 MiB with
//     a distinctInstance constraint, so that the capacity provider launches
//     N instances and each carries one service task; it waits until the
//     service runs on N ACTIVE instances and the daemon's first deployment
//     is SUCCESSFUL;
//  2. rollout: UpdateDaemon to revision 2 of the daemon's task definition
//     with deploymentConfiguration.drainPercent P, polled until the
//     deployment finishes, then until the service runs N tasks again;
//  3. reading: the cluster's recorded events (CapstanV1.ListEvents) give,
//     per replaced instance, the phases drain, provision, daemon start, app
//     move and terminate (phaseDefs defines each), the batches, the
//     coverage gap of the critical daemon, the service's lowest RUNNING
//     count and the most instances DRAINING at once;
//  4. tear-down: the service is scaled to 0 and every instance drained, so
//     the next rollout runs on a quiet machine.
//
// At the end the server stops, every instance left is terminated through
// the local provisioner (agent process, containers, daemon network), and
// every container and daemon network of the run's clusters is removed,
// also when a rollout failed or the run was interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
)

type options struct {
	instances      []int
	drain          []float64
	jsonOut        string
	poll           time.Duration
	settle         time.Duration
	rolloutTimeout time.Duration
	timeout        time.Duration
	dataDir        string
	serverLog      string
	agentLogs      string
	eventsOut      string
	binary         string
	keepGoing      bool
}

func main() { benchkit.Main("rollout", parseFlags, run) }

func parseFlags(args []string) (options, error) {
	var o options
	var insts, drains string
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	fs.StringVar(&insts, "instances", "4,8", "comma-separated instance counts; one rollout per count and drain percent")
	fs.StringVar(&drains, "drain", "25,50", "comma-separated deploymentConfiguration.drainPercent values")
	fs.StringVar(&o.jsonOut, "json", "", "write the report as JSON to this file")
	fs.DurationVar(&o.poll, "poll", 100*time.Millisecond, "pause between polls while waiting")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "wait after a rollout before reading its events")
	fs.DurationVar(&o.rolloutTimeout, "rollout-timeout", 5*time.Minute, "give up on one rollout (UpdateDaemon → SUCCESSFUL) after this long")
	fs.DurationVar(&o.timeout, "timeout", 40*time.Minute, "give up on the whole run after this long")
	fs.StringVar(&o.dataDir, "data-dir", "", "parent of the run's temporary directory (default: the system temp dir)")
	fs.StringVar(&o.serverLog, "server-log", "", "write the in-process server's debug log to this file")
	fs.StringVar(&o.agentLogs, "agent-logs", "", "copy every instance's agent log into this directory (they are deleted with their instances)")
	fs.StringVar(&o.eventsOut, "events", "", "write every event read (the recorded history the phases come from) to this file, one JSON object a line")
	fs.StringVar(&o.binary, "binary", "", "statically linked capstan to run as the instances' agent (default: CGO_ENABLED=0 go build ./cmd/capstan)")
	fs.BoolVar(&o.keepGoing, "keep-going", true, "run the remaining rollouts after one fails")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for f := range strings.SplitSeq(insts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return o, fmt.Errorf("-instances: %q is not a positive count", f)
		}
		o.instances = append(o.instances, n)
	}
	for f := range strings.SplitSeq(drains, ",") {
		p, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || p <= 0 || p > 100 {
			return o, fmt.Errorf("-drain: %q is not a percentage in (0, 100]", f)
		}
		o.drain = append(o.drain, p)
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.poll <= 0:
		return o, errors.New("-poll must be positive")
	case o.settle < 0:
		return o, errors.New("-settle must not be negative")
	case runtime.GOOS != "linux":
		return o, errors.New("local instances need Linux")
	}
	return o, nil
}

// Report is the JSON output.
type Report struct {
	Started time.Time         `json:"started"`
	Seconds float64           `json:"runSeconds"`
	Command string            `json:"command"`
	Machine benchkit.Machine  `json:"machine"`
	Image   string            `json:"image"`
	Binary  string            `json:"agentBinary"`
	Phases  map[string]string `json:"phaseDefinitions"`
	Runs    []*Run            `json:"runs"`
	Cleanup benchkit.Cleanup  `json:"cleanup"`
	Notes   []string          `json:"notes"`
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	rep := &Report{Started: start.UTC(), Command: "go run ./bench/rollout " + strings.Join(os.Args[1:], " "), Phases: map[string]string{}}
	for _, p := range phaseDefs {
		rep.Phases[p.key] = p.def
	}

	b := &bench{o: o}
	var err error
	b.Fleet, err = benchkit.OpenFleet(ctx, benchkit.FleetOptions{WorkPrefix: "capstan-bench-rollout-", DataDir: o.dataDir, Binary: o.binary,
		ServerLog: o.serverLog, AgentLogs: o.agentLogs, Poll: o.poll}, stdout)
	if err != nil {
		return err
	}
	// Whatever happens from here, the instances and their containers go.
	defer b.Close()
	rep.Machine, rep.Image, rep.Binary = b.Machine, b.Image, b.Bin

	var runErr error
	for _, n := range o.instances {
		for _, p := range o.drain {
			r, err := b.rollout(ctx, n, p)
			rep.Runs = append(rep.Runs, r)
			if err != nil {
				r.Error = err.Error()
				fmt.Fprintf(stdout, "%s: error: %v\n", r.Name, err)
				runErr = errors.Join(runErr, fmt.Errorf("%s: %w", r.Name, err))
				if !o.keepGoing || ctx.Err() != nil {
					break
				}
			}
		}
		if runErr != nil && (!o.keepGoing || ctx.Err() != nil) {
			break
		}
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
		"Times are the server's record: each event's detail.updatedAt (stamped when the server writes the event, after the change was committed), an instance's registeredAt, a deployment's finishedAt, and the managed instance's launchedAt as polled.",
		"The phases of one instance overlap with those of the others in its batch, and drain contains provision, daemon start and app move: per-instance sums are not parts of the total. The batch timeline is the critical path.",
	}
	if rep.Machine.LoadAvgStart != "" {
		n = append(n, "Load average at start "+rep.Machine.LoadAvgStart+", at end "+rep.Machine.LoadAvgEnd+fmt.Sprintf(" on %d CPUs; the machine may be shared.", rep.Machine.NumCPU))
	}
	return n
}

func printReport(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "\n%s  (commit %.7s, %d CPU %s, Docker %s %s, load %s → %s)\n", rep.Command, rep.Machine.Revision, rep.Machine.NumCPU, rep.Machine.CPUModel,
		rep.Machine.DockerVersion, rep.Machine.StorageDriver, rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "\nRollouts: UpdateDaemon → deployment SUCCESSFUL")
	fmt.Fprintln(tw, "instances\tdrain %\tbatch\tbatches\tstatus\ttotal s\tgap s\tservice min/desired\tmax DRAINING\tpeak instances\textra instances\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%d\t%g\t%d\t%d\t%s\t%.1f\t%.3f\t%d/%d\t%d\t%d\t%d\t\n", r.Instances, r.DrainPercent, r.BatchSize, len(r.Batches), r.Status,
			r.TotalSeconds, r.Gap, r.ServiceMinRunning, r.ServiceDesired, r.MaxDraining, r.PeakInstances, len(r.Unrequested))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nPhases per replaced instance, seconds: mean (max); sum over the run's instances in brackets")
	fmt.Fprint(tw, "phase\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%d × %g%%\t", r.Instances, r.DrainPercent)
	}
	fmt.Fprintln(tw)
	for _, p := range phaseDefs {
		fmt.Fprintf(tw, "%s\t", p.label)
		for _, r := range rep.Runs {
			s, ok := r.Phases[p.key]
			if !ok || s.N == 0 {
				fmt.Fprint(tw, "–\t")
				continue
			}
			fmt.Fprintf(tw, "%.2f (%.2f) [%.1f]\t", s.Mean, s.Max, s.Sum)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nphase definitions:")
	for _, p := range phaseDefs {
		fmt.Fprintf(w, "  %-22s %s\n", strings.TrimSpace(p.label)+":", p.def)
	}

	for _, r := range rep.Runs {
		fmt.Fprintf(w, "\n%s: batch timeline (UpdateDaemon at 0 s)\n", r.Name)
		fmt.Fprintln(tw, "batch\tinstances\tfirst DRAINING s\tlast INACTIVE s\tbatch s\twait before s\t")
		for _, bt := range r.Batches {
			fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", bt.Index, bt.Instances, bt.Start, bt.End, bt.Seconds, bt.WaitBefore)
		}
		fmt.Fprintf(tw, "end\t\t\t\t\t%.2f\t\n", r.TailSeconds)
		tw.Flush()
		if r.StatusReason != "" {
			fmt.Fprintf(w, "  deployment %s: %s\n", r.Status, r.StatusReason)
		}
		for _, g := range r.Gaps {
			fmt.Fprintf(w, "  GAP %s: %.3f s without %s (%d app tasks), %s → %s\n", shortArn(g.Instance), g.Seconds,
				strings.Join(g.Missing, ","), g.Apps, g.From.Format("15:04:05.000"), g.To.Format("15:04:05.000"))
		}
		for _, st := range r.Stalls {
			fmt.Fprintf(w, "  %s\n", st)
		}
		for _, f := range r.Findings {
			fmt.Fprintf(w, "  %s\n", f)
		}
		for _, k := range slices.Sorted(maps.Keys(r.Measures)) {
			fmt.Fprintf(w, "  end state %s: %s\n", k, r.Measures[k])
		}
		if r.Error != "" {
			fmt.Fprintf(w, "  ERROR: %s\n", r.Error)
		}
	}
	fmt.Fprintf(w, "\nrun took %.0f s\n", rep.Seconds)
}

func shortArn(arn string) string {
	if i := strings.LastIndexByte(arn, '/'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

// Stat summarises one phase over a run's instances, in seconds.
type Stat struct {
	N    int     `json:"n"`
	Sum  float64 `json:"sumSeconds"`
	Mean float64 `json:"meanSeconds"`
	Min  float64 `json:"minSeconds"`
	Max  float64 `json:"maxSeconds"`
}

func stat(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := Stat{N: len(xs), Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range xs {
		s.Sum += x
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	s.Mean = s.Sum / float64(len(xs))
	return s
}
