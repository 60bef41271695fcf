package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/memlimit"
	"github.com/capstanhq/capstan/internal/provision"
	simprov "github.com/capstanhq/capstan/internal/provision/sim"
	"github.com/capstanhq/capstan/internal/server"
)

// Names in the run's cluster.
const (
	clusterName = "scale"
	cpName      = "hollow"
	daemonName  = "node-agent"
	serviceName = "web"
	// maxServiceTasks is the most a service may want (desiredCount, as in
	// ECS); 2N tasks are split over as many services as that takes.
	maxServiceTasks = 5000
	instanceCPU     = 2048
	instanceMem     = 4096
)

// harness is a server with N hollow instances and the client that drives it.
type harness struct {
	o     options
	log   io.Writer
	srv   *server.Server
	cfg   server.Config
	c     *ecs.Client
	host  host
	cpArn string
	// mem samples the server's memory for its peaks.
	mem *memWatch
	// prov is the server's provisioner in a -provisioned run.
	prov *hostProvisioner
	// appCPU and appMem size a service task.
	appCPU, appMem int32

	mu      sync.Mutex
	handles []string          // launched hollow instances, in order
	byArn   map[string]string // container instance ARN → handle
	next    int
}

// start starts the server (embedded etcd unless -etcd-endpoints) and the
// hollow host.
func start(ctx context.Context, o options, logw io.Writer) (*harness, error) {
	h := &harness{o: o, log: logw, byArn: map[string]string{}, appCPU: 64, appMem: 128}
	slogger := slog.New(slog.DiscardHandler)
	if o.serverLog != "" {
		f, err := os.Create(o.serverLog)
		if err != nil {
			return nil, err
		}
		level := slog.LevelInfo
		if o.serverDebug {
			level = slog.LevelDebug
		}
		slogger = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: level}))
	}
	dir := filepath.Join(o.work, "hollow")
	var err error
	if o.inProcess {
		h.host, err = newLocalHost(dir, o.agentState == "memory", o.provisionDelay, slog.New(slog.DiscardHandler))
	} else {
		h.host, err = newChildHost(dir, o.agentLog, o.agentProfile, o.profilePhase != "", o.agentNice, o.agentGOGC, o.agentState == "memory", o.provisionDelay)
	}
	if err != nil {
		return nil, fmt.Errorf("hollow host: %w", err)
	}
	h.cfg = server.Config{
		Listen:            "127.0.0.1:0",
		DataDir:           filepath.Join(o.work, "server"),
		EtcdEndpoints:     o.etcdEndpoints,
		EtcdMaxTxnOps:     o.etcdMaxTxnOps,
		EtcdCACert:        o.etcdTLS.CACert,
		EtcdCert:          o.etcdTLS.Cert,
		EtcdKey:           o.etcdTLS.Key,
		EtcdPrefix:        fmt.Sprintf("/capstan-scale-%d/", time.Now().UnixNano()),
		Region:            "us-east-1",
		AccountID:         "123456789012",
		AdminKeyID:        "AKIDCAPSTANSCALE",
		AdminSecret:       "capstan-scale-secret",
		Provisioner:       "sim",
		SimProvisionDelay: o.provisionDelay,
		StoppedRetention:  o.retention,
		NewSimProvisioner: simprov.Factory,
		Log:               slogger,
	}
	if o.provisioned {
		// The server's instances are the host's, outside this process.
		h.prov = newHostProvisioner(h.host)
		h.cfg.NewSimProvisioner = func(string, time.Duration, *slog.Logger) (provision.Provisioner, error) { return h.prov, nil }
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	srv, err := server.Start(sctx, h.cfg)
	cancel()
	if err != nil {
		h.host.Close()
		return nil, fmt.Errorf("start server: %w", err)
	}
	h.srv = srv
	// As capstan server does.
	memlimit.Apply(ctx, o.memoryLimit, slogger, srv.Service.RegisteredInstances)
	h.c = newClient(h.url(), h.cfg.AdminKeyID, h.cfg.AdminSecret)
	return h, nil
}

// newClient is the harness's ECS client, as the sampler's too.
func newClient(url, keyID, secret string) *ecs.Client {
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 64, 64
	})
	return ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials:      credentials.NewStaticCredentialsProvider(keyID, secret, ""),
		HTTPClient:       benchkit.InMemoryBody{Next: hc},
		RetryMaxAttempts: 5})
}

func (h *harness) url() string { return "http://" + h.srv.Addr }

// close stops the hollow instances, then the server.
func (h *harness) close() error {
	return errors.Join(h.host.Close(), h.srv.Close())
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.log, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// extension calls a CapstanV1 operation, signed like any ECS call.
func (h *harness) extension(ctx context.Context, op string, in, out any) error {
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url()+"/", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "CapstanV1."+op)
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: h.cfg.AdminKeyID, SecretAccessKey: h.cfg.AdminSecret}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "ecs", "us-east-1", time.Now()); err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", op, resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

// createDaemon registers the daemon's first revision and creates the
// critical daemon on the run's capacity provider.
func (h *harness) createDaemon(ctx context.Context) (string, error) {
	td, err := h.daemonTaskDefinition(ctx, "example/node-agent:1")
	if err != nil {
		return "", err
	}
	d, err := h.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String(daemonName), ClusterArn: aws.String(clusterName),
		DaemonTaskDefinitionArn: aws.String(td), CapacityProviderArns: []string{h.cpArn}, Critical: aws.Bool(true)})
	if err != nil {
		return "", fmt.Errorf("create daemon: %w", err)
	}
	return aws.ToString(d.DaemonArn), nil
}

// waitWhole waits for n instances ACTIVE and connected, the daemon
// RUNNING on each, and the services' 2n tasks RUNNING.
func (h *harness) waitWhole(ctx context.Context, daemonArn string, n int, timeout time.Duration) error {
	if err := h.waitInstances(ctx, n, timeout); err != nil {
		return err
	}
	if err := h.waitDaemon(ctx, daemonArn, n, timeout); err != nil {
		return err
	}
	return h.waitService(ctx, 2*n, timeout, nil)
}

// appTaskDefinition registers the services' task definition.
func (h *harness) appTaskDefinition(ctx context.Context) (*ecs.RegisterTaskDefinitionOutput, error) {
	app, err := h.c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String(serviceName),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("example/web:1"), Memory: aws.Int32(h.appMem), Cpu: h.appCPU}}})
	if err != nil {
		return nil, fmt.Errorf("register task definition: %w", err)
	}
	return app, nil
}

// createServices creates services of total tasks of td, each at most
// maxServiceTasks.
func (h *harness) createServices(ctx context.Context, td string, total int) error {
	left := total
	for _, name := range serviceNames(total) {
		count := min(left, maxServiceTasks)
		left -= count
		if _, err := h.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(clusterName), ServiceName: aws.String(name),
			TaskDefinition: aws.String(td), DesiredCount: aws.Int32(int32(count)),
			CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cpName)}}}); err != nil {
			return fmt.Errorf("create service %s: %w", name, err)
		}
	}
	return nil
}

// setup creates the cluster and the managed-instances capacity provider.
func (h *harness) setup(ctx context.Context) error {
	if _, err := h.c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(clusterName)}); err != nil {
		return fmt.Errorf("create cluster: %w", err)
	}
	out, err := h.c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String(cpName), Cluster: aws.String(clusterName),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn:      aws.String("arn:aws:iam::123456789012:role/capstan"),
			InfrastructureOptimization: &types.InfrastructureOptimization{ScaleInAfter: aws.Int32(-1)},
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"sim"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(instanceCPU / 1024)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(instanceMem)}}}}})
	if err != nil {
		return fmt.Errorf("create capacity provider: %w", err)
	}
	h.cpArn = aws.ToString(out.CapacityProvider.CapacityProviderArn)
	return nil
}

// credentials mints n agent credentials of the capacity provider, as an
// operator does for hosts of their own (CapstanV1.CreateAgentCredential).
func (h *harness) credentials(ctx context.Context, n int) ([]map[string]string, error) {
	envs := make([]map[string]string, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var out struct {
				AccessKeyID     string `json:"accessKeyId"`
				SecretAccessKey string `json:"secretAccessKey"`
			}
			err := h.extension(ctx, "CreateAgentCredential", map[string]string{"cluster": clusterName, "capacityProvider": cpName,
				"description": fmt.Sprintf("hollow instance %d", i)}, &out)
			if err != nil {
				errs <- err
				return
			}
			envs[i] = map[string]string{"CAPSTAN_ENDPOINT": h.url(), "ECS_CLUSTER": clusterName, "AWS_ACCESS_KEY_ID": out.AccessKeyID,
				"AWS_SECRET_ACCESS_KEY": out.SecretAccessKey, "AWS_REGION": "us-east-1", "ECS_CONTAINER_STOP_TIMEOUT": "2s"}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("create agent credential: %w", err)
	}
	return envs, nil
}

// launch starts one hollow instance per credential.
func (h *harness) launch(envs []map[string]string) error {
	for _, env := range envs {
		h.mu.Lock()
		h.next++
		id := fmt.Sprintf("h-%05d", h.next)
		h.handles = append(h.handles, id)
		h.mu.Unlock()
		if err := h.host.Launch(id, instanceCPU, instanceMem, env); err != nil {
			return fmt.Errorf("launch %s: %w", id, err)
		}
	}
	return nil
}

// until polls cond every interval until it holds, ctx ends or timeout.
func until(ctx context.Context, timeout, interval time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// instances lists the cluster's container instances of a status.
func (h *harness) instanceArns(ctx context.Context, status types.ContainerInstanceStatus) ([]string, error) {
	var arns []string
	p := ecs.NewListContainerInstancesPaginator(h.c, &ecs.ListContainerInstancesInput{Cluster: aws.String(clusterName), Status: status, MaxResults: aws.Int32(100)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		arns = append(arns, out.ContainerInstanceArns...)
	}
	return arns, nil
}

// describeInstances describes instances 100 at a time.
func (h *harness) describeInstances(ctx context.Context, arns []string) ([]types.ContainerInstance, error) {
	var out []types.ContainerInstance
	for chunk := range slices.Chunk(arns, 100) {
		r, err := h.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(clusterName), ContainerInstances: chunk})
		if err != nil {
			return nil, err
		}
		out = append(out, r.ContainerInstances...)
	}
	return out, nil
}

// waitInstances waits until n instances are ACTIVE with their agents
// connected.
func (h *harness) waitInstances(ctx context.Context, n int, timeout time.Duration) error {
	last := -1
	return until(ctx, timeout, time.Second, fmt.Sprintf("%d instances ACTIVE and connected", n), func(ctx context.Context) (bool, error) {
		arns, err := h.instanceArns(ctx, types.ContainerInstanceStatusActive)
		if err != nil {
			return false, err
		}
		if len(arns) != last {
			h.logf("  %d/%d instances ACTIVE", len(arns), n)
			last = len(arns)
		}
		if len(arns) < n {
			return false, nil
		}
		cis, err := h.describeInstances(ctx, arns)
		if err != nil {
			return false, err
		}
		connected := 0
		for _, ci := range cis {
			if ci.AgentConnected {
				connected++
			}
		}
		return connected >= n, nil
	})
}

// daemonTaskDefinition registers a revision of the daemon's family.
func (h *harness) daemonTaskDefinition(ctx context.Context, image string) (string, error) {
	out, err := h.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(daemonName),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agent"), Image: aws.String(image), Memory: aws.Int32(64), Cpu: 64}}})
	if err != nil {
		return "", fmt.Errorf("register daemon task definition: %w", err)
	}
	return aws.ToString(out.DaemonTaskDefinitionArn), nil
}

// daemonRunning is the daemon's running count over its current revisions.
func (h *harness) daemonRunning(ctx context.Context, arn string) (int, string, error) {
	d, err := h.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
	if err != nil {
		return 0, "", err
	}
	n := 0
	for _, r := range d.Daemon.CurrentRevisions {
		n += int(r.TotalRunningCount)
	}
	return n, aws.ToString(d.Daemon.DeploymentArn), nil
}

// waitDaemon waits until the daemon runs on n instances.
func (h *harness) waitDaemon(ctx context.Context, arn string, n int, timeout time.Duration) error {
	last := -1
	// DescribeDaemon reads the server's fleet view: cheap, so polled often
	// enough that the poll does not round the time up by much.
	every := 500 * time.Millisecond
	return until(ctx, timeout, every, fmt.Sprintf("daemon running on %d instances", n), func(ctx context.Context) (bool, error) {
		got, _, err := h.daemonRunning(ctx, arn)
		if err != nil {
			return false, err
		}
		if got != last && (got-last >= n/10 || got == n) {
			h.logf("  daemon running on %d/%d", got, n)
			last = got
		}
		return got >= n, nil
	})
}

// waitService waits until the service runs want tasks. placed, when not
// nil, is set when every task first had an instance (pending or running:
// a task is created on its instance, or waiting for capacity without one,
// which the services here never do).
func (h *harness) waitService(ctx context.Context, want int, timeout time.Duration, placed *time.Time) error {
	last := int32(-1)
	return until(ctx, timeout, 250*time.Millisecond, fmt.Sprintf("service running %d tasks", want), func(ctx context.Context) (bool, error) {
		names := serviceNames(want)
		out, err := h.c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String(clusterName), Services: names})
		if err != nil || len(out.Services) != len(names) {
			return false, err
		}
		var running, pending int32
		for _, s := range out.Services {
			running += s.RunningCount
			pending += s.PendingCount
		}
		if running != last && (int(running-last) >= want/10 || int(running) == want) {
			h.logf("  services running %d/%d (pending %d)", running, want, pending)
			last = running
		}
		if placed != nil && placed.IsZero() && int(running+pending) >= want {
			*placed = time.Now()
			h.logf("  all %d tasks placed", want)
		}
		return int(running) == want, nil
	})
}

// deployment reads a daemon deployment's status.
func (h *harness) deployment(ctx context.Context, arn string) (types.DaemonDeployment, error) {
	out, err := h.c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{arn}})
	if err != nil {
		return types.DaemonDeployment{}, err
	}
	if len(out.DaemonDeployments) != 1 {
		return types.DaemonDeployment{}, fmt.Errorf("deployment %s not found", arn)
	}
	return out.DaemonDeployments[0], nil
}

// tasks describes every task of the cluster with the desired status.
func (h *harness) tasks(ctx context.Context, desired types.DesiredStatus) ([]types.Task, error) {
	var arns []string
	p := ecs.NewListTasksPaginator(h.c, &ecs.ListTasksInput{Cluster: aws.String(clusterName), DesiredStatus: desired, MaxResults: aws.Int32(100)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		arns = append(arns, out.TaskArns...)
	}
	var ts []types.Task
	for chunk := range slices.Chunk(arns, 100) {
		out, err := h.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(clusterName), Tasks: chunk})
		if err != nil {
			return nil, err
		}
		ts = append(ts, out.Tasks...)
	}
	return ts, nil
}

// latencies samples API calls until stop is closed.
type latencies struct {
	mu   sync.Mutex
	byOp map[string][]time.Duration
	// byPosition: the first call after the sampler's pause, or one of
	// those right after it.
	byPosition map[string][]time.Duration
	errors     atomic.Int64
}

const (
	firstAfterPause = "first after the pause"
	following       = "following"
)

func newLatencies() *latencies {
	return &latencies{byOp: map[string][]time.Duration{}, byPosition: map[string][]time.Duration{}}
}

func (l *latencies) add(op, position string, d time.Duration, err error) {
	if err != nil {
		l.errors.Add(1)
		return
	}
	l.mu.Lock()
	l.byOp[op] = append(l.byOp[op], d)
	l.byPosition[position] = append(l.byPosition[position], d)
	l.mu.Unlock()
}

// sample calls DescribeDaemon, ListTasks and DescribeContainerInstances
// (10 instances) one after another, then pauses 20 ms, with one client,
// until ctx ends. Which call comes first after the pause rotates: a call
// made after a pause finds the server's connection goroutine parked, and
// (on a busy server) waits for the network to be polled, which the calls
// right after it mostly do not.
func sample(ctx context.Context, c *ecs.Client, daemonArn string, instances []string, l *latencies) {
	ops := []struct {
		name string
		call func(i int) error
	}{
		{"DescribeDaemon", func(int) error {
			_, err := c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(daemonArn)})
			return err
		}},
		{"ListTasks", func(int) error {
			_, err := c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(clusterName), MaxResults: aws.Int32(100)})
			return err
		}},
		{"DescribeContainerInstances", func(i int) error {
			var some []string
			for k := range 10 {
				some = append(some, instances[(i*10+k)%len(instances)])
			}
			_, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(clusterName), ContainerInstances: some})
			return err
		}},
	}
	for i := 0; ctx.Err() == nil; i++ {
		for k := range ops {
			op := ops[(i+k)%len(ops)]
			t := time.Now()
			err := op.call(i)
			if ctx.Err() != nil {
				return
			}
			position := following
			if k == 0 {
				position = firstAfterPause
			}
			l.add(op.name, position, time.Since(t), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// report is what the latencies come to: calls, p50 and p99 of all (ms),
// the same per operation, and the errors.
func (l *latencies) report() (n int, p50, p99 float64, per map[string][2]float64, errs int64) {
	all, per := l.summary()
	return len(all), benchkit.Ms(pct(all, 0.5)), benchkit.Ms(pct(all, 0.99)), per, l.errors.Load()
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (l *latencies) summary() (all []time.Duration, per map[string][2]float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ds := range l.byOp {
		all = append(all, ds...)
	}
	slices.Sort(all)
	return all, percentiles(l.byOp)
}

// positions is p50 and p99 (ms) of the calls by their place after the
// sampler's pause.
func (l *latencies) positions() map[string][2]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return percentiles(l.byPosition)
}

func percentiles(m map[string][]time.Duration) map[string][2]float64 {
	out := map[string][2]float64{}
	for k, ds := range m {
		s := slices.Clone(ds)
		slices.Sort(s)
		out[k] = [2]float64{benchkit.Ms(pct(s, 0.5)), benchkit.Ms(pct(s, 0.99))}
	}
	return out
}

// invariants checks what must hold once the fleet has settled: n ACTIVE
// instances, the daemon exactly once on each, the service's tasks all
// RUNNING on ACTIVE instances. It returns the problems found.
func (h *harness) invariants(ctx context.Context, n, serviceTasks int) ([]string, error) {
	arns, err := h.instanceArns(ctx, types.ContainerInstanceStatusActive)
	if err != nil {
		return nil, err
	}
	var problems []string
	if len(arns) != n {
		problems = append(problems, fmt.Sprintf("%d ACTIVE instances, want %d", len(arns), n))
	}
	active := map[string]bool{}
	for _, a := range arns {
		active[a] = true
	}
	ts, err := h.tasks(ctx, types.DesiredStatusRunning)
	if err != nil {
		return nil, err
	}
	daemons := map[string]int{}
	service := 0
	// Daemon tasks reserve 64 CPU units and 64 MiB, service tasks
	// appCPU and appMem.
	wantCPU, wantMem := map[string]int32{}, map[string]int32{}
	for _, t := range ts {
		ci := aws.ToString(t.ContainerInstanceArn)
		if strings.HasPrefix(aws.ToString(t.Group), "daemon:") {
			wantCPU[ci] += 64
			wantMem[ci] += 64
		} else {
			wantCPU[ci] += h.appCPU
			wantMem[ci] += h.appMem
		}
		switch g := aws.ToString(t.Group); {
		case strings.HasPrefix(g, "daemon:"):
			if aws.ToString(t.LastStatus) == "RUNNING" {
				daemons[ci]++
			}
		case strings.HasPrefix(g, "service:"+serviceName):
			if aws.ToString(t.LastStatus) != "RUNNING" {
				problems = append(problems, fmt.Sprintf("service task %s is %s", aws.ToString(t.TaskArn), aws.ToString(t.LastStatus)))
				continue
			}
			if !active[ci] {
				problems = append(problems, fmt.Sprintf("service task %s runs on %s, which is not ACTIVE", aws.ToString(t.TaskArn), ci))
			}
			service++
		}
	}
	if service != serviceTasks {
		problems = append(problems, fmt.Sprintf("%d service tasks RUNNING, want %d", service, serviceTasks))
	}
	cis, err := h.describeInstances(ctx, arns)
	if err != nil {
		return nil, err
	}
	var off []string
	for _, ci := range cis {
		a := aws.ToString(ci.ContainerInstanceArn)
		used := func(name string) int32 {
			return resource(ci.RegisteredResources, name) - resource(ci.RemainingResources, name)
		}
		if used("CPU") != wantCPU[a] || used("MEMORY") != wantMem[a] {
			off = append(off, fmt.Sprintf("%s: %d CPU, %d MiB reserved, tasks need %d, %d", a, used("CPU"), used("MEMORY"), wantCPU[a], wantMem[a]))
		}
	}
	if len(off) > 0 {
		problems = append(problems, fmt.Sprintf("%d instances whose remaining resources do not match their tasks (first %s)", len(off), off[0]))
	}
	var missing, twice []string
	for _, a := range arns {
		switch daemons[a] {
		case 1:
		case 0:
			missing = append(missing, a)
		default:
			twice = append(twice, a)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("%d instances without the daemon RUNNING (first %s)", len(missing), missing[0]))
	}
	if len(twice) > 0 {
		problems = append(problems, fmt.Sprintf("%d instances with the daemon RUNNING more than once (first %s)", len(twice), twice[0]))
	}
	return problems, nil
}

func resource(rs []types.Resource, name string) int32 {
	for _, r := range rs {
		if aws.ToString(r.Name) == name {
			return r.IntegerValue
		}
	}
	return 0
}

// serviceNames are the services that hold n tasks: web, web-2, ...
func serviceNames(n int) []string {
	names := []string{serviceName}
	for i := 2; (i-1)*maxServiceTasks < n; i++ {
		names = append(names, fmt.Sprintf("%s-%d", serviceName, i))
	}
	return names
}
