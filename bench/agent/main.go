// Command agent measures the instance agent against the Docker Engine it
// drives: how much later a task is RUNNING through the ECS API than the same
// container started directly, and what the agent process costs in memory and
// CPU, idle and with tasks running.
//
//	go run ./bench/agent [-n 20] [-tasks 20] [-json out.json]
//
// It starts a server in-process (embedded etcd in a temporary directory),
// builds cmd/capstan and runs `capstan agent` as a separate process on the
// local Docker Engine, so the RSS and CPU time read from /proc are the
// agent's alone. Phases, in order:
//
//  1. idle: the agent's RSS once it has been steady for -steady after its
//     session connected, then its CPU over -window;
//  2. loaded: -tasks busybox tasks RUNNING, RSS once steady, CPU over -window;
//  3. latency: -n pairs of samples, interleaved and alternating which goes
//     first so both paths share the machine's conditions. The Capstan sample
//     is RunTask until a client polling DescribeTasks every -poll sees
//     RUNNING; the raw sample is ContainerCreate + ContainerStart on the
//     moby client until Start returns. Everything is stopped and removed
//     between samples.
//
// Linux only (it reads /proc). Every container it makes carries the label
// com.capstan.cluster=<cluster>, and all of them are removed at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/capstanhq/capstan/internal/ops"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// Labels the engine puts on task containers (internal/agent/engine).
const (
	labelCluster = "com.capstan.cluster"
	labelTaskArn = "com.capstan.task-arn"
	// labelRaw marks the containers this program starts itself.
	labelRaw = "com.capstan.bench"
)

// Goals the report checks.
const (
	goalRatio     = 1.2  // p50 RunTask→RUNNING over p50 docker create+start
	goalIdleMiB   = 30.0 // agent RSS, idle
	goalLoadedMiB = 60.0 // agent RSS with goalLoadedTasks running
	goalLoadedN   = 20   // tasks the loaded goal is stated for
	userHZ        = 100  // clock ticks per second in /proc/<pid>/stat (USER_HZ)
	taskMemoryMiB = 32   // hard limit of the benchmark container
	callTimeout   = time.Minute
)

// command is what every benchmark container runs.
var command = []string{"sleep", "3600"}

type options struct {
	n           int
	warmup      int
	tasks       int
	poll        time.Duration
	gap         time.Duration
	steady      time.Duration
	steadyLimit time.Duration
	window      time.Duration
	jsonOut     string
	binary      string
	agentLog    string
	agentEnv    []string
	dataDir     string
	skipLatency bool
	skipLoad    bool
	rawShares   int64
}

func main() { benchkit.Main("agent", parseFlags, run) }

// envList collects repeated -agent-env KEY=VALUE flags.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }
func (e *envList) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

func parseFlags(args []string) (options, error) {
	var o options
	var env envList
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 20, "latency samples per path")
	fs.IntVar(&o.warmup, "warmup", 1, "unrecorded latency samples per path before the measured ones")
	fs.IntVar(&o.tasks, "tasks", goalLoadedN, "tasks running during the loaded footprint phase")
	fs.DurationVar(&o.poll, "poll", 10*time.Millisecond, "pause between DescribeTasks polls while waiting for RUNNING")
	fs.DurationVar(&o.gap, "gap", 250*time.Millisecond, "pause after each sample's cleanup, so the engine settles before the next")
	fs.DurationVar(&o.steady, "steady", 5*time.Second, "how long RSS must hold (within 2%) to count as steady")
	fs.DurationVar(&o.steadyLimit, "steady-timeout", time.Minute, "give up waiting for a steady RSS after this long and report the last value")
	fs.DurationVar(&o.window, "window", 30*time.Second, "CPU measurement window of each footprint phase")
	fs.StringVar(&o.jsonOut, "json", "", "write the report as JSON to this file")
	fs.StringVar(&o.binary, "binary", "", "capstan binary to run as the agent (default: go build ./cmd/capstan)")
	fs.StringVar(&o.agentLog, "agent-log", "", "keep the agent's log (stderr) in this file (default: discarded with the temp dir)")
	fs.Var(&env, "agent-env", "extra KEY=VALUE for the agent's environment, e.g. GOGC=50 or GODEBUG=gctrace=1 (repeatable)")
	fs.StringVar(&o.dataDir, "data-dir", "", "parent directory for the server's and agent's data (default: system temp dir)")
	fs.BoolVar(&o.skipLatency, "skip-latency", false, "measure the footprint only")
	fs.BoolVar(&o.skipLoad, "skip-load", false, "skip the loaded footprint phase")
	fs.Int64Var(&o.rawShares, "raw-cpu-shares", 2, "CPU shares of the raw containers; 2 is what the agent gives a container without cpu, as ECS does (0: the engine's default, 1024)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.agentEnv = env
	switch {
	case o.n < 1:
		return o, errors.New("-n must be at least 1")
	case o.warmup < 0:
		return o, errors.New("-warmup must not be negative")
	case o.tasks < 1:
		return o, errors.New("-tasks must be at least 1")
	case o.poll <= 0:
		return o, errors.New("-poll must be positive")
	case o.steady <= 0 || o.window <= 0:
		return o, errors.New("-steady and -window must be positive")
	case runtime.GOOS != "linux":
		return o, errors.New("reads /proc: Linux only")
	}
	return o, nil
}

// Machine describes where the numbers were taken.
type Machine struct {
	GOOS          string `json:"goos"`
	GOARCH        string `json:"goarch"`
	NumCPU        int    `json:"numCPU"`
	GOMAXPROCS    int    `json:"gomaxprocs"`
	GoVersion     string `json:"goVersion"`
	CPUModel      string `json:"cpuModel,omitempty"`
	MemTotalMiB   int64  `json:"memTotalMiB,omitempty"`
	Kernel        string `json:"kernel,omitempty"`
	Revision      string `json:"vcsRevision,omitempty"`
	DockerVersion string `json:"dockerVersion"`
	DockerAPI     string `json:"dockerApiVersion"`
	StorageDriver string `json:"dockerStorageDriver,omitempty"`
	CgroupDriver  string `json:"dockerCgroupDriver,omitempty"`
	CgroupVersion string `json:"dockerCgroupVersion,omitempty"`
	// Containers is how many containers the engine held when the run
	// started: other work sharing the engine shows up here.
	Containers   int    `json:"dockerContainersAtStart"`
	LoadAvgStart string `json:"loadAvgStart,omitempty"`
	LoadAvgEnd   string `json:"loadAvgEnd,omitempty"`
}

// Dist summarises samples in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	Min  float64 `json:"minMs"`
	P50  float64 `json:"p50Ms"`
	P90  float64 `json:"p90Ms"`
	Max  float64 `json:"maxMs"`
	Mean float64 `json:"meanMs"`
}

// Sample is one measured start on either path. Times are milliseconds
// from the moment the first request was sent; the engine's own Created and
// StartedAt timestamps place the container inside that interval.
type Sample struct {
	Index int     `json:"index"`
	Path  string  `json:"path"` // "capstan" or "docker"
	First bool    `json:"ranFirst"`
	Total float64 `json:"totalMs"`
	// Capstan: the RunTask call; docker: the ContainerCreate call.
	Call float64 `json:"callMs"`
	// Docker only: the ContainerStart call.
	StartCall float64 `json:"startCallMs,omitempty"`
	// Created and Started are the engine's timestamps of the container.
	Created float64 `json:"engineCreatedMs"`
	Started float64 `json:"engineStartedMs"`
	// Polls is how many DescribeTasks calls the capstan sample made.
	Polls int `json:"polls,omitempty"`
}

// Latency is the start-latency comparison.
type Latency struct {
	Samples int     `json:"samplesPerPath"`
	Warmup  int     `json:"warmupPerPath"`
	PollMs  float64 `json:"pollIntervalMs"`
	Capstan Dist    `json:"capstan"`
	Docker  Dist    `json:"docker"`
	// Ratio is Capstan p50 over docker p50; OverheadP50 their difference.
	Ratio       float64 `json:"ratioOfMedians"`
	OverheadP50 float64 `json:"overheadP50Ms"`
	Goal        float64 `json:"goalRatio"`
	Met         bool    `json:"met"`
	// Stages split the Capstan path at the engine's timestamps:
	// dispatch (request sent → container created: API, placement, etcd
	// write, session push, agent persist and create call), engine (created
	// → started, inside dockerd) and report (started → RUNNING seen: agent
	// notices, reports, server writes, the client's next poll). The same
	// split of the docker path shows what the engine alone takes.
	CapstanStages map[string]Dist `json:"capstanStages"`
	DockerStages  map[string]Dist `json:"dockerStages"`
	DescribeCall  Dist            `json:"describeTasksCall"`
	NewConns      int64           `json:"newClientConnections"`
	Runs          []Sample        `json:"runs"`
}

// Footprint is the agent process at one point of the run.
type Footprint struct {
	Phase   string  `json:"phase"`
	Tasks   int     `json:"tasks"`
	Steady  bool    `json:"steady"`
	WaitedS float64 `json:"waitedForSteadySeconds"`
	// RSSMiB is the largest VmRSS over the steady interval; the split into
	// anonymous and file-backed pages is from the same reading.
	RSSMiB     float64 `json:"rssMiB"`
	AnonMiB    float64 `json:"rssAnonMiB"`
	FileMiB    float64 `json:"rssFileMiB"`
	HWMMiB     float64 `json:"vmHWMMiB"`
	Threads    int     `json:"threads"`
	WindowS    float64 `json:"windowSeconds,omitempty"`
	CPUSeconds float64 `json:"cpuSeconds,omitempty"` // utime+stime over the window
	CPUPercent float64 `json:"cpuPercentOfOneCore,omitempty"`
	WindowMax  float64 `json:"rssMaxInWindowMiB,omitempty"`
	// ServerCPU is this process's CPU (in-process server and the
	// benchmark, which is idle then) over the same window, for context.
	ServerCPU float64 `json:"serverProcessCpuSeconds,omitempty"`
	Goal      float64 `json:"goalMiB,omitempty"`
	Met       *bool   `json:"met,omitempty"`
}

// AgentInfo is how the agent was run.
type AgentInfo struct {
	Binary      string   `json:"binary"`
	BinaryBytes int64    `json:"binaryBytes"`
	BuildSecs   float64  `json:"buildSeconds,omitempty"`
	ExtraEnv    []string `json:"extraEnv,omitempty"`
	StartSecs   float64  `json:"startToConnectedSeconds"`
}

// Report is the JSON output.
type Report struct {
	Started    time.Time   `json:"started"`
	Machine    Machine     `json:"machine"`
	Cluster    string      `json:"cluster"`
	Image      string      `json:"image"`
	RawShares  int64       `json:"rawCpuShares"`
	Command    []string    `json:"command"`
	MemoryMiB  int         `json:"containerMemoryMiB"`
	Agent      AgentInfo   `json:"agent"`
	Footprints []Footprint `json:"footprints"`
	Latency    *Latency    `json:"latency,omitempty"`
	Notes      []string    `json:"notes"`
}

// bench is the running fixture.
type bench struct {
	o       options
	out     io.Writer
	rt      *docker.Runtime
	dc      *client.Client
	ecs     *ecs.Client
	cluster string
	td      string
	image   string
	agent   *agentProc
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	rep := &Report{Started: time.Now().UTC(), Command: command, MemoryMiB: taskMemoryMiB, RawShares: o.rawShares}
	b := &bench{o: o, out: stdout}

	rt, err := docker.New(docker.Options{})
	if err != nil {
		return err
	}
	defer rt.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = rt.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("the Docker Engine is required: %w", err)
	}
	b.rt, b.dc = rt, rt.Client()
	rep.Machine, err = machine(ctx, b.dc)
	if err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	b.image, err = testenv.EnsureBusyboxImage(ictx, rt)
	cancel()
	if err != nil {
		return fmt.Errorf("busybox image: %w", err)
	}
	rep.Image = b.image

	work, err := os.MkdirTemp(o.dataDir, "capstan-bench-agent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	rep.Agent.Binary = o.binary
	if o.binary == "" {
		rep.Agent.Binary = filepath.Join(work, "capstan")
		fmt.Fprintf(stdout, "building %s...\n", rep.Agent.Binary)
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", rep.Agent.Binary, "github.com/capstanhq/capstan/cmd/capstan")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/capstan: %w", err)
		}
		rep.Agent.BuildSecs = time.Since(t0).Seconds()
	}
	fi, err := os.Stat(rep.Agent.Binary)
	if err != nil {
		return err
	}
	rep.Agent.BinaryBytes = fi.Size()
	rep.Agent.ExtraEnv = o.agentEnv

	srvCfg := server.Config{
		Listen:      "127.0.0.1:0",
		DataDir:     filepath.Join(work, "server"),
		Region:      "us-east-1",
		AccountID:   "123456789012",
		AdminKeyID:  "AKIDCAPSTANBENCH",
		AdminSecret: "capstan-bench-secret",
	}
	srv, err := server.Start(ctx, srvCfg)
	if err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	defer srv.Close()
	url := "http://" + srv.Addr
	b.ecs = newECSClient(url, srvCfg.AdminKeyID, srvCfg.AdminSecret)

	b.cluster = "bench-agent-" + benchkit.RandomID(6)
	rep.Cluster = b.cluster
	// Whatever happens from here, the cluster's containers go.
	defer b.removeAll(context.WithoutCancel(ctx))
	if err := b.setupCluster(ctx); err != nil {
		return err
	}
	cred, err := srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: b.cluster, Description: "bench/agent"})
	if err != nil {
		return fmt.Errorf("mint agent credential: %w", err)
	}

	fmt.Fprintf(stdout, "server %s, cluster %s; starting the agent...\n", url, b.cluster)
	t0 := time.Now()
	b.agent, err = startAgent(ctx, agentConfig{
		binary: rep.Agent.Binary, dir: filepath.Join(work, "agent"), logPath: o.agentLog,
		env: map[string]string{
			"CAPSTAN_ENDPOINT":           url,
			"ECS_CLUSTER":                b.cluster,
			"AWS_ACCESS_KEY_ID":          cred.AccessKeyID,
			"AWS_SECRET_ACCESS_KEY":      cred.SecretAccessKey,
			"AWS_REGION":                 "us-east-1",
			"CAPSTAN_METADATA_ADDR":      "0.0.0.0:0",
			"ECS_IMAGE_PULL_BEHAVIOR":    "prefer-cached",
			"ECS_DISABLE_IMAGE_CLEANUP":  "true",
			"ECS_CONTAINER_STOP_TIMEOUT": "1s", // `sleep` as PID 1 ignores SIGTERM
		},
		extra: o.agentEnv,
	})
	if err != nil {
		return err
	}
	defer b.agent.stop()
	rep.Agent.StartSecs = time.Since(t0).Seconds()
	fmt.Fprintf(stdout, "agent pid %d connected in %.2fs (metrics %s)\n", b.agent.pid(), rep.Agent.StartSecs, b.agent.metrics)

	// 1. Idle.
	fmt.Fprintf(stdout, "idle: waiting for a steady RSS, then %s of CPU...\n", o.window)
	fp, err := b.footprint(ctx, "idle", 0, goalIdleMiB)
	if err != nil {
		return err
	}
	rep.Footprints = append(rep.Footprints, fp)

	// 2. Loaded.
	if !o.skipLoad {
		fmt.Fprintf(stdout, "loaded: starting %d tasks...\n", o.tasks)
		arns, err := b.runTasks(ctx, o.tasks)
		if err != nil {
			return err
		}
		goal := 0.0
		if o.tasks == goalLoadedN {
			goal = goalLoadedMiB
		}
		fp, err := b.footprint(ctx, fmt.Sprintf("%d tasks", o.tasks), o.tasks, goal)
		if err != nil {
			return err
		}
		rep.Footprints = append(rep.Footprints, fp)
		fmt.Fprintf(stdout, "loaded: stopping %d tasks...\n", len(arns))
		if err := b.stopTasks(ctx, arns); err != nil {
			return err
		}
	}

	// 3. Latency.
	if !o.skipLatency {
		lat, err := b.latency(ctx)
		if err != nil {
			return err
		}
		rep.Latency = lat
		fp, err := b.agent.snapshot("after latency")
		if err != nil {
			return err
		}
		rep.Footprints = append(rep.Footprints, fp)
	}

	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()
	rep.Notes = notes(rep)
	fmt.Fprintln(stdout)
	printTable(stdout, rep)
	if o.jsonOut != "" {
		if err := benchkit.WriteJSON(o.jsonOut, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", o.jsonOut)
	}
	return nil
}

// dials counts TCP connections the ECS client opens; a redial inside a
// latency sample would add to it.
var dials atomic.Int64

func newECSClient(url, key, secret string) *ecs.Client {
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}
	})
	return ecs.New(ecs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider(key, secret, ""),
		HTTPClient:   benchkit.InMemoryBody{Next: hc},
		Retryer:      aws.NopRetryer{},
	})
}

func (b *bench) setupCluster(ctx context.Context) error {
	if _, err := b.ecs.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(b.cluster)}); err != nil {
		return fmt.Errorf("create cluster: %w", err)
	}
	out, err := b.ecs.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{
		Family: aws.String("bench-sleep"),
		ContainerDefinitions: []types.ContainerDefinition{{
			Name:    aws.String("main"),
			Image:   aws.String(b.image),
			Memory:  aws.Int32(taskMemoryMiB),
			Command: command,
		}},
	})
	if err != nil {
		return fmt.Errorf("register task definition: %w", err)
	}
	b.td = aws.ToString(out.TaskDefinition.TaskDefinitionArn)
	return nil
}

// --- the agent process ---

type agentConfig struct {
	binary, dir, logPath string
	env                  map[string]string
	extra                []string
}

type agentProc struct {
	cmd     *exec.Cmd
	metrics string
	log     *os.File
	logPath string
	exited  chan struct{}
	waitErr error
}

// startAgent runs `capstan agent` with a clean environment (so variables of
// the caller's shell cannot change it) and waits until its session to the
// server is connected.
func startAgent(ctx context.Context, c agentConfig) (*agentProc, error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	metrics := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// An empty env file keeps a host's /etc/capstan/agent.env out of the run.
	envFile := filepath.Join(c.dir, "agent.env")
	if err := os.WriteFile(envFile, nil, 0o600); err != nil {
		return nil, err
	}
	logPath := c.logPath
	if logPath == "" {
		logPath = filepath.Join(c.dir, "agent.log")
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	env := []string{"ECS_DATADIR=" + filepath.Join(c.dir, "data"), "CAPSTAN_METRICS_ADDR=" + metrics}
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "DOCKER_HOST", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "DOCKER_API_VERSION"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range c.env {
		env = append(env, k+"="+v)
	}
	env = append(env, c.extra...) // last wins
	cmd := exec.Command(c.binary, "agent", "--config", envFile)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	// The agent must not outlive the benchmark, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start agent: %w", err)
	}
	a := &agentProc{cmd: cmd, metrics: metrics, log: logf, logPath: logPath, exited: make(chan struct{})}
	go func() { a.waitErr = cmd.Wait(); close(a.exited) }()

	deadline := time.Now().Add(90 * time.Second)
	for !a.connected() {
		select {
		case <-a.exited:
			return nil, fmt.Errorf("agent exited during start (%v); its log:\n%s", a.waitErr, tail(logPath, 30))
		case <-ctx.Done():
			a.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			a.stop()
			return nil, fmt.Errorf("agent session not connected after 90s; its log:\n%s", tail(logPath, 30))
		}
	}
	return a, nil
}

func (a *agentProc) pid() int { return a.cmd.Process.Pid }

// connected reads the agent's own session gauge.
func (a *agentProc) connected() bool {
	resp, err := http.Get("http://" + a.metrics + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	bs, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(bs), "\ncapstan_agent_session_connected 1")
}

// alive fails once the agent has exited.
func (a *agentProc) alive() error {
	select {
	case <-a.exited:
		return fmt.Errorf("agent exited (%v); its log:\n%s", a.waitErr, tail(a.logPath, 30))
	default:
		return nil
	}
}

// stop ends the agent with SIGTERM (it leaves its containers), then SIGKILL.
func (a *agentProc) stop() {
	select {
	case <-a.exited:
	default:
		a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(15 * time.Second):
			a.cmd.Process.Kill()
			<-a.exited
		}
	}
	a.log.Close()
}

// procStatus is what /proc/<pid>/status and /proc/<pid>/stat say about a process.
type procStatus struct {
	rss, anon, file, hwm int64 // KiB
	threads              int
	cpuTicks             int64 // utime+stime
}

func readProc(pid int) (procStatus, error) {
	var s procStatus
	bs, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.Lines(string(bs)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			s.rss = n
		case "RssAnon":
			s.anon = n
		case "RssFile":
			s.file = n
		case "VmHWM":
			s.hwm = n
		case "Threads":
			s.threads = int(n)
		}
	}
	bs, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command name, which may hold spaces and parentheses.
	i := strings.LastIndexByte(string(bs), ')')
	f := strings.Fields(string(bs[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14 of stat(5)
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	s.cpuTicks = ut + st
	return s, nil
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func (a *agentProc) snapshot(phase string) (Footprint, error) {
	s, err := readProc(a.pid())
	if err != nil {
		return Footprint{}, err
	}
	return Footprint{Phase: phase, RSSMiB: mib(s.rss), AnonMiB: mib(s.anon), FileMiB: mib(s.file), HWMMiB: mib(s.hwm), Threads: s.threads}, nil
}

// footprint waits until the agent's RSS has held within 2% for -steady,
// records the largest reading of that interval, then measures CPU and RSS
// over -window.
func (b *bench) footprint(ctx context.Context, phase string, tasks int, goal float64) (Footprint, error) {
	const every = 250 * time.Millisecond
	fp := Footprint{Phase: phase, Tasks: tasks, Goal: goal}
	pid := b.agent.pid()
	need := int(b.o.steady/every) + 1
	var win []procStatus
	start := time.Now()
	for {
		if err := b.agent.alive(); err != nil {
			return fp, err
		}
		s, err := readProc(pid)
		if err != nil {
			return fp, err
		}
		win = append(win, s)
		if len(win) > need {
			win = win[1:]
		}
		if len(win) == need {
			lo, hi := win[0], win[0]
			for _, w := range win {
				if w.rss < lo.rss {
					lo = w
				}
				if w.rss > hi.rss {
					hi = w
				}
			}
			timedOut := time.Since(start) > b.o.steadyLimit
			if float64(hi.rss-lo.rss) <= 0.02*float64(hi.rss) || timedOut {
				fp.Steady = !timedOut
				fp.RSSMiB, fp.AnonMiB, fp.FileMiB, fp.HWMMiB, fp.Threads = mib(hi.rss), mib(hi.anon), mib(hi.file), mib(hi.hwm), hi.threads
				break
			}
		}
		if err := benchkit.Sleep(ctx, every); err != nil {
			return fp, err
		}
	}
	fp.WaitedS = time.Since(start).Seconds()

	first, err := readProc(pid)
	if err != nil {
		return fp, err
	}
	self0, t0 := processCPU(), time.Now()
	maxRSS := first.rss
	for time.Since(t0) < b.o.window {
		if err := benchkit.Sleep(ctx, every); err != nil {
			return fp, err
		}
		if err := b.agent.alive(); err != nil {
			return fp, err
		}
		s, err := readProc(pid)
		if err != nil {
			return fp, err
		}
		maxRSS = max(maxRSS, s.rss)
	}
	last, err := readProc(pid)
	if err != nil {
		return fp, err
	}
	elapsed := time.Since(t0).Seconds()
	fp.WindowS = elapsed
	fp.CPUSeconds = float64(last.cpuTicks-first.cpuTicks) / userHZ
	fp.CPUPercent = 100 * fp.CPUSeconds / elapsed
	fp.WindowMax = mib(max(maxRSS, last.rss))
	fp.ServerCPU = (processCPU() - self0).Seconds()
	if goal > 0 {
		met := fp.RSSMiB <= goal && fp.WindowMax <= goal
		fp.Met = &met
	}
	fmt.Fprintf(b.out, "  %s: RSS %.1f MiB (anon %.1f, file %.1f), CPU %.2fs over %.0fs\n",
		phase, fp.RSSMiB, fp.AnonMiB, fp.FileMiB, fp.CPUSeconds, elapsed)
	return fp, nil
}

// --- tasks through the API ---

// runTasks starts n tasks (up to 10 per RunTask, as ECS allows) and waits
// until all are RUNNING.
func (b *bench) runTasks(ctx context.Context, n int) ([]string, error) {
	var arns []string
	for left := n; left > 0; left -= 10 {
		out, err := b.ecs.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(b.cluster), TaskDefinition: aws.String(b.td), Count: aws.Int32(int32(min(10, left)))})
		if err != nil {
			return arns, fmt.Errorf("RunTask: %w", err)
		}
		if len(out.Failures) > 0 {
			return arns, fmt.Errorf("RunTask: %s: %s", aws.ToString(out.Failures[0].Arn), aws.ToString(out.Failures[0].Reason))
		}
		for _, t := range out.Tasks {
			arns = append(arns, aws.ToString(t.TaskArn))
		}
	}
	return arns, b.waitAll(ctx, arns, "RUNNING", 3*time.Minute)
}

// waitAll polls until every task reports status.
func (b *bench) waitAll(ctx context.Context, arns []string, status string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending := slices.Clone(arns)
	for len(pending) > 0 {
		if err := b.agent.alive(); err != nil {
			return err
		}
		var still []string
		for chunk := range slices.Chunk(pending, 100) {
			out, err := b.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(b.cluster), Tasks: chunk})
			if err != nil {
				return fmt.Errorf("wait for %s: %w", status, err)
			}
			for _, t := range out.Tasks {
				last := aws.ToString(t.LastStatus)
				switch {
				case last == status:
				case last == "STOPPED":
					return fmt.Errorf("task %s stopped while waiting for %s: %s", aws.ToString(t.TaskArn), status, stopReason(t))
				default:
					still = append(still, aws.ToString(t.TaskArn))
				}
			}
			if len(out.Failures) > 0 {
				return fmt.Errorf("wait for %s: %s: %s", status, aws.ToString(out.Failures[0].Arn), aws.ToString(out.Failures[0].Reason))
			}
		}
		pending = still
		if len(pending) > 0 {
			if err := benchkit.Sleep(ctx, 50*time.Millisecond); err != nil {
				return fmt.Errorf("%d tasks not %s after %s: %w", len(pending), status, timeout, err)
			}
		}
	}
	return nil
}

func stopReason(t types.Task) string {
	r := aws.ToString(t.StoppedReason)
	for _, c := range t.Containers {
		if c.Reason != nil {
			r += "; " + aws.ToString(c.Name) + ": " + aws.ToString(c.Reason)
		}
	}
	return r
}

// stopTasks stops the tasks, waits for STOPPED, and removes their
// containers at once rather than after the agent's cleanup wait.
func (b *bench) stopTasks(ctx context.Context, arns []string) error {
	for _, arn := range arns {
		if _, err := b.ecs.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(b.cluster), Task: aws.String(arn), Reason: aws.String("bench/agent")}); err != nil {
			return fmt.Errorf("StopTask: %w", err)
		}
	}
	if err := b.waitAll(ctx, arns, "STOPPED", 2*time.Minute); err != nil {
		return err
	}
	for _, arn := range arns {
		if err := b.removeLabeled(ctx, labelTaskArn+"="+arn); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) removeLabeled(ctx context.Context, label string) error {
	res, err := b.dc.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label)})
	if err != nil {
		return fmt.Errorf("list containers %s: %w", label, err)
	}
	for _, c := range res.Items {
		if _, err := b.dc.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !isNotFound(err) {
			return fmt.Errorf("remove container %s: %w", c.ID, err)
		}
	}
	return nil
}

// removeAll removes every container of the cluster, task or raw, whatever
// its state.
func (b *bench) removeAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if b.agent != nil {
		b.agent.stop() // first, so it does not restart or report what goes
	}
	if err := b.removeLabeled(ctx, labelCluster+"="+b.cluster); err != nil {
		fmt.Fprintln(os.Stderr, "bench/agent: cleanup:", err)
	}
}

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }

// --- latency ---

func (b *bench) latency(ctx context.Context) (*Latency, error) {
	lat := &Latency{Samples: b.o.n, Warmup: b.o.warmup, PollMs: benchkit.Ms(b.o.poll), Goal: goalRatio}
	var capstan, raw []Sample
	var describe []time.Duration
	total := b.o.warmup + b.o.n
	fmt.Fprintf(b.out, "latency: %d warm-up + %d measured pairs, alternating which path goes first\n", b.o.warmup, b.o.n)
	dials0 := dials.Load()
	for i := range total {
		measured := i >= b.o.warmup
		if i == b.o.warmup {
			dials0 = dials.Load()
		}
		capFirst := i%2 == 0
		var cs, rs Sample
		var calls []time.Duration
		var err error
		for _, path := range []bool{capFirst, !capFirst} {
			if path {
				cs, calls, err = b.capstanSample(ctx)
				cs.First = capFirst
			} else {
				rs, err = b.rawSample(ctx)
				rs.First = !capFirst
			}
			if err != nil {
				return nil, err
			}
			if err := benchkit.Sleep(ctx, b.o.gap); err != nil {
				return nil, err
			}
		}
		tag := "warm-up"
		if measured {
			tag = fmt.Sprintf("%d/%d", i-b.o.warmup+1, b.o.n)
			cs.Index, rs.Index = i-b.o.warmup, i-b.o.warmup
			capstan, raw = append(capstan, cs), append(raw, rs)
			describe = append(describe, calls...)
		}
		fmt.Fprintf(b.out, "  %-7s capstan %7.1f ms (%d polls)   docker %6.1f ms\n", tag, cs.Total, cs.Polls, rs.Total)
	}
	lat.NewConns = dials.Load() - dials0
	lat.Runs = append(capstan, raw...)
	lat.Capstan = dist(totals(capstan, func(s Sample) float64 { return s.Total }))
	lat.Docker = dist(totals(raw, func(s Sample) float64 { return s.Total }))
	if lat.Docker.P50 > 0 {
		lat.Ratio = lat.Capstan.P50 / lat.Docker.P50
	}
	lat.OverheadP50 = lat.Capstan.P50 - lat.Docker.P50
	lat.Met = lat.Ratio <= goalRatio
	lat.CapstanStages = stages(capstan)
	lat.CapstanStages["RunTask call"] = dist(totals(capstan, func(s Sample) float64 { return s.Call }))
	lat.DockerStages = stages(raw)
	lat.DockerStages["create call"] = dist(totals(raw, func(s Sample) float64 { return s.Call }))
	lat.DockerStages["start call"] = dist(totals(raw, func(s Sample) float64 { return s.StartCall }))
	d := make([]float64, len(describe))
	for i, x := range describe {
		d[i] = benchkit.Ms(x)
	}
	lat.DescribeCall = dist(d)
	return lat, nil
}

// Stage names, in the order the table prints them.
const (
	stageDispatch = "sent → created"
	stageEngine   = "created → started"
	stageReport   = "started → seen"
)

func stages(ss []Sample) map[string]Dist {
	return map[string]Dist{
		stageDispatch: dist(totals(ss, func(s Sample) float64 { return s.Created })),
		stageEngine:   dist(totals(ss, func(s Sample) float64 { return s.Started - s.Created })),
		stageReport:   dist(totals(ss, func(s Sample) float64 { return s.Total - s.Started })),
	}
}

func totals(ss []Sample, f func(Sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// capstanSample runs one task through the API and times it until a
// DescribeTasks poll sees RUNNING; then stops it and removes its container.
func (b *bench) capstanSample(ctx context.Context) (Sample, []time.Duration, error) {
	s := Sample{Path: "capstan"}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	t0 := time.Now()
	out, err := b.ecs.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(b.cluster), TaskDefinition: aws.String(b.td)})
	if err != nil {
		return s, nil, fmt.Errorf("RunTask: %w", err)
	}
	s.Call = benchkit.Ms(time.Since(t0))
	if len(out.Tasks) != 1 {
		return s, nil, fmt.Errorf("RunTask: no task, failures %+v", out.Failures)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	var calls []time.Duration
	var task types.Task
	for {
		c0 := time.Now()
		d, err := b.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(b.cluster), Tasks: []string{arn}})
		now := time.Now()
		calls = append(calls, now.Sub(c0))
		s.Polls++
		if err != nil {
			return s, calls, fmt.Errorf("DescribeTasks: %w", err)
		}
		if len(d.Tasks) != 1 {
			return s, calls, fmt.Errorf("DescribeTasks %s: %+v", arn, d.Failures)
		}
		task = d.Tasks[0]
		if st := aws.ToString(task.LastStatus); st == "RUNNING" {
			s.Total = benchkit.Ms(now.Sub(t0))
			break
		} else if st == "STOPPED" {
			return s, calls, fmt.Errorf("task %s stopped before RUNNING: %s", arn, stopReason(task))
		}
		if err := b.agent.alive(); err != nil {
			return s, calls, err
		}
		if err := benchkit.Sleep(ctx, b.o.poll); err != nil {
			return s, calls, fmt.Errorf("task %s not RUNNING after %s: %w", arn, callTimeout, err)
		}
	}
	if len(task.Containers) == 1 {
		if id := aws.ToString(task.Containers[0].RuntimeId); id != "" {
			if err := b.engineTimes(ctx, id, t0, &s); err != nil {
				return s, calls, err
			}
		}
	}
	return s, calls, b.stopTasks(ctx, []string{arn})
}

// rawSample creates and starts the same container on the engine directly.
func (b *bench) rawSample(ctx context.Context) (Sample, error) {
	s := Sample{Path: "docker"}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	opts := client.ContainerCreateOptions{
		Config: &container.Config{
			Image:  b.image,
			Cmd:    command,
			Labels: map[string]string{labelCluster: b.cluster, labelRaw: "raw"},
		},
		// The resources the agent sets for this task definition, so the
		// engine does the same work on both paths.
		HostConfig: &container.HostConfig{Resources: container.Resources{Memory: taskMemoryMiB << 20, CPUShares: b.o.rawShares}},
	}
	t0 := time.Now()
	res, err := b.dc.ContainerCreate(ctx, opts)
	if err != nil {
		return s, fmt.Errorf("docker create: %w", err)
	}
	t1 := time.Now()
	_, err = b.dc.ContainerStart(ctx, res.ID, client.ContainerStartOptions{})
	t2 := time.Now()
	s.Call, s.StartCall, s.Total = benchkit.Ms(t1.Sub(t0)), benchkit.Ms(t2.Sub(t1)), benchkit.Ms(t2.Sub(t0))
	if err == nil {
		err = b.engineTimes(ctx, res.ID, t0, &s)
	}
	if _, rerr := b.dc.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true}); rerr != nil && err == nil {
		err = fmt.Errorf("docker rm: %w", rerr)
	}
	if err != nil {
		return s, fmt.Errorf("raw sample: %w", err)
	}
	return s, nil
}

// engineTimes places the engine's Created and StartedAt timestamps of a
// container relative to t0 (the engine shares this machine's clock).
func (b *bench) engineTimes(ctx context.Context, id string, t0 time.Time, s *Sample) error {
	res, err := b.dc.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("inspect %s: %w", id, err)
	}
	created, err := time.Parse(time.RFC3339Nano, res.Container.Created)
	if err != nil {
		return fmt.Errorf("inspect %s: created: %w", id, err)
	}
	if res.Container.State == nil {
		return fmt.Errorf("inspect %s: no state", id)
	}
	started, err := time.Parse(time.RFC3339Nano, res.Container.State.StartedAt)
	if err != nil {
		return fmt.Errorf("inspect %s: startedAt: %w", id, err)
	}
	s.Created, s.Started = benchkit.Ms(created.Sub(t0)), benchkit.Ms(started.Sub(t0))
	return nil
}

// --- report ---

func dist(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Dist{N: len(s), Min: s[0], P50: benchkit.Pct(s, 0.5), P90: benchkit.Pct(s, 0.9), Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

func notes(rep *Report) []string {
	n := []string{
		"The server runs in this process, so its CPU use competes with the agent and the engine on the same machine; the agent is a separate process whose /proc figures are its own.",
		"RSS counts file-backed pages of the agent's binary (column file) as well as its own memory (anon).",
	}
	if rep.Latency != nil {
		n = append(n,
			"The Capstan path includes the API call, placement, the etcd write, the push over the agent's session, the agent persisting and acknowledging, image inspection (prefer-cached), create and start on the engine, the agent's state report (batched), its etcd write, and the client's next DescribeTasks poll; the docker path is only the two engine calls.",
			fmt.Sprintf("Raw containers get the agent's resource settings for this task (memory %d MiB, CPU shares %d).", taskMemoryMiB, rep.RawShares),
			"Percentiles are nearest-rank; with n samples, p90 and max rest on few observations. Stage medians are taken separately and need not add up to the total's median.")
	}
	if rep.Machine.Containers > 0 {
		n = append(n, fmt.Sprintf("The engine held %d other containers when the run started; other work on the engine adds noise to both paths alike.", rep.Machine.Containers))
	}
	return n
}

func printTable(w io.Writer, rep *Report) {
	m := rep.Machine
	fmt.Fprintf(w, "%s/%s, NumCPU=%d, %s, %s, %d MiB; Docker %s (API %s, %s, cgroup %s/%s); load average %s → %s\n",
		m.GOOS, m.GOARCH, m.NumCPU, m.GoVersion, m.CPUModel, m.MemTotalMiB, m.DockerVersion, m.DockerAPI,
		m.StorageDriver, m.CgroupDriver, m.CgroupVersion, m.LoadAvgStart, m.LoadAvgEnd)
	fmt.Fprintf(w, "agent: %s (%.1f MiB binary), connected %.2fs after exec", rep.Agent.Binary, float64(rep.Agent.BinaryBytes)/(1<<20), rep.Agent.StartSecs)
	if len(rep.Agent.ExtraEnv) > 0 {
		fmt.Fprintf(w, ", extra env %s", strings.Join(rep.Agent.ExtraEnv, " "))
	}
	fmt.Fprintln(w)

	if l := rep.Latency; l != nil {
		fmt.Fprintf(w, "\nstart latency, %s %q, %d MiB; %d samples per path (+%d warm-up), interleaved; DescribeTasks polled every %.0f ms\n\n",
			rep.Image, strings.Join(rep.Command, " "), rep.MemoryMiB, l.Samples, l.Warmup, l.PollMs)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "path\tstage\tp50 ms\tp90 ms\tmax ms\tmin ms\t")
		row := func(path, stage string, d Dist) {
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t\n", path, stage, d.P50, d.P90, d.Max, d.Min)
		}
		row("capstan RunTask→RUNNING", "total", l.Capstan)
		row("", "RunTask call", l.CapstanStages["RunTask call"])
		row("", stageDispatch, l.CapstanStages[stageDispatch])
		row("", stageEngine, l.CapstanStages[stageEngine])
		row("", stageReport, l.CapstanStages[stageReport])
		row("docker create+start", "total", l.Docker)
		row("", "create call", l.DockerStages["create call"])
		row("", "start call", l.DockerStages["start call"])
		row("", stageDispatch, l.DockerStages[stageDispatch])
		row("", stageEngine, l.DockerStages[stageEngine])
		row("", "started → returned", l.DockerStages[stageReport])
		row("DescribeTasks call", "", l.DescribeCall)
		tw.Flush()
		fmt.Fprintf(w, "\nratio of medians %.2f (goal ≤ %.1f): %s; p50 overhead %+.1f ms; %d new client connections while measuring\n",
			l.Ratio, l.Goal, verdict(l.Met), l.OverheadP50, l.NewConns)
		fmt.Fprintln(w, "(sent/created/started are the engine's own timestamps of the container)")
	}

	fmt.Fprintln(w, "\nagent process")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tRSS MiB\tanon\tfile\tHWM\tthreads\twindow s\tCPU s\tCPU %\tRSS max\tserver CPU s\tgoal\t")
	for _, f := range rep.Footprints {
		goal := ""
		if f.Met != nil {
			goal = fmt.Sprintf("≤ %.0f MiB %s", f.Goal, verdict(*f.Met))
		}
		steady := ""
		if !f.Steady && f.WindowS > 0 {
			steady = " (not steady)"
		}
		if f.WindowS > 0 {
			fmt.Fprintf(tw, "%s%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%.0f\t%.2f\t%.2f\t%.1f\t%.2f\t%s\t\n",
				f.Phase, steady, f.RSSMiB, f.AnonMiB, f.FileMiB, f.HWMMiB, f.Threads, f.WindowS, f.CPUSeconds, f.CPUPercent, f.WindowMax, f.ServerCPU, goal)
		} else {
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\t\t\t\t\t%s\t\n",
				f.Phase, f.RSSMiB, f.AnonMiB, f.FileMiB, f.HWMMiB, f.Threads, goal)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func verdict(met bool) string {
	if met {
		return "MET"
	}
	return "NOT MET"
}

// --- machine ---

func machine(ctx context.Context, dc *client.Client) (Machine, error) {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion: runtime.Version(), LoadAvgStart: benchkit.LoadAvg()}
	m.CPUModel = benchkit.CPUModel()
	if bs, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(bs)) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kib, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemTotalMiB = kib >> 10
			}
		}
	}
	m.Revision = benchkit.VCSRevision()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := dc.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return m, fmt.Errorf("docker version: %w", err)
	}
	m.DockerVersion, m.DockerAPI = v.Version, v.APIVersion
	info, err := dc.Info(ctx, client.InfoOptions{})
	if err != nil {
		return m, fmt.Errorf("docker info: %w", err)
	}
	m.StorageDriver, m.CgroupDriver, m.CgroupVersion = info.Info.Driver, info.Info.CgroupDriver, info.Info.CgroupVersion
	m.Kernel = info.Info.KernelVersion
	m.Containers = info.Info.Containers
	return m, nil
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// --- small things ---

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail is the last n lines of a file, for error messages.
func tail(path string, n int) string {
	bs, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(bs), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
