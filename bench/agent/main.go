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
//  3. latency: -n rounds of samples, interleaved and rotating which path
//     goes first so all share the machine's conditions. The Capstan sample
//     is RunTask until a client polling DescribeTasks every -poll sees
//     RUNNING; the raw sample is ContainerCreate + ContainerStart on the
//     moby client until Start returns, on the engine's default bridge
//     (where the agent runs bridge-mode tasks) and, when the instance has
//     one, on the agent's instance network (where they go with
//     CAPSTAN_TASK_BRIDGE=instance). Everything is stopped and removed
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
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// Labels the engine puts on task containers (internal/agent/engine).
const (
	labelCluster  = "com.capstan.cluster"
	labelInstance = "com.capstan.instance"
	labelTaskArn  = "com.capstan.task-arn"
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
