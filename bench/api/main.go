// Command api measures client-observed latency and throughput of the daemon
// API under concurrent load, using real aws-sdk-go-v2 ECS clients over HTTP.
//
//	go run ./bench/api [-clients 1,16,128] [-duration 10s] [-daemons 200] [-json out.json]
//
// By default it starts a server in-process (embedded etcd in a temporary
// directory); -endpoint points it at a running server instead.
// -compare-user runs every scenario both as the root and as an IAM user
// whose policy has ten statements, and reports the user/root ratios.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/server"
)

// Operation names as they appear in the report.
const (
	opDescribe = "DescribeDaemon"
	opList     = "ListDaemons"
	opCreate   = "CreateDaemon"
	opDelete   = "DeleteDaemon"
	opPair     = "CreateDaemon+DeleteDaemon"
)

// The goal the report checks reads against.
const (
	goalClients = 128
	goalP99     = 20 * time.Millisecond
)

// callTimeout bounds one request so a stuck server fails the run instead of
// hanging it.
const callTimeout = 30 * time.Second

type options struct {
	clients    []int
	duration   time.Duration
	warmup     time.Duration
	daemons    int
	jsonOut    string
	cpuProfile string
	mutexProf  string
	endpoint   string
	accessKey  string
	secretKey  string
	region     string
	dataDir    string
	settle     time.Duration
	rawBody    bool
	ops        []string
	// compareUser runs every scenario as the root and as an IAM user, in
	// rounds of alternating phases (user.go).
	compareUser bool
	compareMode string
	rounds      int
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/api:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/api:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	clients := fs.String("clients", "1,16,128", "comma-separated concurrent client counts")
	ops := fs.String("ops", "describe,list,churn", "scenarios to run, in this order: describe, list, churn (create+delete pairs)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time per scenario")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each scenario")
	fs.IntVar(&o.daemons, "daemons", 200, "daemons to create before measuring")
	fs.StringVar(&o.jsonOut, "json", "", "write the report as JSON to this file")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured scenarios (client and in-process server)")
	fs.StringVar(&o.mutexProf, "mutexprofile", "", "write a mutex contention profile of the measured scenarios")
	fs.StringVar(&o.endpoint, "endpoint", "", "URL of a running server (default: start one in-process)")
	fs.StringVar(&o.accessKey, "access-key", os.Getenv("AWS_ACCESS_KEY_ID"), "access key ID for -endpoint")
	fs.StringVar(&o.secretKey, "secret-key", os.Getenv("AWS_SECRET_ACCESS_KEY"), "secret access key for -endpoint")
	fs.StringVar(&o.region, "region", "us-east-1", "region to sign requests for")
	fs.StringVar(&o.dataDir, "data-dir", "", "parent directory for the in-process server's data (default: system temp dir)")
	fs.DurationVar(&o.settle, "settle-timeout", 2*time.Minute, "how long to wait for the controller to finish deletes between scenarios")
	fs.BoolVar(&o.rawBody, "raw-sdk-body", false, "pass the SDK's request body to net/http unchanged (shows a client-side connection race; see inMemoryBody)")
	fs.BoolVar(&o.compareUser, "compare-user", false, "also create an IAM user with a ten-statement policy and run each scenario signed as the root and as the user, in alternating phases; prints both and the user/root ratios")
	fs.StringVar(&o.compareMode, "compare-mode", "mixed", "with -compare-user: mixed (each client alternates root and user request by request) or phases (all clients root, then all user, alternating)")
	fs.IntVar(&o.rounds, "compare-rounds", 3, "with -compare-user: rounds per scenario and client count, each one mixed phase or a pair of phases (root then user, user then root, ...) of -warmup + -duration")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, f := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return o, fmt.Errorf("-clients: %q is not a positive integer", f)
		}
		o.clients = append(o.clients, n)
	}
	for _, op := range strings.Split(*ops, ",") {
		op = strings.TrimSpace(op)
		if !slices.Contains([]string{"describe", "list", "churn"}, op) {
			return o, fmt.Errorf("-ops: unknown scenario %q (describe, list, churn)", op)
		}
		o.ops = append(o.ops, op)
	}
	switch {
	case o.duration <= 0:
		return o, errors.New("-duration must be positive")
	case o.warmup < 0:
		return o, errors.New("-warmup must not be negative")
	case o.daemons < 1:
		return o, errors.New("-daemons must be at least 1")
	case o.compareUser && o.rounds < 1:
		return o, errors.New("-compare-rounds must be at least 1")
	case o.compareMode != "mixed" && o.compareMode != "phases":
		return o, fmt.Errorf("-compare-mode: %q is not mixed or phases", o.compareMode)
	case o.endpoint != "" && (o.accessKey == "" || o.secretKey == ""):
		return o, errors.New("-endpoint needs -access-key and -secret-key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	}
	return o, nil
}

// target is the server under test and how to reach it.
type target struct {
	url, keyID, secret, region string
	inProcess                  bool
	close                      func()
}

func startTarget(ctx context.Context, o options) (*target, error) {
	if o.endpoint != "" {
		return &target{url: o.endpoint, keyID: o.accessKey, secret: o.secretKey, region: o.region, close: func() {}}, nil
	}
	dir, err := os.MkdirTemp(o.dataDir, "capstan-bench-")
	if err != nil {
		return nil, err
	}
	cfg := server.Config{
		Listen:      "127.0.0.1:0",
		DataDir:     dir,
		Region:      o.region,
		AccountID:   "123456789012",
		AdminKeyID:  "AKIDCAPSTANBENCH",
		AdminSecret: "capstan-bench-secret",
	}
	s, err := server.Start(ctx, cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start server: %w", err)
	}
	return &target{
		url: "http://" + s.Addr, keyID: cfg.AdminKeyID, secret: cfg.AdminSecret, region: cfg.Region, inProcess: true,
		close: func() { s.Close(); os.RemoveAll(dir) },
	}, nil
}

// newClients returns n ECS clients sharing one transport that keeps a
// connection per client alive. Retries are off so every latency and error
// is what one request saw.
func (t *target) newClients(n, maxConns int, rawBody bool) []*ecs.Client {
	return t.newClientsAs(n, maxConns, rawBody, t.keyID, t.secret)
}

// newClientsAs is newClients signing with another access key.
func (t *target) newClientsAs(n, maxConns int, rawBody bool, keyID, secret string) []*ecs.Client {
	var httpClient ecs.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns = maxConns * 2
		tr.MaxIdleConnsPerHost = maxConns * 2
		tr.MaxConnsPerHost = 0
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}
	})
	if !rawBody {
		httpClient = benchkit.InMemoryBody{Next: httpClient}
	}
	out := make([]*ecs.Client, n)
	for i := range out {
		out[i] = ecs.New(ecs.Options{
			Region:       t.region,
			BaseEndpoint: aws.String(t.url),
			Credentials:  credentials.NewStaticCredentialsProvider(keyID, secret, ""),
			HTTPClient:   httpClient,
			Retryer:      aws.NopRetryer{},
		})
	}
	return out
}

// dials counts TCP connections opened by the benchmark clients.
var dials atomic.Int64

// fixture is what the scenarios run against.
type fixture struct {
	cluster   string // ARN
	cp        string // ARN
	td        string // ARN
	daemons   []string
	runID     string
	setupTime time.Duration
}

func setup(ctx context.Context, c *ecs.Client, clients []*ecs.Client, n int) (*fixture, error) {
	start := time.Now()
	f := &fixture{runID: benchkit.RandomID(6)}
	cl, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("bench-" + f.runID)})
	if err != nil {
		return nil, fmt.Errorf("create cluster: %w", err)
	}
	f.cluster = aws.ToString(cl.Cluster.ClusterArn)
	cp, err := c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{
		Name:    aws.String("bench-mi-" + f.runID),
		Cluster: aws.String(f.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{
				Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration:  &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"subnet-local"}},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create capacity provider: %w", err)
	}
	f.cp = aws.ToString(cp.CapacityProvider.CapacityProviderArn)
	td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{
		Family: aws.String("bench-agent-" + f.runID),
		Cpu:    aws.String("256"),
		Memory: aws.String("128"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{
			Name:  aws.String("agent"),
			Image: aws.String("capstan/busybox:bench"),
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("register daemon task definition: %w", err)
	}
	f.td = aws.ToString(td.DaemonTaskDefinitionArn)

	// Create the daemons from a few clients at once.
	f.daemons = make([]string, n)
	deps := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for w := range min(16, len(clients), n) {
		wg.Go(func() {
			for i := range next {
				out, err := clients[w].CreateDaemon(ctx, f.createInput(fmt.Sprintf("d-%05d", i)))
				if err != nil {
					errs[i] = err
					continue
				}
				f.daemons[i], deps[i] = aws.ToString(out.DaemonArn), aws.ToString(out.DeploymentArn)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create daemons: %w", err)
	}
	// Let the controller finish the initial deployments so it is idle when
	// the first scenario starts.
	if err := waitDeployments(ctx, c, deps); err != nil {
		return nil, err
	}
	f.setupTime = time.Since(start)
	return f, nil
}

func (f *fixture) createInput(name string) *ecs.CreateDaemonInput {
	return &ecs.CreateDaemonInput{
		DaemonName:              aws.String(name),
		ClusterArn:              aws.String(f.cluster),
		DaemonTaskDefinitionArn: aws.String(f.td),
		CapacityProviderArns:    []string{f.cp},
	}
}

func waitDeployments(ctx context.Context, c *ecs.Client, arns []string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pending := slices.Clone(arns)
	for len(pending) > 0 {
		var still []string
		for chunk := range slices.Chunk(pending, 20) {
			out, err := c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: chunk})
			if err != nil {
				return fmt.Errorf("wait for deployments: %w", err)
			}
			for _, d := range out.DaemonDeployments {
				switch d.Status {
				case types.DaemonDeploymentStatusSuccessful, types.DaemonDeploymentStatusStopped,
					types.DaemonDeploymentStatusRollbackSuccessful, types.DaemonDeploymentStatusRollbackFailed:
				default:
					still = append(still, aws.ToString(d.DaemonDeploymentArn))
				}
			}
			if len(out.Failures) > 0 {
				return fmt.Errorf("wait for deployments: %s: %s", aws.ToString(out.Failures[0].Arn), aws.ToString(out.Failures[0].Reason))
			}
		}
		pending = still
		if len(pending) > 0 {
			if err := benchkit.Sleep(ctx, 100*time.Millisecond); err != nil {
				return fmt.Errorf("wait for %d deployments: %w", len(pending), err)
			}
		}
	}
	return nil
}

// countDaemons pages through the cluster's daemons.
func countDaemons(ctx context.Context, c *ecs.Client, cluster string) (int, error) {
	n := 0
	in := &ecs.ListDaemonsInput{ClusterArn: aws.String(cluster), MaxResults: aws.Int32(100)}
	for {
		out, err := c.ListDaemons(ctx, in)
		if err != nil {
			return 0, err
		}
		n += len(out.DaemonSummariesList)
		if aws.ToString(out.NextToken) == "" {
			return n, nil
		}
		in.NextToken = out.NextToken
	}
}

// settle waits until the deletes of a churn scenario have been carried out
// by the controller, so the next scenario starts against a quiet server.
func settle(ctx context.Context, c *ecs.Client, f *fixture, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		n, err := countDaemons(ctx, c, f.cluster)
		if err != nil {
			return time.Since(start), fmt.Errorf("settle: %w", err)
		}
		if n <= len(f.daemons) {
			return time.Since(start), nil
		}
		if err := benchkit.Sleep(ctx, 100*time.Millisecond); err != nil {
			return time.Since(start), fmt.Errorf("settle: %d daemons still listed, want %d: %w", n, len(f.daemons), err)
		}
	}
}

// series collects one operation's outcomes on one worker.
type series struct {
	lat      []time.Duration // successful requests only
	errs     map[string]int
	errExamp map[string]string
}

// recorder is one worker's measurements; samples that started before
// measureFrom are warm-up and dropped.
type recorder struct {
	measureFrom time.Time
	ops         map[string]*series
	prefix      string // put before op names (-compare-user's mixed mode)
}

func (r *recorder) add(op string, started time.Time, d time.Duration, err error) {
	if started.Before(r.measureFrom) {
		return
	}
	op = r.prefix + op
	s := r.ops[op]
	if s == nil {
		s = &series{errs: map[string]int{}, errExamp: map[string]string{}}
		r.ops[op] = s
	}
	if err != nil {
		k := errorKind(err)
		s.errs[k]++
		if _, ok := s.errExamp[k]; !ok {
			s.errExamp[k] = err.Error()
		}
		return
	}
	s.lat = append(s.lat, d)
}

func errorKind(err error) string {
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae):
		return ae.ErrorCode()
	case errors.Is(err, context.DeadlineExceeded):
		return "Timeout"
	default:
		return "Transport"
	}
}

// workload is one client's loop body: one iteration, recorded into r.
type workload func(ctx context.Context, worker, iter int, c *ecs.Client, r *recorder)

// Row is one line of the report.
type Row struct {
	Operation     string            `json:"operation"`
	Clients       int               `json:"clients"`
	Requests      int               `json:"requests"`
	Errors        int               `json:"errors"`
	ErrorKinds    map[string]int    `json:"errorKinds,omitempty"`
	ErrorExamples map[string]string `json:"errorExamples,omitempty"`
	Seconds       float64           `json:"seconds"`
	Throughput    float64           `json:"throughputPerSec"`
	P50           float64           `json:"p50Ms"`
	P90           float64           `json:"p90Ms"`
	P99           float64           `json:"p99Ms"`
	Max           float64           `json:"maxMs"`
	SettleSeconds float64           `json:"settleSeconds,omitempty"`
	// Principal is "root" or "user" with -compare-user, else empty.
	Principal string `json:"principal,omitempty"`
	// NewConns is TCP connections the clients opened while measuring (all
	// operations of the scenario); with keep-alive working it stays near 0.
	NewConns int64 `json:"newConns"`
	// ProcessCPU is CPU time this process (clients and in-process server)
	// used per second of the scenario; below GOMAXPROCS on a saturated run
	// means something else on the machine took the rest.
	ProcessCPU float64 `json:"processCpuCores"`
	// OtherCPU is the machine's busy CPU (from /proc/stat) not used by this
	// process: other work competing with the run, and the server itself
	// when -endpoint names one on this machine.
	OtherCPU float64 `json:"otherCpuCores"`
}

// runScenario runs len(clients) workers for warmup+duration and reports
// one row per operation recorded. Workers stop starting requests at the
// deadline; requests in flight then are finished and counted.
func runScenario(ctx context.Context, clients []*ecs.Client, warmup, duration time.Duration, w workload) ([]Row, error) {
	ph, err := measure(ctx, clients, warmup, duration, w)
	if err != nil {
		return nil, err
	}
	return summarize(len(clients), ph), nil
}

// phase is what one measured run of a scenario recorded, before
// percentiles: phases of the same kind are merged by summarize.
type phase struct {
	ops      map[string]*series
	order    []string
	elapsed  time.Duration
	newConns int64
	cpu      time.Duration // this process's CPU over elapsed
	other    time.Duration // the rest of the machine's
}

func measure(ctx context.Context, clients []*ecs.Client, warmup, duration time.Duration, w workload) (*phase, error) {
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)
	recs := make([]*recorder, len(clients))
	var dialsAtStart atomic.Int64
	dialsAtStart.Store(dials.Load())
	mark := time.AfterFunc(warmup, func() { dialsAtStart.Store(dials.Load()) })
	defer mark.Stop()
	var cpuAtStart, hostAtStart atomic.Int64
	cpuAtStart.Store(int64(processCPU()))
	hostAtStart.Store(int64(hostBusyCPU()))
	mark2 := time.AfterFunc(warmup, func() {
		cpuAtStart.Store(int64(processCPU()))
		hostAtStart.Store(int64(hostBusyCPU()))
	})
	defer mark2.Stop()
	var wg sync.WaitGroup
	for i, c := range clients {
		recs[i] = &recorder{measureFrom: measureFrom, ops: map[string]*series{}}
		wg.Go(func() {
			for iter := 0; ctx.Err() == nil && time.Now().Before(end); iter++ {
				w(ctx, i, iter, c, recs[i])
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ph := &phase{ops: map[string]*series{}, elapsed: time.Since(measureFrom), newConns: dials.Load() - dialsAtStart.Load()}
	ph.cpu = processCPU() - time.Duration(cpuAtStart.Load())
	ph.other = max(0, hostBusyCPU()-time.Duration(hostAtStart.Load())-ph.cpu)
	for _, r := range recs {
		ph.add(r.ops)
	}
	return ph, nil
}

// add merges one worker's (or one phase's) series into ph.
func (ph *phase) add(ops map[string]*series) {
	for op, s := range ops {
		m := ph.ops[op]
		if m == nil {
			m = &series{errs: map[string]int{}, errExamp: map[string]string{}}
			ph.ops[op] = m
			ph.order = append(ph.order, op)
		}
		m.lat = append(m.lat, s.lat...)
		for k, n := range s.errs {
			m.errs[k] += n
			if _, ok := m.errExamp[k]; !ok {
				m.errExamp[k] = s.errExamp[k]
			}
		}
	}
}

// summarize reports the phases together, as one run of their summed
// length: one row per operation.
func summarize(clients int, phases ...*phase) []Row {
	all := &phase{ops: map[string]*series{}}
	for _, ph := range phases {
		all.add(ph.ops)
		all.elapsed += ph.elapsed
		all.newConns += ph.newConns
		all.cpu += ph.cpu
		all.other += ph.other
	}
	secs := all.elapsed.Seconds()
	sort.Slice(all.order, func(i, j int) bool { return opRank(all.order[i]) < opRank(all.order[j]) })
	var rows []Row
	for _, op := range all.order {
		s := all.ops[op]
		slices.Sort(s.lat)
		row := Row{Operation: op, Clients: clients, Seconds: secs, NewConns: all.newConns,
			ProcessCPU: all.cpu.Seconds() / secs, OtherCPU: all.other.Seconds() / secs}
		for _, n := range s.errs {
			row.Errors += n
		}
		if row.Errors > 0 {
			row.ErrorKinds, row.ErrorExamples = s.errs, s.errExamp
		}
		row.Requests = len(s.lat) + row.Errors
		row.Throughput = float64(row.Requests) / secs
		row.P50, row.P90, row.P99 = benchkit.Ms(benchkit.Pct(s.lat, 0.50)), benchkit.Ms(benchkit.Pct(s.lat, 0.90)), benchkit.Ms(benchkit.Pct(s.lat, 0.99))
		if len(s.lat) > 0 {
			row.Max = benchkit.Ms(s.lat[len(s.lat)-1])
		}
		rows = append(rows, row)
	}
	return rows
}

func opRank(op string) int {
	return slices.Index([]string{opDescribe, opList, opPair, opCreate, opDelete}, op)
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostBusyCPU is the machine's non-idle CPU time so far (Linux; 0 elsewhere).
func hostBusyCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 && i < 8 { // skip idle and iowait; guest is inside user
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / 100 // USER_HZ
}

func describeWorkload(f *fixture) workload {
	return func(ctx context.Context, _, _ int, c *ecs.Client, r *recorder) {
		arn := f.daemons[mrand.IntN(len(f.daemons))]
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		t0 := time.Now()
		out, err := c.DescribeDaemon(cctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
		d := time.Since(t0)
		cancel()
		if err == nil && (out.Daemon == nil || aws.ToString(out.Daemon.DaemonArn) != arn) {
			err = fmt.Errorf("DescribeDaemon %s returned another daemon", arn)
		}
		r.add(opDescribe, t0, d, err)
	}
}

func listWorkload(f *fixture) workload {
	want := min(100, len(f.daemons))
	return func(ctx context.Context, _, _ int, c *ecs.Client, r *recorder) {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		t0 := time.Now()
		out, err := c.ListDaemons(cctx, &ecs.ListDaemonsInput{ClusterArn: aws.String(f.cluster), MaxResults: aws.Int32(100)})
		d := time.Since(t0)
		cancel()
		if err == nil && len(out.DaemonSummariesList) != want {
			err = fmt.Errorf("ListDaemons returned %d daemons, want %d", len(out.DaemonSummariesList), want)
		}
		r.add(opList, t0, d, err)
	}
}

// churnWorkload creates a uniquely named daemon and deletes it at once.
func churnWorkload(f *fixture, tag string) workload {
	return func(ctx context.Context, worker, iter int, c *ecs.Client, r *recorder) {
		name := fmt.Sprintf("churn-%s-w%d-%d", tag, worker, iter)
		cctx, cancel := context.WithTimeout(ctx, 2*callTimeout)
		defer cancel()
		t0 := time.Now()
		out, err := c.CreateDaemon(cctx, f.createInput(name))
		t1 := time.Now()
		r.add(opCreate, t0, t1.Sub(t0), err)
		if err != nil {
			r.add(opPair, t0, t1.Sub(t0), err)
			return
		}
		_, err = c.DeleteDaemon(cctx, &ecs.DeleteDaemonInput{DaemonArn: out.DaemonArn})
		t2 := time.Now()
		// Dropped together with its pair when the pair began in warm-up.
		if !t0.Before(r.measureFrom) {
			r.add(opDelete, t1, t2.Sub(t1), err)
		}
		r.add(opPair, t0, t2.Sub(t0), err)
	}
}

// Machine describes where the numbers were taken.
type Machine struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"numCPU"`
	GoVersion  string `json:"goVersion"`
	CPUModel   string `json:"cpuModel,omitempty"`
	Revision   string `json:"vcsRevision,omitempty"`
	// LoadAvg is /proc/loadavg when the run started and ended: other work
	// on the machine shows up here.
	LoadAvgStart string `json:"loadAvgStart,omitempty"`
	LoadAvgEnd   string `json:"loadAvgEnd,omitempty"`
}

// GoalCheck is the read-latency target evaluated for one read operation.
type GoalCheck struct {
	Operation string   `json:"operation"`
	Clients   int      `json:"clients"`
	P99Ms     *float64 `json:"p99Ms"`
	LimitMs   float64  `json:"limitMs"`
	Met       *bool    `json:"met"` // null when 128 clients were not run
	Errors    int      `json:"errors"`
}

// Report is the JSON output.
type Report struct {
	Started         time.Time   `json:"started"`
	Machine         Machine     `json:"machine"`
	Endpoint        string      `json:"endpoint"`
	InProcess       bool        `json:"inProcessServer"`
	Daemons         int         `json:"daemons"`
	Clients         []int       `json:"clients"`
	Ops             []string    `json:"ops"`
	RawSDKBody      bool        `json:"rawSdkBody"`
	DurationSeconds float64     `json:"durationSeconds"`
	WarmupSeconds   float64     `json:"warmupSeconds"`
	SetupSeconds    float64     `json:"setupSeconds"`
	Rows            []Row       `json:"rows"`
	Goal            string      `json:"goal"`
	GoalChecks      []GoalCheck `json:"goalChecks"`
	// Compare is set with -compare-user.
	Compare *Comparison `json:"compareUser,omitempty"`
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	rep := &Report{Started: time.Now().UTC(), Machine: machine(), Daemons: o.daemons, Clients: o.clients, Ops: o.ops, RawSDKBody: o.rawBody,
		DurationSeconds: o.duration.Seconds(), WarmupSeconds: o.warmup.Seconds(),
		Goal: fmt.Sprintf("read p99 ≤ %d ms at %d clients", goalP99.Milliseconds(), goalClients)}

	t, err := startTarget(ctx, o)
	if err != nil {
		return err
	}
	defer t.close()
	rep.Endpoint, rep.InProcess = t.url, t.inProcess
	maxClients := slices.Max(o.clients)
	clients := t.newClients(maxClients, maxClients, o.rawBody)
	admin := t.newClients(1, 1, o.rawBody)[0]

	fmt.Fprintf(stdout, "server %s (in-process: %v); creating %d daemons...\n", t.url, t.inProcess, o.daemons)
	f, err := setup(ctx, admin, clients, o.daemons)
	if err != nil {
		return err
	}
	rep.SetupSeconds = f.setupTime.Seconds()
	fmt.Fprintf(stdout, "setup done in %.1fs (cluster %s)\n", f.setupTime.Seconds(), f.cluster)
	if !t.inProcess {
		defer cleanup(context.WithoutCancel(ctx), clients, f, stdout)
	}

	if o.cpuProfile != "" {
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.mutexProf != "" {
		runtime.SetMutexProfileFraction(5)
		defer writeProfile("mutex", o.mutexProf)
	}

	if o.compareUser {
		if err := runCompare(ctx, o, t, f, admin, clients, rep, stdout); err != nil {
			return err
		}
	}
	// Scenarios run in -ops order, each over all client counts, so the
	// reads (by default) see a store not yet grown by churn.
	for _, op := range o.ops {
		if o.compareUser {
			break // runCompare ran them
		}
		for _, n := range o.clients {
			var name string
			var w workload
			switch op {
			case "describe":
				name, w = opDescribe, describeWorkload(f)
			case "list":
				name, w = opList, listWorkload(f)
			case "churn":
				name, w = opPair, churnWorkload(f, fmt.Sprintf("%s-c%d", f.runID, n))
			}
			fmt.Fprintf(stdout, "%-26s clients=%-4d ", name, n)
			rows, err := runScenario(ctx, clients[:n], o.warmup, o.duration, w)
			if err != nil {
				return err
			}
			if op == "churn" {
				d, err := settle(ctx, admin, f, o.settle)
				if err != nil {
					return err
				}
				for i := range rows {
					rows[i].SettleSeconds = d.Seconds()
				}
			}
			for _, r := range rows {
				fmt.Fprintf(stdout, "[%s %d req %.0f/s p99 %.1fms err %d] ", r.Operation, r.Requests, r.Throughput, r.P99, r.Errors)
			}
			fmt.Fprintln(stdout)
			rep.Rows = append(rep.Rows, rows...)
		}
	}
	rep.GoalChecks = goalChecks(rep.Rows)
	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()

	fmt.Fprintln(stdout)
	printTable(stdout, rep)
	if rep.Compare != nil {
		printComparison(stdout, rep)
	}
	if o.jsonOut != "" {
		if err := benchkit.WriteJSON(o.jsonOut, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", o.jsonOut)
	}
	return nil
}

func goalChecks(rows []Row) []GoalCheck {
	var out []GoalCheck
	for _, op := range []string{opDescribe, opList} {
		g := GoalCheck{Operation: op, Clients: goalClients, LimitMs: benchkit.Ms(goalP99)}
		for _, r := range rows {
			if r.Operation == op && r.Clients == goalClients && (r.Principal == "" || r.Principal == principalRoot) {
				p99 := r.P99
				// Errors count against the goal: a run that failed requests
				// has not shown the latency it claims.
				met := r.P99 <= benchkit.Ms(goalP99) && r.Errors == 0 && r.Requests > 0
				g.P99Ms, g.Met, g.Errors = &p99, &met, r.Errors
			}
		}
		out = append(out, g)
	}
	return out
}

func printTable(w io.Writer, rep *Report) {
	m := rep.Machine
	fmt.Fprintf(w, "%s/%s, GOMAXPROCS=%d, NumCPU=%d, %s, %s; load average %s → %s; %d daemons; %gs per scenario after %gs warm-up\n\n",
		m.GOOS, m.GOARCH, m.GOMAXPROCS, m.NumCPU, m.GoVersion, m.CPUModel, m.LoadAvgStart, m.LoadAvgEnd, rep.Daemons, rep.DurationSeconds, rep.WarmupSeconds)
	if rep.Compare == nil {
		printRows(w, rep.Rows)
	} else {
		for _, who := range []string{principalRoot, principalUser} {
			fmt.Fprintf(w, "signed as the %s:\n", who)
			printRows(w, slices.DeleteFunc(slices.Clone(rep.Rows), func(r Row) bool { return r.Principal != who }))
			fmt.Fprintln(w)
		}
	}
	var errLines []string
	for _, r := range rep.Rows {
		for k, n := range r.ErrorKinds {
			errLines = append(errLines, fmt.Sprintf("  %s clients=%d: %d × %s (e.g. %s)", r.Operation, r.Clients, n, k, r.ErrorExamples[k]))
		}
	}
	if len(errLines) > 0 {
		slices.Sort(errLines)
		fmt.Fprintln(w, "\nerrors:")
		for _, l := range errLines {
			fmt.Fprintln(w, l)
		}
	}
	fmt.Fprintf(w, "\ngoal: %s\n", rep.Goal)
	for _, g := range rep.GoalChecks {
		switch {
		case g.Met == nil:
			fmt.Fprintf(w, "  %-15s not evaluated (%d clients not run)\n", g.Operation, g.Clients)
		default:
			verdict := "MET"
			if !*g.Met {
				verdict = "NOT MET"
			}
			fmt.Fprintf(w, "  %-15s p99 %.2f ms, %d errors: %s\n", g.Operation, *g.P99Ms, g.Errors, verdict)
		}
	}
}

func printRows(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tclients\trequests\treq/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\terrors\tnew conns\tcpu\tother cpu\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%.2f\t%.2f\t\n",
			r.Operation, r.Clients, r.Requests, r.Throughput, r.P50, r.P90, r.P99, r.Max, r.Errors, r.NewConns, r.ProcessCPU, r.OtherCPU)
	}
	tw.Flush()
}

// cleanup deletes what the run created on an external server; the
// deletes settle in the background.
func cleanup(ctx context.Context, clients []*ecs.Client, f *fixture, stdout io.Writer) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	next := make(chan string)
	for w := range min(16, len(clients)) {
		wg.Go(func() {
			for arn := range next {
				if _, err := clients[w].DeleteDaemon(ctx, &ecs.DeleteDaemonInput{DaemonArn: aws.String(arn)}); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	for _, arn := range f.daemons {
		next <- arn
	}
	close(next)
	wg.Wait()
	fmt.Fprintf(stdout, "cleanup: deleted %d daemons of %s (%d failed)\n", len(f.daemons)-failed, f.cluster, failed)
}

func writeProfile(name, path string) {
	pf, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/api:", err)
		return
	}
	defer pf.Close()
	if err := pprof.Lookup(name).WriteTo(pf, 0); err != nil {
		fmt.Fprintln(os.Stderr, "bench/api:", err)
	}
}

func machine() Machine {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU: runtime.NumCPU(), GoVersion: runtime.Version()}
	m.LoadAvgStart = benchkit.LoadAvg()
	m.CPUModel, m.Revision = benchkit.CPUModel(), benchkit.VCSRevision()
	return m
}
