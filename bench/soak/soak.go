package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/coverage"
	"github.com/capstanhq/capstan/internal/provision"
	simprov "github.com/capstanhq/capstan/internal/provision/sim"
	"github.com/capstanhq/capstan/internal/server"
)

// The fleet: instances of 1 vCPU and 1024 MiB, each holding one service
// task (600 MiB) next to the daemon (32 MiB).
const (
	clusterName = "soak"
	cpName      = "hollow"
	daemonName  = "node-agent"
	serviceName = "web"
	appMemory   = 600
	daemonMem   = 32
)

// soak is the running fleet and what drives it.
type soak struct {
	o      options
	w      io.Writer
	srv    *server.Server
	cfg    server.Config
	c      *ecs.Client
	ev     *coverage.Client
	prov   atomic.Pointer[simprov.Provisioner]
	start  time.Time
	appTDs [2]string
	dTDs   [2]string
	daemon string
	cpArn  string

	lat     latencies
	actions sync.Map // name → *atomic.Int64
	errs    atomic.Int64
	errMu   sync.Mutex
	logMu   sync.Mutex
	lastErr []string
}

func run(ctx context.Context, o options, w io.Writer) (*Report, error) {
	if o.work == "" {
		dir, err := os.MkdirTemp("", "capstan-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.work = dir
	}
	s := &soak{o: o, w: w, start: time.Now()}
	log := slog.New(slog.DiscardHandler)
	if o.serverLog != "" {
		f, err := os.Create(o.serverLog)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		log = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	s.cfg = server.Config{
		Listen:           "127.0.0.1:0",
		DataDir:          filepath.Join(o.work, "server"),
		Region:           "us-east-1",
		AccountID:        "123456789012",
		AdminKeyID:       "AKIDCAPSTANSOAK",
		AdminSecret:      "capstan-soak-secret",
		Provisioner:      "sim",
		StoppedRetention: o.retention,
		EventRetention:   o.eventsKept,
		AuditRetention:   o.auditKept,
		EventLimit:       o.eventLimit,
		Log:              log,
		// The provisioner is kept to kill its instances.
		NewSimProvisioner: func(dir string, _ time.Duration, l *slog.Logger) (provision.Provisioner, error) {
			p, err := simprov.New(simprov.Config{Dir: dir, MemoryState: true, ServerLog: l})
			if err == nil {
				s.prov.Store(p)
			}
			return p, err
		},
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	srv, err := server.Start(sctx, s.cfg)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	s.srv = srv
	defer func() {
		s.logf("stopping the server and %d hollow instances", len(s.handles()))
		srv.Close()
		if p := s.prov.Load(); p != nil {
			p.Close()
		}
	}()
	url := "http://" + srv.Addr
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) { t.MaxIdleConns, t.MaxIdleConnsPerHost = 16, 16 })
	s.c = ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider(s.cfg.AdminKeyID, s.cfg.AdminSecret, ""),
		HTTPClient:  benchkit.InMemoryBody{Next: hc}, RetryMaxAttempts: 5})
	s.ev = coverage.NewClient(url, aws.Credentials{AccessKeyID: s.cfg.AdminKeyID, SecretAccessKey: s.cfg.AdminSecret}, &http.Client{Timeout: time.Minute})

	rep := &Report{Started: s.start.UTC(), Instances: o.instances, DurationSeconds: o.duration.Seconds(),
		SampleSeconds: o.sample.Seconds(), CPUs: runtime.NumCPU(), CPUModel: benchkit.CPUModel(), LoadAvgStart: benchkit.LoadAvg(), Revision: revision(ctx)}
	setupStart := time.Now()
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	if err := s.converge(ctx, o.instances, o.setupTimeout); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	rep.SetupSeconds = time.Since(setupStart).Seconds()
	s.logf("fleet of %d instances converged in %.1fs; soaking for %s", o.instances, rep.SetupSeconds, o.duration)

	// The load, until the duration is up.
	lctx, stop := context.WithTimeout(ctx, o.duration)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { s.client(lctx) })
	wg.Go(func() { s.every(lctx, 10*time.Second, "events read", s.readEvents()) })
	wg.Go(func() { s.every(lctx, o.rolloutEvery, "rollouts", s.rollout()) })
	wg.Go(func() { s.every(lctx, o.killEvery, "instances killed", s.kill) })
	wg.Go(func() { s.every(lctx, o.scaleEvery, "scalings", s.scale()) })
	soakStart := time.Now()
	t := time.NewTicker(o.sample)
	for done := false; !done; {
		select {
		case <-lctx.Done():
			done = true
		case <-t.C:
			sm := s.take(soakStart)
			rep.Samples = append(rep.Samples, sm)
			s.logf("%6.0fs  rss %6.1f MiB  goroutines %6d  fds %4d  etcd db %6.1f MiB (%.1f in use)  api p99 %7.1f ms (%d calls)  tasks %d  events %d  audit %d",
				sm.At, sm.RSSMiB, sm.Goroutines, sm.OpenFiles, sm.EtcdDBMiB, sm.EtcdInUseMiB, sm.APIp99Ms, sm.Calls, sm.Tasks, sm.Events, sm.AuditRecords)
		}
	}
	t.Stop()
	wg.Wait()
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	rep.LoadAvgEnd = benchkit.LoadAvg()
	rep.Actions = map[string]int64{}
	s.actions.Range(func(k, v any) bool { rep.Actions[k.(string)] = v.(*atomic.Int64).Load(); return true })
	rep.Errors = s.errs.Load()
	rep.LastErrors = s.lastErr
	for _, d := range s.srv.Store.Defrags() {
		rep.Defrags = append(rep.Defrags, DefragRecord{At: d.At.Sub(soakStart).Seconds(),
			BeforeMiB: float64(d.BeforeBytes) / (1 << 20), AfterMiB: float64(d.AfterBytes) / (1 << 20)})
	}
	rep.Series = analyse(rep.Samples, o.warmup, raceEnabled)
	for _, se := range rep.Series {
		if se.Grows {
			rep.Growing = append(rep.Growing, se.Name)
		}
	}
	// The fleet must still converge after the load stops: no leak hides
	// a fleet that stopped working.
	final := s.services()
	if err := s.converge(ctx, final, o.setupTimeout); err != nil {
		return rep, fmt.Errorf("after the soak: %w", err)
	}
	return rep, nil
}

func (s *soak) logf(format string, args ...any) {
	s.logMu.Lock() // the writer may be a buffer (the test's)
	defer s.logMu.Unlock()
	fmt.Fprintf(s.w, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func (s *soak) count(name string) {
	v, _ := s.actions.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (s *soak) fail(what string, err error) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	s.errs.Add(1)
	s.errMu.Lock()
	if len(s.lastErr) < 20 {
		s.lastErr = append(s.lastErr, what+": "+err.Error())
	}
	s.errMu.Unlock()
	s.logf("%s: %v", what, err)
}

// every runs f every d until ctx ends.
func (s *soak) every(ctx context.Context, d time.Duration, name string, f func(context.Context) error) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := f(ctx); err != nil {
				s.fail(name, err)
			} else {
				s.count(name)
			}
		}
	}
}

func (s *soak) handles() []string {
	if p := s.prov.Load(); p != nil {
		return p.Handles()
	}
	return nil
}

// setup creates the cluster, the capacity provider, two revisions each of
// the daemon's and the service's task definitions (rollouts go back and
// forth between them, so that no rollout adds a record for good), the
// daemon and the service.
func (s *soak) setup(ctx context.Context) error {
	if _, err := s.c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(clusterName)}); err != nil {
		return fmt.Errorf("create cluster: %w", err)
	}
	cp, err := s.c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String(cpName), Cluster: aws.String(clusterName),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn:      aws.String("arn:aws:iam::123456789012:role/capstan"),
			InfrastructureOptimization: &types.InfrastructureOptimization{ScaleInAfter: aws.Int32(-1)},
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"sim"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(1)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(1024)}}}}})
	if err != nil {
		return fmt.Errorf("create capacity provider: %w", err)
	}
	s.cpArn = aws.ToString(cp.CapacityProvider.CapacityProviderArn)
	for i := range 2 {
		d, err := s.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(daemonName),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String(daemonName), Image: aws.String(fmt.Sprintf("example/node-agent:%d", i+1)),
				Memory: aws.Int32(daemonMem)}}})
		if err != nil {
			return fmt.Errorf("register daemon task definition: %w", err)
		}
		s.dTDs[i] = aws.ToString(d.DaemonTaskDefinitionArn)
		a, err := s.c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String(serviceName),
			ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String(fmt.Sprintf("example/web:%d", i+1)), Memory: aws.Int32(appMemory)}}})
		if err != nil {
			return fmt.Errorf("register task definition: %w", err)
		}
		s.appTDs[i] = aws.ToString(a.TaskDefinition.TaskDefinitionArn)
	}
	d, err := s.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String(daemonName), ClusterArn: aws.String(clusterName),
		DaemonTaskDefinitionArn: aws.String(s.dTDs[0]), CapacityProviderArns: []string{s.cpArn}, Critical: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("create daemon: %w", err)
	}
	s.daemon = aws.ToString(d.DaemonArn)
	if _, err := s.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(clusterName), ServiceName: aws.String(serviceName),
		TaskDefinition: aws.String(s.appTDs[0]), DesiredCount: aws.Int32(int32(s.o.instances)),
		DeploymentConfiguration:  &types.DeploymentConfiguration{MinimumHealthyPercent: aws.Int32(50), MaximumPercent: aws.Int32(100)},
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cpName)}}}); err != nil {
		return fmt.Errorf("create service: %w", err)
	}
	return nil
}

// services is the service's desired count.
func (s *soak) services() int {
	out, err := s.c.DescribeServices(context.Background(), &ecs.DescribeServicesInput{Cluster: aws.String(clusterName), Services: []string{serviceName}})
	if err != nil || len(out.Services) == 0 {
		return s.o.instances
	}
	return int(out.Services[0].DesiredCount)
}

// converge waits for the service's n tasks RUNNING, every ACTIVE instance
// connected with the daemon RUNNING once, and no deployment in progress.
func (s *soak) converge(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	why := ""
	for time.Now().Before(deadline) {
		if why = s.unconverged(ctx, n); why == "" {
			return nil
		}
		if err := benchkit.Sleep(ctx, 2*time.Second); err != nil {
			return err
		}
	}
	return fmt.Errorf("not converged within %s: %s", timeout, why)
}

func (s *soak) unconverged(ctx context.Context, n int) string {
	svc, err := s.c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String(clusterName), Services: []string{serviceName}})
	if err != nil || len(svc.Services) == 0 {
		return fmt.Sprintf("describe service: %v", err)
	}
	sv := svc.Services[0]
	if int(sv.RunningCount) != n || len(sv.Deployments) != 1 {
		return fmt.Sprintf("service runs %d of %d, %d deployments", sv.RunningCount, n, len(sv.Deployments))
	}
	var arns []string
	for p := ecs.NewListContainerInstancesPaginator(s.c, &ecs.ListContainerInstancesInput{Cluster: aws.String(clusterName), Status: types.ContainerInstanceStatusActive}); p.HasMorePages(); {
		out, err := p.NextPage(ctx)
		if err != nil {
			return err.Error()
		}
		arns = append(arns, out.ContainerInstanceArns...)
	}
	if len(arns) < n {
		return fmt.Sprintf("%d ACTIVE instances for %d tasks", len(arns), n)
	}
	daemons := 0
	for part := range slices.Chunk(arns, 100) {
		out, err := s.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(clusterName), ContainerInstances: part})
		if err != nil {
			return err.Error()
		}
		for _, ci := range out.ContainerInstances {
			if !ci.AgentConnected {
				return fmt.Sprintf("instance %s not connected", aws.ToString(ci.ContainerInstanceArn))
			}
		}
	}
	for p := ecs.NewListTasksPaginator(s.c, &ecs.ListTasksInput{Cluster: aws.String(clusterName)}); p.HasMorePages(); {
		out, err := p.NextPage(ctx)
		if err != nil {
			return err.Error()
		}
		for part := range slices.Chunk(out.TaskArns, 100) {
			d, err := s.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(clusterName), Tasks: part})
			if err != nil {
				return err.Error()
			}
			for _, t := range d.Tasks {
				if strings.HasPrefix(aws.ToString(t.Group), "daemon:") && aws.ToString(t.LastStatus) == "RUNNING" {
					daemons++
				}
			}
		}
	}
	if daemons != len(arns) {
		return fmt.Sprintf("%d daemon tasks RUNNING on %d ACTIVE instances", daemons, len(arns))
	}
	return ""
}

// readEvents reads the cluster's new events, as a consumer does, and
// keeps only the cursor.
func (s *soak) readEvents() func(context.Context) error {
	cursor := ""
	return func(ctx context.Context) error {
		_, next, err := s.ev.List(ctx, clusterName, cursor)
		cursor = next
		return err
	}
}

// rollout alternates a service rollout and a daemon rollout, each to the
// revision it is not on.
func (s *soak) rollout() func(context.Context) error {
	turn, app, daemon := 0, 0, 0
	return func(ctx context.Context) error {
		turn++
		if turn%2 == 1 {
			app = 1 - app
			_, err := s.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(clusterName), Service: aws.String(serviceName),
				TaskDefinition: aws.String(s.appTDs[app])})
			if err == nil {
				s.logf("rollout: service to %s", s.appTDs[app])
			}
			return err
		}
		daemon = 1 - daemon
		_, err := s.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(s.daemon), DaemonTaskDefinitionArn: aws.String(s.dTDs[daemon]),
			CapacityProviderArns: []string{s.cpArn}, Critical: aws.Bool(true),
			DeploymentConfiguration: &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(25)}})
		if err == nil {
			s.logf("rollout: daemon to %s", s.dTDs[daemon])
		}
		return err
	}
}

// kill kills 1% of the hollow instances that are still alive.
func (s *soak) kill(ctx context.Context) error {
	p := s.prov.Load()
	if p == nil {
		return errors.New("no provisioner yet")
	}
	var alive []string
	for _, h := range p.Handles() {
		if ok, _ := p.Alive(ctx, h); ok {
			alive = append(alive, h)
		}
	}
	n := max(1, s.o.instances/100)
	rand.Shuffle(len(alive), func(i, j int) { alive[i], alive[j] = alive[j], alive[i] })
	for _, h := range alive[:min(n, len(alive))] {
		if err := p.Kill(h); err != nil {
			return err
		}
	}
	s.logf("killed %d instances", min(n, len(alive)))
	return nil
}

// scale moves the service up by 5%, then back.
func (s *soak) scale() func(context.Context) error {
	up := false
	return func(ctx context.Context) error {
		up = !up
		n := s.o.instances
		if up {
			n += max(1, s.o.instances/20)
		}
		_, err := s.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(clusterName), Service: aws.String(serviceName), DesiredCount: aws.Int32(int32(n))})
		if err == nil {
			s.logf("service scaled to %d", n)
		}
		return err
	}
}
