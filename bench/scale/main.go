// Command scale measures the control plane with N hollow instances: the
// real agent (session, task engine, bbolt state, resources) on simulated
// containers, thousands of them in one process.
//
//	go run ./bench/scale [-instances 1000] [-json out.json] [-cpuprofile cpu.pprof]
//
// The server runs in this process (embedded etcd in a temporary directory,
// or -etcd-endpoints); the hollow instances run in a child process (this
// executable again), so that the server's memory and CPU are measured
// alone. Each instance registers with a credential of its own minted with
// CapstanV1.CreateAgentCredential for the run's MANAGED_INSTANCES capacity
// provider (how an operator adds hosts of their own) and keeps its own
// websocket session. The run measures, in order:
//
//  1. registration: N instances launched at once → all ACTIVE, connected;
//  2. CreateDaemon → the daemon RUNNING on all N (DescribeDaemon counts);
//  3. CreateService of 2N tasks (over services of at most 5,000 each, the
//     desiredCount limit) → every task placed on an instance (placements
//     per second: the scheduler's rate) → all RUNNING (end to end);
//  4. UpdateDaemon with drainPercent 25 → deployment SUCCESSFUL, while one
//     client samples DescribeDaemon, ListTasks and DescribeContainerInstances
//     (p50/p99); then drainPercent 100 and 10. A rollout that does not
//     finish within -rollout-timeout is reported as not finished;
//  5. instance loss: 1% of the instances killed (their agents and
//     containers stop at once) → the server reports them disconnected
//     (detection); then, as an operator's automation would, each lost
//     instance is deregistered and a new one launched → the service back
//     at 2N RUNNING tasks and the daemon on every instance (replacement).
//     With -provisioned the server replaces them itself: it gives up on an
//     instance LostAfter without a session, terminates it and launches
//     another (replacement ends when the provider holds N again).
//
// It prints a table and, with -json, writes the report. Server RSS and CPU
// are this process's (server, etcd and the measuring client); the hollow
// agents' memory is the child's, per instance.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/memlimit"
	"github.com/capstanhq/capstan/internal/store"
)

type options struct {
	instances      int
	jsonOut        string
	etcdEndpoints  []string
	etcdProcess    bool
	etcdTLS        store.TLSFiles // the -etcd-process member's client certificate
	etcdMaxTxnOps  int
	cpuProfile     string
	profilePhase   string
	memProfile     string
	settle         time.Duration
	traceOut       string
	traceWindow    time.Duration
	provisionDelay time.Duration
	rolloutTimeout time.Duration
	phaseTimeout   time.Duration
	serverLog      string
	agentLog       string
	agentNice      int
	agentProfile   string
	agentGOGC      int
	agentState     string
	memoryLimit    memlimit.Setting
	serverGOGC     int
	retention      time.Duration
	serverProcs    int
	work           string
	keep           bool
	serverDebug    bool
	// inProcess runs the hollow instances in this process (tests).
	inProcess bool
	// sampleInProcess samples the API from the server's process too,
	// beside the client process (always so with inProcess).
	sampleInProcess bool
	// skipRollouts leaves out step 4.
	skipRollouts bool
	// idle is how long the steady fleet is watched before the rollouts.
	idle time.Duration
	// drains are the rollouts' drainPercents, in order.
	drains []float64
	// provisioned has the server provision every instance (see
	// measureProvisioned).
	provisioned bool
	// consolePages live daemon pages are open during the second rollout.
	consolePages int
}

func main() {
	if os.Getenv(samplerEnv) != "" {
		if err := serveSampler(); err != nil {
			fmt.Fprintln(os.Stderr, "api sampler:", err)
			os.Exit(1)
		}
		return
	}
	if dir := os.Getenv(etcdEnv); dir != "" {
		if err := serveEtcd(dir); err != nil {
			fmt.Fprintln(os.Stderr, "etcd process:", err)
			os.Exit(1)
		}
		return
	}
	if dir := os.Getenv(childEnv); dir != "" {
		if err := serveHost(dir); err != nil {
			fmt.Fprintln(os.Stderr, "hollow host:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, o, os.Stdout)
	if rep != nil {
		printTable(os.Stdout, rep)
		if o.jsonOut != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			if werr := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); werr != nil {
				fmt.Fprintln(os.Stderr, "scale:", werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	var o options
	var endpoints string
	fs.IntVar(&o.instances, "instances", 1000, "hollow instances")
	fs.StringVar(&o.jsonOut, "json", "", "write the report as JSON to this file")
	fs.StringVar(&endpoints, "etcd-endpoints", "", "comma-separated URLs of an external etcd (default: embedded)")
	fs.BoolVar(&o.etcdProcess, "etcd-process", false, "run etcd, with the embedded member's settings, in a process of its own: the server's RSS and CPU are then its own, as with an external etcd, and etcd's are reported beside them")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the server process's CPU profile (whole run) here")
	fs.StringVar(&o.profilePhase, "profile-phase", "", "profile only this phase: service (placing the service tasks), idle (the steady fleet, -idle) or rollout (the drainPercent 25 rollout)")
	fs.DurationVar(&o.settle, "settle", 30*time.Second, "read the server's RSS again this long after the end (0: not)")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile after the service is placed here, one at the end to this path plus .end, and one of the live heap's highest point plus .peak")
	fs.StringVar(&o.traceOut, "trace", "", "write an execution trace of the server's process for -trace-window, starting that long into the -profile-phase, here (go tool trace -pprof=sched shows what waited for a core)")
	fs.DurationVar(&o.traceWindow, "trace-window", 5*time.Second, "how long -trace records, and how far into the phase it starts")
	fs.DurationVar(&o.provisionDelay, "sim-provision-delay", 0, "boot delay of instances the server provisions itself")
	fs.DurationVar(&o.retention, "stopped-task-retention", 0, "how long the server keeps stopped tasks (0: its default, an hour; at least 1m): shorter shows what expiry does over several rollouts")
	fs.DurationVar(&o.rolloutTimeout, "rollout-timeout", 2*time.Minute, "give up on a daemon rollout after this long")
	fs.DurationVar(&o.phaseTimeout, "timeout", 15*time.Minute, "give up on any other step after this long")
	fs.StringVar(&o.serverLog, "server-log", "", "write the server's log here")
	fs.BoolVar(&o.serverDebug, "server-debug", false, "log at debug level to -server-log (each reconcile and how long it took)")
	fs.StringVar(&o.agentLog, "agent-log", "", "write the hollow agents' warnings here")
	fs.BoolVar(&o.skipRollouts, "skip-rollouts", false, "leave out the rollouts (step 4)")
	fs.BoolVar(&o.sampleInProcess, "sample-in-process", false, "sample the API during the rollout from the server's process too, beside the client process, doubling the calls the rollout competes with (as every run did until the twenty-seventh round)")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "before the rollouts, measure the CPU of the steady fleet for this long (0: not)")
	fs.IntVar(&o.agentNice, "agent-nice", 10, "niceness of the hollow agents' process (0: the server's): a real fleet's agents run on cores of their own, so by default the server gets the shared cores first and the agents every cycle it leaves")
	fs.Func("server-memory-limit", "the server's --memory-limit: auto (its default), off, or MiB; the server's process only, not the hollow agents'", func(v string) (err error) {
		o.memoryLimit, err = memlimit.Parse(v)
		return err
	})
	fs.IntVar(&o.serverProcs, "server-procs", 0, "GOMAXPROCS of the server's process only, not of the hollow agents' or the sampler's (0: as capstan server chooses, two per core on up to 4 cores; GOMAXPROCS in the environment wins): more than the cores buys API latency with throughput (docs/performance-history.md, sixteenth and seventeenth rounds)")
	fs.IntVar(&o.serverGOGC, "server-gogc", 0, "GOGC of the server's process (debug.SetGCPercent; 0: GOGC from the environment, else Go's default of 100): with memory to spare, fewer collections leave more CPU to the rest")
	fs.IntVar(&o.agentGOGC, "agent-gogc", 400, "GOGC of the hollow agents' process: its one heap holds thousands of agents' state, which the collector marks on every cycle")
	fs.StringVar(&o.agentState, "agent-state", "memory", "where hollow agents keep their state: memory, or disk (a bbolt file each, as a real agent)")
	fs.StringVar(&o.agentProfile, "agent-cpuprofile", "", "write the hollow agents' CPU profile (child process; whole run, or the -profile-phase) here")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	drains := fs.String("rollouts", "25,100,10", "the rollouts' drainPercents, in order (API latency is sampled during the first)")
	fs.BoolVar(&o.provisioned, "provisioned", false, "the server provisions the instances (sim provisioner, hollow instances in the child process) for a service of 2N tasks, and rollouts replace instances")
	fs.IntVar(&o.consolePages, "console-pages", 0, "open this many live daemon pages of the web console (signed-in SSE clients) during the second rollout, the first running with none: page delay and server CPU side by side (use -rollouts 25,25)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.instances < 1 {
		return o, fmt.Errorf("-instances must be at least 1")
	}
	if o.agentState != "memory" && o.agentState != "disk" {
		return o, fmt.Errorf("-agent-state must be memory or disk (got %q)", o.agentState)
	}
	if endpoints != "" {
		if o.etcdProcess {
			return o, fmt.Errorf("-etcd-endpoints and -etcd-process exclude each other")
		}
		o.etcdEndpoints = strings.Split(endpoints, ",")
	}
	for _, f := range strings.Split(*drains, ",") {
		d, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || d <= 0 || d > 100 {
			return o, fmt.Errorf("-rollouts: %q is not a drainPercent in (0, 100]", f)
		}
		o.drains = append(o.drains, d)
	}
	return o, nil
}
