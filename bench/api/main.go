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
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

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
