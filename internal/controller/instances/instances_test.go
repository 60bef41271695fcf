package instances_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/controller/instances"
	"github.com/capstanhq/capstan/internal/provision"
	simprov "github.com/capstanhq/capstan/internal/provision/sim"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// simFleet is a server whose managed instances are hollow (sim
// provisioner), with a capacity provider of 1 vCPU, 1024 MiB instances and
// a critical daemon of 64 MiB on them.
func simFleet(t *testing.T) (*ecs.Client, *simprov.Provisioner, *testenv.Server) {
	t.Helper()
	srv := testenv.StartServerWith(t, func(c *server.Config) {
		c.Provisioner = "sim"
		// Long enough that every launch of a pass is made before the
		// first instance registers.
		c.SimProvisionDelay = time.Second
		c.NewSimProvisioner = simprov.Factory
	})
	prov, ok := srv.Provisioner.(*simprov.Provisioner)
	if !ok {
		t.Fatalf("provisioner is %T", srv.Provisioner)
	}
	c := clientOf(t, srv)
	hollowProvider(t, c)
	return c, prov, srv
}

func clientOf(t *testing.T, srv *testenv.Server) *ecs.Client {
	t.Helper()
	return ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider(srv.Config.AdminKeyID, srv.Config.AdminSecret, "")})
}

// hollowProvider makes cluster sim with capacity provider hollow: 1 vCPU,
// 1024 MiB instances and a critical daemon of 64 MiB on them.
func hollowProvider(t *testing.T, c *ecs.Client) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("sim")}); err != nil {
		t.Fatal(err)
	}
	cp, err := c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String("hollow"), Cluster: aws.String("sim"),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"sim"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(1)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(1024)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agent"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agent"), Image: aws.String("example/agent:1"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("agent"), ClusterArn: aws.String("sim"),
		DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn, CapacityProviderArns: []string{aws.ToString(cp.CapacityProvider.CapacityProviderArn)},
		Critical: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
}

// runAndWait runs count tasks of cpu units and mem MiB on the capacity
// provider and waits for all to be RUNNING; it returns the instances they
// run on, and how many instances the provisioner held when the first task
// was RUNNING.
func runAndWait(t *testing.T, c *ecs.Client, prov *simprov.Provisioner, family string, count, cpu, mem int32) (instances map[string]int, atFirst int) {
	t.Helper()
	ctx := context.Background()
	app, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String(family),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("app"), Image: aws.String("example/app:1"), Cpu: cpu, Memory: aws.Int32(mem)}}})
	if err != nil {
		t.Fatal(err)
	}
	arns := runHollow(t, c, app.TaskDefinition.TaskDefinitionArn, count)
	atFirst = -1
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("sim"), Tasks: arns})
		if err != nil {
			t.Fatal(err)
		}
		instances = map[string]int{}
		running := 0
		for _, tk := range out.Tasks {
			if aws.ToString(tk.LastStatus) == "RUNNING" {
				running++
				instances[aws.ToString(tk.ContainerInstanceArn)]++
			}
		}
		if running > 0 && atFirst < 0 {
			atFirst = len(prov.Handles())
		}
		if running == int(count) {
			return instances, atFirst
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks RUNNING after 2 minutes", running, count)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Tasks that each need an instance of their own get their instances in
// one go, not one after another, and no more than they need.
func TestWaitingTasksLaunchTogether(t *testing.T) {
	c, prov, _ := simFleet(t)
	instances, atFirst := runAndWait(t, c, prov, "big", 6, 768, 512)
	if len(instances) != 6 {
		t.Fatalf("6 tasks that each fill an instance run on %d instances: %v", len(instances), instances)
	}
	if atFirst != 6 {
		t.Fatalf("when the first task ran, %d instances had been launched, want all 6", atFirst)
	}
	// Nothing more is launched once they run.
	time.Sleep(2 * time.Second)
	if n := len(prov.Handles()); n != 6 {
		t.Fatalf("provisioner holds %d instances for 6 tasks, want 6", n)
	}
}

// Waiting tasks that fit together on one instance get one instance.
func TestWaitingTasksShareALaunch(t *testing.T) {
	c, prov, _ := simFleet(t)
	instances, _ := runAndWait(t, c, prov, "small", 4, 128, 128)
	if len(instances) != 1 {
		t.Fatalf("4 tasks that fit one instance run on %d instances: %v", len(instances), instances)
	}
	time.Sleep(2 * time.Second)
	if n := len(prov.Handles()); n != 1 {
		t.Fatalf("provisioner holds %d instances for tasks that fit one, want 1", n)
	}
}

// gatedProvisioner holds launches while its gate is closed.
type gatedProvisioner struct {
	*simprov.Provisioner
	mu      sync.Mutex
	gate    chan struct{} // closed: launches go through
	holding chan string   // IDs of launches held
}

func (g *gatedProvisioner) setGate(c chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = c
}

func (g *gatedProvisioner) Launch(ctx context.Context, req provision.Request) (string, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	select {
	case <-gate:
	default:
		g.holding <- req.ID
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return g.Provisioner.Launch(ctx, req)
}

// LaunchBatch holds each launch as Launch does.
func (g *gatedProvisioner) LaunchBatch(ctx context.Context, reqs []provision.Request) []provision.Launched {
	return provision.LaunchEach(ctx, g, reqs)
}

// batchRecorder notes the requests of each batch call and refuses the
// first request of the first one.
type batchRecorder struct {
	*simprov.Provisioner
	mu      sync.Mutex
	calls   [][]string
	refused string
	// launchRefused launches the refused instance all the same, as a call
	// that timed out after the cloud started it.
	launchRefused bool
}

func (b *batchRecorder) Launch(context.Context, provision.Request) (string, error) {
	panic("a provisioner that takes batches was called for one instance")
}

func (b *batchRecorder) LaunchBatch(ctx context.Context, reqs []provision.Request) []provision.Launched {
	b.mu.Lock()
	var ids []string
	for _, r := range reqs {
		ids = append(ids, r.ID)
	}
	b.calls = append(b.calls, ids)
	refuse := len(b.calls) == 1
	if refuse {
		b.refused = reqs[0].ID
	}
	b.mu.Unlock()
	if !refuse {
		return b.Provisioner.LaunchBatch(ctx, reqs)
	}
	if b.launchRefused {
		out := b.Provisioner.LaunchBatch(ctx, reqs)
		out[0] = provision.Launched{Err: errors.New("launch call timed out")}
		return out
	}
	return append([]provision.Launched{{Err: errors.New("capacity not available")}}, b.Provisioner.LaunchBatch(ctx, reqs[1:])...)
}

// A provisioner that takes batches gets a pass's launches in one call, and
// one instance it cannot launch does not hold back the others.
func TestLaunchesGoInBatches(t *testing.T) {
	var br *batchRecorder
	c, big := bigTaskServer(t, time.Second, func(p *simprov.Provisioner) provision.Provisioner {
		br = &batchRecorder{Provisioner: p}
		return br
	})
	arns := runHollow(t, c, big, 6)
	// Five instances launched; each of five tasks fills one.
	waitRunningOn(t, c, arns, 5, time.Minute)
	br.mu.Lock()
	calls, refused := br.calls, br.refused
	br.mu.Unlock()
	if len(calls) == 0 || len(calls[0]) != 6 {
		t.Fatalf("launch calls %v: want the first to ask for all 6 instances", calls)
	}
	held := br.Handles()
	if len(held) != 5 || slices.Contains(held, refused) {
		t.Fatalf("provisioner holds %v; want the 5 launched, not the refused %s", held, refused)
	}
	// The refused instance's record is dropped after UnlaunchedGrace (15
	// s), not counted on until the register timeout (2 minutes): the sixth
	// task gets an instance of its own well before that.
	waitRunningOn(t, c, arns, 6, 45*time.Second)
	held = br.Handles()
	if len(held) != 6 || slices.Contains(held, refused) {
		t.Fatalf("provisioner holds %v; want 6 launched, not the refused %s", held, refused)
	}
}

// An instance whose launch call failed after it started (no handle
// noted) registers within UnlaunchedGrace and is kept: its task runs on
// it and no other instance is launched in its place.
func TestUnnotedLaunchThatRegistersIsKept(t *testing.T) {
	var br *batchRecorder
	c, big := bigTaskServer(t, time.Second, func(p *simprov.Provisioner) provision.Provisioner {
		br = &batchRecorder{Provisioner: p, launchRefused: true}
		return br
	})
	arns := runHollow(t, c, big, 3)
	waitRunningOn(t, c, arns, 3, time.Minute)
	// Past the grace, still the same three instances.
	time.Sleep(instances.UnlaunchedGrace + 2*time.Second)
	waitRunningOn(t, c, arns, 3, time.Second)
	br.mu.Lock()
	refused := br.refused
	br.mu.Unlock()
	if held := br.Handles(); len(held) != 3 || !slices.Contains(held, refused) {
		t.Fatalf("provisioner holds %v; want the 3 launched, %s among them", held, refused)
	}
}

// runHollow runs n tasks of the definition on the hollow provider and
// returns their ARNs.
func runHollow(t *testing.T, c *ecs.Client, def *string, n int32) []string {
	t.Helper()
	run, err := c.RunTask(context.Background(), &ecs.RunTaskInput{Cluster: aws.String("sim"), TaskDefinition: def, Count: aws.Int32(n),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("hollow")}}})
	if err != nil || len(run.Tasks) != int(n) {
		t.Fatalf("run task: %v %v", run, err)
	}
	var arns []string
	for _, tk := range run.Tasks {
		arns = append(arns, aws.ToString(tk.TaskArn))
	}
	return arns
}

// waitRunningOn waits until the tasks run on want instances.
func waitRunningOn(t *testing.T, c *ecs.Client, arns []string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		on := runningOn(t, c, arns)
		if on == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks RUNNING on %d instances after %s, want %d", on, within, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runningOn counts the instances the tasks among arns that are RUNNING
// run on.
func runningOn(t *testing.T, c *ecs.Client, arns []string) int {
	t.Helper()
	if len(arns) == 0 {
		return 0
	}
	out, err := c.DescribeTasks(context.Background(), &ecs.DescribeTasksInput{Cluster: aws.String("sim"), Tasks: arns})
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, tk := range out.Tasks {
		if aws.ToString(tk.LastStatus) == "RUNNING" {
			on[aws.ToString(tk.ContainerInstanceArn)] = true
		}
	}
	return len(on)
}

// A pass does not wait for its launches: a task that waits for room is
// placed on an instance that frees up while another instance's launch
// hangs.
func TestWaitingTaskPlacedWhileALaunchHangs(t *testing.T) {
	ctx := context.Background()
	var gp *gatedProvisioner
	open := make(chan struct{})
	close(open)
	c, big := bigTaskServer(t, 0, func(p *simprov.Provisioner) provision.Provisioner {
		gp = &gatedProvisioner{Provisioner: p, gate: open, holding: make(chan string, 16)}
		return gp
	})
	runOne := func() string {
		run, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("sim"), TaskDefinition: big,
			CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("hollow")}}})
		if err != nil || len(run.Tasks) != 1 {
			t.Fatalf("run task: %v %v", run, err)
		}
		return aws.ToString(run.Tasks[0].TaskArn)
	}
	first := runOne()
	firstOn := waitRunning(t, c, first)

	// From now on launches hang. The next task (it fills an instance too)
	// gets a launch that does not come.
	hang := make(chan struct{})
	gp.setGate(hang)
	defer close(hang)
	second := runOne()
	select {
	case <-gp.holding:
	case <-time.After(30 * time.Second):
		t.Fatal("no launch for the second task")
	}
	// The first task stops: its instance has room for the second.
	if _, err := c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String("sim"), Task: aws.String(first)}); err != nil {
		t.Fatal(err)
	}
	if on := waitRunning(t, c, second); on != firstOn {
		t.Fatalf("second task runs on %s, want the freed instance %s", on, firstOn)
	}
}

// waitRunning waits for a task to be RUNNING and returns its instance.
func waitRunning(t *testing.T, c *ecs.Client, task string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := c.DescribeTasks(context.Background(), &ecs.DescribeTasksInput{Cluster: aws.String("sim"), Tasks: []string{task}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Tasks) == 1 && aws.ToString(out.Tasks[0].LastStatus) == "RUNNING" {
			return aws.ToString(out.Tasks[0].ContainerInstanceArn)
		}
		if time.Now().After(deadline) {
			status := "missing"
			if len(out.Tasks) == 1 {
				status = aws.ToString(out.Tasks[0].LastStatus)
			}
			t.Fatalf("task %s not RUNNING after a minute: %s", task, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A managed instance's agent stops once its instance is deregistered: the
// capacity provider terminates it, and registering anew (as an agent on a
// host of one's own does) would only be refused.
func TestRetiredInstancesAgentStops(t *testing.T) {
	ctx := context.Background()
	c, prov, srv := simFleet(t)
	instances, _ := runAndWait(t, c, prov, "small", 1, 128, 128)
	accepted, refused := registrations(t, srv)
	if accepted == 0 {
		t.Fatalf("no RegisterContainerInstance counted for the running instance (%d refused)", refused)
	}
	var arns []string
	for arn := range instances {
		arns = append(arns, arn)
		if _, err := c.DeregisterContainerInstance(ctx, &ecs.DeregisterContainerInstanceInput{Cluster: aws.String("sim"),
			ContainerInstance: aws.String(arn), Force: aws.Bool(true)}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for len(prov.Handles()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("instances still held a minute after deregistration: %v", prov.Handles())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// No registration since, refused or accepted.
	if a, r := registrations(t, srv); a != accepted || r != refused {
		t.Errorf("the retired instance's agent registered again: %d accepted, %d refused", a-accepted, r-refused)
	}
	// And none left a live instance: the deregistered one stays INACTIVE.
	live, err := c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("sim")})
	if err != nil || len(live.ContainerInstanceArns) != 0 {
		t.Fatalf("live container instances after retirement: %v (%v), want none", live, err)
	}
	out, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("sim"), ContainerInstances: arns})
	if err != nil || len(out.ContainerInstances) != len(arns) {
		t.Fatalf("describe the retired instances: %+v %v", out, err)
	}
	for _, ci := range out.ContainerInstances {
		if s := aws.ToString(ci.Status); s != "INACTIVE" {
			t.Errorf("retired instance %s is %s, want INACTIVE", aws.ToString(ci.ContainerInstanceArn), s)
		}
	}
}

// registrations counts the server's RegisterContainerInstance requests,
// accepted (no error code) and refused.
func registrations(t *testing.T, srv *testenv.Server) (accepted, refused int) {
	t.Helper()
	for _, line := range strings.Split(srv.Metrics(t), "\n") {
		if !strings.HasPrefix(line, "capstan_api_requests_total{") || !strings.Contains(line, `operation="RegisterContainerInstance"`) {
			continue
		}
		_, v, _ := strings.Cut(line, "} ")
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		if strings.Contains(line, `code=""`) {
			accepted += int(n)
		} else {
			refused += int(n)
		}
	}
	return accepted, refused
}

// bigTaskServer starts a server whose sim provisioner (boot delay given)
// is wrapped, with the hollow capacity provider and a task definition
// that fills most of an instance; it returns a client and the
// definition's ARN.
func bigTaskServer(t *testing.T, delay time.Duration, wrap func(*simprov.Provisioner) provision.Provisioner) (*ecs.Client, *string) {
	t.Helper()
	srv := testenv.StartServerWith(t, func(c *server.Config) {
		c.Provisioner = "sim"
		c.SimProvisionDelay = delay
		c.NewSimProvisioner = func(dir string, delay time.Duration, log *slog.Logger) (provision.Provisioner, error) {
			p, err := simprov.New(simprov.Config{Dir: dir, Delay: delay, ServerLog: log})
			if err != nil {
				return nil, err
			}
			return wrap(p), nil
		}
	})
	c := clientOf(t, srv)
	hollowProvider(t, c)
	app, err := c.RegisterTaskDefinition(context.Background(), &ecs.RegisterTaskDefinitionInput{Family: aws.String("big"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("app"), Image: aws.String("example/app:1"), Cpu: 768, Memory: aws.Int32(512)}}})
	if err != nil {
		t.Fatal(err)
	}
	return c, app.TaskDefinition.TaskDefinitionArn
}
