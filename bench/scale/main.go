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
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/cpus"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

type options struct {
	instances      int
	jsonOut        string
	etcdEndpoints  []string
	etcdProcess    bool
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
	memoryLimit    int64
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
	fs.Int64Var(&o.memoryLimit, "server-memory-limit", 0, "soft memory limit of the server's process in MiB (debug.SetMemoryLimit; 0: none), not of the hollow agents'")
	fs.IntVar(&o.serverProcs, "server-procs", 0, "GOMAXPROCS of the server's process only, not of the hollow agents' or the sampler's (0: Go's, as capstan server's default; GOMAXPROCS in the environment wins): more than the cores buys API latency with throughput (docs/performance.md, sixteenth and seventeenth rounds)")
	fs.IntVar(&o.serverGOGC, "server-gogc", 0, "GOGC of the server's process (debug.SetGCPercent; 0: GOGC from the environment, else Go's default of 100): with memory to spare, fewer collections leave more CPU to the rest")
	fs.IntVar(&o.agentGOGC, "agent-gogc", 400, "GOGC of the hollow agents' process: its one heap holds thousands of agents' state, which the collector marks on every cycle")
	fs.StringVar(&o.agentState, "agent-state", "memory", "where hollow agents keep their state: memory, or disk (a bbolt file each, as a real agent)")
	fs.StringVar(&o.agentProfile, "agent-cpuprofile", "", "write the hollow agents' CPU profile (child process; whole run, or the -profile-phase) here")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	drains := fs.String("rollouts", "25,100,10", "the rollouts' drainPercents, in order (API latency is sampled during the first)")
	fs.BoolVar(&o.provisioned, "provisioned", false, "the server provisions the instances (sim provisioner, hollow instances in the child process) for a service of 2N tasks, and rollouts replace instances")
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

// Report is the JSON report; durations in seconds.
type Report struct {
	Started   time.Time `json:"started"`
	Machine   Machine   `json:"machine"`
	Instances int       `json:"instances"`
	Etcd      string    `json:"etcd"`
	// AgentNice is the hollow agents' niceness (0: same as the server).
	AgentNice int `json:"agent_nice"`
	// ServerMemoryLimitMiB is the server's soft memory limit (0: none).
	ServerMemoryLimitMiB int64 `json:"server_memory_limit_mib"`
	// ServerGOGC is the server's process's GOGC as the run found it (-1: off).
	ServerGOGC int `json:"server_gogc"`
	// StoppedRetentionSeconds is how long the server kept stopped tasks.
	StoppedRetentionSeconds float64 `json:"stopped_task_retention_seconds"`
	// AgentGOGC is the hollow agents' process's GOGC (0: Go's default).
	AgentGOGC int `json:"agent_gogc"`
	// AgentState is where the hollow agents keep their state (memory, disk).
	AgentState string `json:"agent_state"`
	// Fleet is how instances join: "joined" (hosts of one's own with agent
	// credentials; rollouts in place) or "provisioned" (by the server;
	// rollouts replace instances).
	Fleet string `json:"fleet"`
	// ProvisionSeconds is, in a provisioned run, CreateService → N
	// instances launched, ACTIVE, connected, the daemon and 2N tasks RUNNING.
	ProvisionSeconds float64 `json:"provision_seconds,omitempty"`

	CredentialsSeconds     float64 `json:"credentials_seconds"`
	RegisterSeconds        float64 `json:"register_seconds"`
	InstancesPerSecond     float64 `json:"instances_per_second"`
	DaemonPlacementSeconds float64 `json:"daemon_placement_seconds"`
	ServiceTasks           int     `json:"service_tasks"`
	ServiceSeconds         float64 `json:"service_seconds"`
	PlacedSeconds          float64 `json:"service_placed_seconds"` // CreateService → every task on an instance
	PlacementsPerSecond    float64 `json:"placements_per_second"`  // tasks placed on instances per second
	RunningPerSecond       float64 `json:"running_per_second"`     // tasks RUNNING per second, end to end
	RolloutSeconds         float64 `json:"rollout_seconds"`        // drainPercent 25; -1 when not finished
	Rollouts               []Rollout
	// APIClient is where the API sampler ran: "process" (one of its own,
	// as a user's client; the api_ keys) or "in-process" (tests).
	APIClient  string                `json:"api_client"`
	APIP50Ms   float64               `json:"api_p50_ms"`
	APIP99Ms   float64               `json:"api_p99_ms"`
	APIByOp    map[string][2]float64 `json:"api_by_op_p50_p99_ms"`
	APISamples int                   `json:"api_samples"`
	APIErrors  int64                 `json:"api_errors"`
	// APIByPosition splits the calls by their place after the sampler's
	// pause: "first after the pause" or "following" (p50, p99 ms).
	APIByPosition map[string][2]float64 `json:"api_by_position_p50_p99_ms"`
	// The same calls made at the same time by a client inside the
	// server's process, as rounds one to seven measured them.
	APIInProcessP50Ms       float64               `json:"api_in_process_p50_ms,omitempty"`
	APIInProcessP99Ms       float64               `json:"api_in_process_p99_ms,omitempty"`
	APIInProcessByOp        map[string][2]float64 `json:"api_in_process_by_op_p50_p99_ms,omitempty"`
	APIInProcessSamples     int                   `json:"api_in_process_samples,omitempty"`
	APIInProcessByPosition  map[string][2]float64 `json:"api_in_process_by_position_p50_p99_ms,omitempty"`
	ServerRSSMiB            float64               `json:"server_rss_mib"`
	ServerPeakRSSMiB        float64               `json:"server_peak_rss_mib"`
	ServerRSSAnonMiB        float64               `json:"server_rss_anon_mib"`  // heap, stacks
	ServerRSSFileMiB        float64               `json:"server_rss_file_mib"`  // mapped files: etcd's database, the binary
	ServerHeapMiB           float64               `json:"server_heap_mib"`      // Go heap in use after a collection
	ServerStacksMiB         float64               `json:"server_stacks_mib"`    // goroutine stacks
	ServerHeapFreeMiB       float64               `json:"server_heap_free_mib"` // free heap not yet returned
	ServerHeapLiveMiB       float64               `json:"server_heap_live_mib"` // marked by the last collection
	ServerCPUSeconds        float64               `json:"server_cpu_seconds"`
	ServerHeapPerInstanceKi float64               `json:"server_heap_per_instance_kib"`
	ServerGoroutines        int                   `json:"server_goroutines"`
	// ServerSettled* are read -settle after the end's readings, with no
	// collection forced between; the heap's make-up (ServerHeap*,
	// ServerStacksMiB) is read after them.
	ServerSettledRSSMiB  float64 `json:"server_settled_rss_mib,omitempty"`
	ServerSettledAnonMiB float64 `json:"server_settled_anon_mib,omitempty"`
	// ServerPeaks are the highest memory readings while the run went on.
	ServerPeaks memPeaks `json:"server_peaks"`
	EtcdDBMiB   float64  `json:"etcd_db_mib"`
	// EtcdDefrags are the embedded member's defragmentations, in order.
	EtcdDefrags []defragRun `json:"etcd_defrags,omitempty"`
	// The etcd process's own, with -etcd-process.
	EtcdRSSMiB     float64 `json:"etcd_rss_mib,omitempty"`
	EtcdPeakRSSMiB float64 `json:"etcd_peak_rss_mib,omitempty"`
	EtcdCPUSeconds float64 `json:"etcd_cpu_seconds,omitempty"`
	// Stored is the live records by kind (their key's first segment) at the end.
	Stored                  map[string]storedKind `json:"stored,omitempty"`
	AgentRSSPerInstanceKiB  float64               `json:"agent_rss_per_instance_kib"`
	AgentHeapPerInstanceKiB float64               `json:"agent_heap_per_instance_kib"`
	AgentGoroutinesPerInst  float64               `json:"agent_goroutines_per_instance"`
	AgentCPUSeconds         float64               `json:"agent_cpu_seconds"`
	// IdleServerCores and IdleAgentCores are the CPU a steady fleet
	// costs, in cores, over -idle before the rollouts: heartbeats, leases
	// and periodic passes.
	IdleSeconds     float64  `json:"idle_seconds"`
	IdleServerCores float64  `json:"idle_server_cores"`
	IdleAgentCores  float64  `json:"idle_agent_cores"`
	Killed          int      `json:"killed"`
	DetectSeconds   float64  `json:"detect_seconds"`
	ReplaceSeconds  float64  `json:"replace_seconds"`
	Invariants      []string `json:"invariant_violations"`
	Notes           []string `json:"notes,omitempty"`
}

// Rollout is one UpdateDaemon measurement.
type Rollout struct {
	DrainPercent float64 `json:"drain_percent"`
	Seconds      float64 `json:"seconds"` // -1: not finished
	Status       string  `json:"status"`
	Reason       string  `json:"reason,omitempty"`
	// From CapstanV1.DescribeDaemonRollout at the end.
	OnTarget  int    `json:"on_target"`
	Remaining int    `json:"remaining"`
	Draining  int    `json:"draining"`
	Stalled   string `json:"stalled,omitempty"`
	// StealSeconds is the machine's steal time during the rollout.
	StealSeconds float64 `json:"steal_seconds"`
	// ServerCPUSeconds is the CPU the server's process (embedded etcd
	// included) used during the rollout.
	ServerCPUSeconds float64 `json:"server_cpu_seconds"`
	// Reconciles is each controller's reconciles during the rollout and
	// the time they took, waits included.
	Reconciles map[string]controller.Stat `json:"reconciles,omitempty"`
	// Writes is what was written to etcd during the rollout, by kind of
	// record (the server's store counts what its watch sees).
	Writes map[string]store.WriteCount `json:"writes,omitempty"`
	// Stages times the steps of replacing an instance (provisioned runs),
	// over the replacements whose events the event limit kept (the last
	// ~1,500 of 5,000).
	Stages []Stage `json:"stages,omitempty"`
	// TasksStored and HeapLiveMiB are read when the rollout ends: the task
	// records kept (stopped ones until their retention ends), and the
	// server's live heap as of its latest collection.
	TasksStored     int     `json:"tasks_stored"`
	InstancesStored int     `json:"instances_stored"`
	HeapLiveMiB     float64 `json:"heap_live_mib"`
}

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

// Machine describes where the numbers were taken.
type Machine struct {
	GOOS, GOARCH string
	NumCPU       int
	GOMAXPROCS   int
	CPUModel     string
	GoVersion    string
	Revision     string
	LoadAvgStart string
	LoadAvgEnd   string
	// StealSeconds is the CPU time the hypervisor gave to others while
	// the run wanted it (all CPUs; /proc/stat): on a shared host, runs of
	// one build differ by about this much.
	StealSeconds float64 `json:"steal_seconds"`
}

// stealSeconds is the machine's steal time so far (0 where unknown).
func stealSeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	v, _ := strconv.ParseFloat(f[8], 64)
	return v / 100 // USER_HZ
}

func machine() Machine {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		GoVersion: runtime.Version(), LoadAvgStart: benchkit.LoadAvg(), StealSeconds: -stealSeconds()}
	m.CPUModel, m.Revision = benchkit.CPUModel(), benchkit.VCSRevision()
	return m
}

// run performs the whole measurement; the report holds what was measured
// even when a step fails.
func run(ctx context.Context, o options, w io.Writer) (*Report, error) {
	if o.memoryLimit > 0 {
		debug.SetMemoryLimit(o.memoryLimit << 20)
	}
	cpus.SetProcs(o.serverProcs)
	if o.serverGOGC > 0 {
		debug.SetGCPercent(o.serverGOGC)
	}
	serverGOGC := debug.SetGCPercent(-1)
	debug.SetGCPercent(serverGOGC)
	rep := &Report{Started: time.Now().UTC(), Machine: machine(), Instances: o.instances, Etcd: "embedded", AgentNice: o.agentNice, AgentGOGC: o.agentGOGC, AgentState: o.agentState, Fleet: "joined", ServerMemoryLimitMiB: o.memoryLimit, ServerGOGC: serverGOGC, RolloutSeconds: -1,
		StoppedRetentionSeconds: cmp.Or(o.retention, fleet.DefaultStoppedRetention).Seconds(),
		DetectSeconds:           -1, ReplaceSeconds: -1, Invariants: []string{}}
	if len(o.etcdEndpoints) > 0 {
		rep.Etcd = strings.Join(o.etcdEndpoints, ",")
	}
	if o.work == "" {
		dir, err := os.MkdirTemp("", "capstan-scale-")
		if err != nil {
			return nil, err
		}
		o.work = dir
		if !o.keep {
			defer os.RemoveAll(dir)
		}
	}
	var member *etcdProcess
	if o.etcdProcess {
		var err error
		if member, err = startEtcdProcess(o.work); err != nil {
			return rep, err
		}
		defer member.stop()
		o.etcdEndpoints, o.etcdMaxTxnOps = []string{member.url}, store.EmbeddedMaxTxnOps
		rep.Etcd = "process " + member.url
	}
	switch o.profilePhase {
	case "":
		stop, err := o.profile("", nil)
		if err != nil {
			return nil, err
		}
		defer stop()
	case "service", "idle", "rollout":
	default:
		return nil, fmt.Errorf("-profile-phase: want service, idle or rollout, got %q", o.profilePhase)
	}
	mem := startMemWatch(250*time.Millisecond, o.memProfile)
	h, err := start(ctx, o, w)
	if err != nil {
		mem.finish()
		return nil, err
	}
	h.mem = mem
	defer func() {
		h.logf("stopping %d hollow instances and the server", len(h.handles))
		if err := h.close(); err != nil {
			fmt.Fprintln(os.Stderr, "scale: cleanup:", err)
		}
	}()
	if o.provisioned {
		rep.Fleet = "provisioned"
		err = measureProvisioned(ctx, o, h, rep)
	} else {
		err = measure(ctx, o, h, rep)
	}
	rep.ServerPeaks = mem.finish()
	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()
	rep.Machine.StealSeconds += stealSeconds()
	// The end's resident readings come before any collection the bench
	// forces, so that -settle sees what the server gives back on its own.
	rep.ServerRSSMiB = float64(rss(os.Getpid())) / (1 << 20)
	rep.ServerPeakRSSMiB = float64(peakRSS()) / (1 << 20)
	rep.ServerRSSAnonMiB = float64(procStatus(os.Getpid(), "RssAnon")) / (1 << 20)
	rep.ServerRSSFileMiB = float64(procStatus(os.Getpid(), "RssFile")) / (1 << 20)
	rep.ServerCPUSeconds = cpuSeconds(os.Getpid())
	if o.settle > 0 {
		time.Sleep(o.settle)
		rep.ServerSettledRSSMiB = float64(rss(os.Getpid())) / (1 << 20)
		rep.ServerSettledAnonMiB = float64(procStatus(os.Getpid(), "RssAnon")) / (1 << 20)
	}
	if o.memProfile != "" {
		writeHeapProfile(o.memProfile + ".end")
	}
	// The heap's make-up, after a collection (and after -settle).
	self := selfStats()
	rep.ServerHeapMiB = float64(self.HeapBytes) / (1 << 20)
	rep.ServerStacksMiB = float64(self.StackBytes) / (1 << 20)
	rep.ServerHeapFreeMiB = float64(self.HeapFree) / (1 << 20)
	rep.ServerHeapLiveMiB = float64(self.HeapLive) / (1 << 20)
	rep.ServerGoroutines = self.Goroutines
	dbPath := filepath.Join(h.cfg.DataDir, "etcd", "data", "member", "snap", "db")
	if member != nil {
		dbPath = filepath.Join(o.work, "etcd", "data", "member", "snap", "db")
		rep.EtcdRSSMiB, rep.EtcdPeakRSSMiB, rep.EtcdCPUSeconds = member.stats()
	}
	if st, serr := os.Stat(dbPath); serr == nil {
		rep.EtcdDBMiB = float64(st.Size()) / (1 << 20)
	}
	rep.Stored = storedKinds(ctx, h.srv.Store)
	for _, d := range h.srv.Store.Defrags() {
		rep.EtcdDefrags = append(rep.EtcdDefrags, defragRun{At: d.At.Sub(rep.Started).Seconds(),
			BeforeMiB: float64(d.BeforeBytes) / (1 << 20), AfterMiB: float64(d.AfterBytes) / (1 << 20), Seconds: d.Took.Seconds()})
	}
	if hs, herr := h.host.Stats(); herr == nil {
		rep.AgentCPUSeconds = hs.CPUSeconds
	}
	return rep, err
}

// defragRun is one defragmentation of the embedded etcd: when (seconds
// into the run), the database's size before and after, and how long it
// stopped etcd.
type defragRun struct {
	At        float64 `json:"at_seconds"`
	BeforeMiB float64 `json:"before_mib"`
	AfterMiB  float64 `json:"after_mib"`
	Seconds   float64 `json:"seconds"`
}

// storedKind is the count and JSON size of one kind of record.
type storedKind struct {
	Count int     `json:"count"`
	MiB   float64 `json:"mib"`
}

// storedKinds sizes the live records by kind: what the database and the
// cache hold apart from history.
func storedKinds(ctx context.Context, s *store.Store) map[string]storedKind {
	out := map[string]storedKind{}
	for _, kind := range []string{"capacityproviders", "clusters", "containerinstances", "credentials",
		"daemondeployments", "daemonplacements", "daemonrevisions", "daemons", "daemontaskdeffamilies",
		"daemontaskdefs", "desired", "events", "managedinstances", "serviceevents", "services", "sessions",
		"taskdeffamilies", "taskdefs", "tasks"} {
		vals, err := store.ListRaw(ctx, s, kind+"/")
		if err != nil || len(vals) == 0 {
			continue
		}
		k := storedKind{Count: len(vals)}
		for _, v := range vals {
			k.MiB += float64(len(v))
		}
		k.MiB /= 1 << 20
		out[kind] = k
	}
	return out
}

// peakRSS is this process's high-water resident set.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

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

// profile starts the CPU profiles when they cover phase ("" for the whole
// run, where the child profiles itself); the returned func stops them.
// agents is the hollow instances' host, nil for the whole run.
func (o options) profile(phase string, agents host) (func(), error) {
	if o.profilePhase != phase {
		return func() {}, nil
	}
	stopAgents := func() {}
	if agents != nil && o.agentProfile != "" {
		if err := agents.CPUProfile(true); err != nil {
			return nil, fmt.Errorf("hollow agents' profile: %w", err)
		}
		stopAgents = func() {
			if err := agents.CPUProfile(false); err != nil {
				fmt.Fprintln(os.Stderr, "hollow agents' profile:", err)
			}
		}
	}
	stopTrace := o.traceInPhase()
	stop := func() { stopTrace(); stopAgents() }
	if o.cpuProfile == "" {
		return stop, nil
	}
	f, err := os.Create(o.cpuProfile)
	if err != nil {
		stop()
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		stop()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close(); stop() }, nil
}

// traceInPhase records the execution trace for one window in the middle of
// a phase: a whole phase at thousands of sessions would be gigabytes. The
// returned func ends it early if the phase ends first.
func (o options) traceInPhase() func() {
	if o.traceOut == "" {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case <-time.After(o.traceWindow):
		}
		f, err := os.Create(o.traceOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "trace:", err)
			return
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			fmt.Fprintln(os.Stderr, "trace:", err)
			return
		}
		select {
		case <-done:
		case <-time.After(o.traceWindow):
		}
		trace.Stop()
	}()
	return func() { close(done); <-finished }
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
		written, reconciled := h.srv.Store.Writes(), h.srv.Reconciles()
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
		r.Reconciles = map[string]controller.Stat{}
		for name, st := range h.srv.Reconciles() {
			was := reconciled[name]
			r.Reconciles[name] = controller.Stat{Passes: st.Passes - was.Passes, Seconds: st.Seconds - was.Seconds}
		}
		r.Writes = store.WritesSince(written, h.srv.Store.Writes())
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

func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return
	}
	defer f.Close()
	runtime.GC()
	pprof.WriteHeapProfile(f)
}

func secs(v float64) string {
	if v < 0 {
		return "not finished"
	}
	return fmt.Sprintf("%.1f s", v)
}

// printLatencies prints p50 and p99 per operation, then by the calls'
// place after the sampler's pause.
func printLatencies(w io.Writer, byOp, byPosition map[string][2]float64) {
	for _, m := range []map[string][2]float64{byOp, byPosition} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(w, "  %s\tp50 %.1f ms\tp99 %.1f ms\n", k, m[k][0], m[k][1])
		}
	}
}

// printWrites lists a rollout's etcd writes by kind, most bytes first,
// and per instance of the fleet.
func printWrites(w io.Writer, ws map[string]store.WriteCount, instances int) {
	if len(ws) == 0 || instances == 0 {
		return
	}
	var total store.WriteCount
	kinds := slices.Collect(maps.Keys(ws))
	for _, k := range kinds {
		total.Puts += ws[k].Puts
		total.Deletes += ws[k].Deletes
		total.Bytes += ws[k].Bytes
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(ws[b].Bytes, ws[a].Bytes), strings.Compare(a, b)) })
	per := float64(instances)
	fmt.Fprintf(w, "  etcd writes: puts / deletes / MiB (per instance: puts, KiB)\t%d / %d / %.1f\t%.1f, %.1f\n", total.Puts, total.Deletes,
		float64(total.Bytes)/(1<<20), float64(total.Puts)/per, float64(total.Bytes)/1024/per)
	for _, k := range kinds {
		c := ws[k]
		fmt.Fprintf(w, "    %s\t%d / %d / %.1f\t%.1f, %.1f\n", k, c.Puts, c.Deletes, float64(c.Bytes)/(1<<20), float64(c.Puts)/per, float64(c.Bytes)/1024/per)
	}
}

func printReconciles(w io.Writer, rs map[string]controller.Stat) {
	names := slices.Sorted(maps.Keys(rs))
	if len(names) == 0 {
		return
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d (%.1f s)", n, rs[n].Passes, rs[n].Seconds)
	}
	fmt.Fprintf(w, "  reconciles (time in them)\t%s\n", strings.Join(parts, ", "))
}

func printTable(w io.Writer, r *Report) {
	m := r.Machine
	fmt.Fprintf(w, "\n%s/%s, %d CPUs (%s), GOMAXPROCS %d, %s, revision %.12s, load %s → %s, CPU stolen by the host %.1f s, etcd %s, server GOGC %d, stopped tasks kept %s, agents at nice %d, GOGC %d, state in %s\n\n", m.GOOS, m.GOARCH, m.NumCPU, m.CPUModel,
		m.GOMAXPROCS, m.GoVersion, m.Revision, m.LoadAvgStart, m.LoadAvgEnd, m.StealSeconds, r.Etcd, r.ServerGOGC, time.Duration(r.StoppedRetentionSeconds*float64(time.Second)), r.AgentNice, r.AgentGOGC, r.AgentState)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "hollow instances\t%d\n", r.Instances)
	if r.Fleet == "provisioned" {
		fmt.Fprintf(tw, "service of %d tasks → instances provisioned, daemon and tasks RUNNING\t%.1f s\n", r.ServiceTasks, r.ProvisionSeconds)
	} else {
		fmt.Fprintf(tw, "registration (launch → all ACTIVE, connected)\t%.1f s\t%.0f instances/s\n", r.RegisterSeconds, r.InstancesPerSecond)
		fmt.Fprintf(tw, "CreateDaemon → RUNNING on all\t%.1f s\n", r.DaemonPlacementSeconds)
		fmt.Fprintf(tw, "service of %d tasks → all placed\t%.1f s\t%.0f placements/s\n", r.ServiceTasks, r.PlacedSeconds, r.PlacementsPerSecond)
		fmt.Fprintf(tw, "  → all RUNNING\t%.1f s\t%.0f tasks/s\n", r.ServiceSeconds, r.RunningPerSecond)
	}
	for _, ro := range r.Rollouts {
		fmt.Fprintf(tw, "UpdateDaemon drainPercent %v → SUCCESSFUL\t%s\t%s, %d/%d on target, %.1f s stolen, server CPU %.1f s\n", ro.DrainPercent, secs(ro.Seconds), ro.Status,
			ro.OnTarget, ro.OnTarget+ro.Remaining, ro.StealSeconds, ro.ServerCPUSeconds)
		printWrites(tw, ro.Writes, r.Instances)
		printReconciles(tw, ro.Reconciles)
		fmt.Fprintf(tw, "  then: tasks / container instances kept, server heap live\t%d / %d\t%.0f MiB\n", ro.TasksStored, ro.InstancesStored, ro.HeapLiveMiB)
		if len(ro.Stages) > 0 {
			fmt.Fprintf(tw, "  replacing an instance X by R, step by step\n")
			printStages(tw, ro.Stages)
		}
	}
	fmt.Fprintf(tw, "API during rollout, client %s (%d calls, %d errors)\tp50 %.1f ms\tp99 %.1f ms\n", r.APIClient, r.APISamples, r.APIErrors, r.APIP50Ms, r.APIP99Ms)
	printLatencies(tw, r.APIByOp, r.APIByPosition)
	if r.APIInProcessSamples > 0 {
		fmt.Fprintf(tw, "API at the same time, client in the server's process (%d calls)\tp50 %.1f ms\tp99 %.1f ms\n", r.APIInProcessSamples, r.APIInProcessP50Ms, r.APIInProcessP99Ms)
		printLatencies(tw, r.APIInProcessByOp, r.APIInProcessByPosition)
	}
	fmt.Fprintf(tw, "server RSS (now / peak)\t%.0f MiB\t%.0f MiB\n", r.ServerRSSMiB, r.ServerPeakRSSMiB)
	fmt.Fprintf(tw, "  anonymous / mapped files / Go heap in use\t%.0f MiB\t%.0f MiB\t%.0f MiB\n", r.ServerRSSAnonMiB, r.ServerRSSFileMiB, r.ServerHeapMiB)
	fmt.Fprintf(tw, "  goroutine stacks / free heap not returned / heap live\t%.0f MiB\t%.0f MiB\t%.0f MiB\n", r.ServerStacksMiB, r.ServerHeapFreeMiB, r.ServerHeapLiveMiB)
	if r.ServerSettledRSSMiB > 0 {
		fmt.Fprintf(tw, "  settled: RSS / anonymous\t%.0f MiB\t%.0f MiB\n", r.ServerSettledRSSMiB, r.ServerSettledAnonMiB)
	}
	pk := r.ServerPeaks
	fmt.Fprintf(tw, "  peaks: anonymous / mapped files\t%.0f MiB\t%.0f MiB\n", pk.RSSAnonMiB, pk.RSSFileMiB)
	fmt.Fprintf(tw, "  peaks: heap held / goal / live (at)\t%.0f MiB\t%.0f MiB\t%.0f MiB (%s)\n", pk.HeapRetainedMiB, pk.HeapGoalMiB, pk.HeapLiveMiB, pk.At)
	fmt.Fprintf(tw, "server CPU\t%.1f s\n", r.ServerCPUSeconds)
	fmt.Fprintf(tw, "server heap per instance (sessions, records)\t%.1f KiB\n", r.ServerHeapPerInstanceKi)
	fmt.Fprintf(tw, "etcd db\t%.1f MiB\n", r.EtcdDBMiB)
	for _, d := range r.EtcdDefrags {
		fmt.Fprintf(tw, "  defragmented at %.0f s\t%.1f → %.1f MiB\tin %.2f s\n", d.At, d.BeforeMiB, d.AfterMiB, d.Seconds)
	}
	if r.EtcdRSSMiB > 0 {
		fmt.Fprintf(tw, "etcd process RSS (now / peak), CPU\t%.0f MiB\t%.0f MiB\t%.1f s\n", r.EtcdRSSMiB, r.EtcdPeakRSSMiB, r.EtcdCPUSeconds)
	}
	kinds := make([]string, 0, len(r.Stored))
	for k := range r.Stored {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return r.Stored[kinds[i]].MiB > r.Stored[kinds[j]].MiB })
	for _, k := range kinds {
		fmt.Fprintf(tw, "  live %s\t%d\t%.1f MiB\n", k, r.Stored[k].Count, r.Stored[k].MiB)
	}
	fmt.Fprintf(tw, "hollow agent per instance (RSS / heap)\t%.0f KiB\t%.0f KiB\t%.1f goroutines\n", r.AgentRSSPerInstanceKiB, r.AgentHeapPerInstanceKiB, r.AgentGoroutinesPerInst)
	fmt.Fprintf(tw, "hollow agents CPU\t%.1f s\n", r.AgentCPUSeconds)
	if r.IdleSeconds > 0 {
		fmt.Fprintf(tw, "steady fleet CPU (server / hollow agents)\t%.3f cores\t%.3f cores\n", r.IdleServerCores, r.IdleAgentCores)
	}
	fmt.Fprintf(tw, "loss of %d instances: detected\t%s\n", r.Killed, secs(r.DetectSeconds))
	fmt.Fprintf(tw, "  replaced (service and daemon whole again)\t%s\n", secs(r.ReplaceSeconds))
	fmt.Fprintf(tw, "invariant violations\t%d\n", len(r.Invariants))
	tw.Flush()
	for _, v := range r.Invariants {
		fmt.Fprintln(w, "  violation:", v)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}
