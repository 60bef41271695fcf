// Command soak keeps a hollow fleet busy for a long time and checks that
// nothing in the server grows without bound.
//
//	go run ./bench/soak [-instances 1000] [-duration 1h] [-out DIR]
//
// The server runs in this process (embedded etcd in a temporary
// directory) with the sim provisioner: every instance is a hollow one (the
// real agent on a simulated container runtime, a goroutine set of this
// process) that the server provisions for a MANAGED_INSTANCES capacity
// provider. The fleet is a critical daemon and a service of N tasks, each
// filling one instance, so N instances run. Once it has converged, for
// -duration:
//
//   - every -rollout-every, a rollout: alternately the service to its other
//     task definition revision (minimumHealthyPercent 50, maximumPercent
//     100: in place) and the daemon to its other revision (drainPercent 25:
//     instances replaced);
//   - every -kill-every, 1% of the instances killed (agent and containers
//     stop at once); the server finds them lost and replaces them;
//   - every -scale-every, the service scaled up by 5% or back down;
//   - every 10 s, the cluster's new events read (CapstanV1.ListEvents);
//   - all the time, one client calling DescribeServices, ListTasks and
//     DescribeContainerInstances.
//
// Every -sample it records the process's RSS, goroutines and open files,
// etcd's database (the file, and the part in use), the records it holds
// (tasks, events, audit records) and the p99 of the client's calls since
// the last sample. At the end it prints each series over time and a growth
// verdict (see verdict.go), writes samples.csv and report.json to -out, and
// exits with status 1 when a series grew without bound. The hollow agents
// share the process, so RSS and goroutines include theirs: their number is
// constant, so a growing series is still a leak.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
)

type options struct {
	instances    int
	duration     time.Duration
	sample       time.Duration
	rolloutEvery time.Duration
	killEvery    time.Duration
	scaleEvery   time.Duration
	setupTimeout time.Duration
	retention    time.Duration
	eventsKept   time.Duration
	auditKept    time.Duration
	eventLimit   int
	warmup       float64
	out          string
	serverLog    string
	work         string
}

func parse(args []string) (options, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	var o options
	fs.IntVar(&o.instances, "instances", 1000, "hollow instances (the service's task count)")
	fs.DurationVar(&o.duration, "duration", time.Hour, "how long the fleet is kept busy after it converged")
	fs.DurationVar(&o.sample, "sample", 30*time.Second, "time between samples")
	fs.DurationVar(&o.rolloutEvery, "rollout-every", 4*time.Minute, "time between rollouts (service and daemon in turn)")
	fs.DurationVar(&o.killEvery, "kill-every", 2*time.Minute, "time between kills of 1% of the instances")
	fs.DurationVar(&o.scaleEvery, "scale-every", 3*time.Minute, "time between service scalings (up 5%, then back)")
	fs.DurationVar(&o.setupTimeout, "setup-timeout", 20*time.Minute, "give up if the fleet has not converged after this long")
	fs.DurationVar(&o.retention, "stopped-task-retention", 5*time.Minute, "how long the server keeps stopped tasks: shorter than -duration, so that expiry is part of what is measured")
	fs.DurationVar(&o.eventsKept, "event-retention", 10*time.Minute, "how long the server keeps events: shorter than -duration, so that their expiry is measured too")
	fs.DurationVar(&o.auditKept, "audit-retention", 10*time.Minute, "how long the server keeps audit records: shorter than -duration (the default, 24h, would let the client's calls pile up for the whole run)")
	fs.IntVar(&o.eventLimit, "event-limit", 0, "the most events the cluster keeps (0: the server's default)")
	fs.Float64Var(&o.warmup, "warmup", 0.2, "share of the samples left out of the verdict at the start")
	fs.StringVar(&o.out, "out", "", "write samples.csv and report.json into this directory")
	fs.StringVar(&o.serverLog, "server-log", "", "write the server's log (warnings and up) here")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.instances < 2:
		return o, errors.New("-instances must be at least 2")
	case o.duration <= 0 || o.sample <= 0 || o.rolloutEvery <= 0 || o.killEvery <= 0 || o.scaleEvery <= 0:
		return o, errors.New("-duration, -sample, -rollout-every, -kill-every and -scale-every must be positive")
	case o.duration < 8*o.sample:
		return o, fmt.Errorf("-duration must hold at least 8 samples of -sample %s", o.sample)
	case o.warmup < 0 || o.warmup >= 0.5:
		return o, errors.New("-warmup must be in [0, 0.5)")
	}
	return o, nil
}

func main() {
	benchkit.Main("soak", parse, func(ctx context.Context, o options, w io.Writer) error {
		rep, err := run(ctx, o, w)
		if rep != nil {
			rep.print(w)
			if o.out != "" {
				if werr := rep.write(o.out); werr != nil {
					err = errors.Join(err, werr)
				}
			}
			if err == nil && len(rep.Growing) > 0 {
				err = fmt.Errorf("grew without bound: %v", rep.Growing)
			}
		}
		return err
	})
}
