package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/store"
)

// Report is the JSON report; durations in seconds.
type Report struct {
	Started   time.Time `json:"started"`
	Machine   Machine   `json:"machine"`
	Instances int       `json:"instances"`
	Etcd      string    `json:"etcd"`
	// AgentNice is the hollow agents' niceness (0: same as the server).
	AgentNice int `json:"agent_nice"`
	// ServerMemoryLimitMiB is the server's fixed soft memory limit (0: none
	// fixed; see ServerMemoryLimit).
	ServerMemoryLimitMiB int64 `json:"server_memory_limit_mib"`
	// ServerMemoryLimit is the server's --memory-limit: auto, off or MiB
	// (empty in reports from before it).
	ServerMemoryLimit string `json:"server_memory_limit,omitempty"`
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
	// CacheWaits and CacheWaitSeconds are the server's reads during the
	// rollout that waited for its cache to apply a revision (a write's),
	// and their time waiting in all: each controller reaction pays it.
	CacheWaits       int64   `json:"cache_waits,omitempty"`
	CacheWaitSeconds float64 `json:"cache_wait_seconds,omitempty"`
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
	// ConsolePages live daemon pages were open (-console-pages); the
	// delay is from a change they show to their re-rendered part.
	ConsolePages int `json:"console_pages,omitempty"`
	PageEvents   int `json:"page_events,omitempty"`
	// PageWholeEvents of them carried the whole live part, the rest
	// patches; PageBytesPerEvent is their mean data size.
	PageWholeEvents   int     `json:"page_whole_events,omitempty"`
	PageBytesPerEvent float64 `json:"page_bytes_per_event,omitempty"`
	PageDelayP50Ms    float64 `json:"page_delay_p50_ms,omitempty"`
	PageDelayP99Ms    float64 `json:"page_delay_p99_ms,omitempty"`
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
