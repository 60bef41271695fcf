package fault

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/coverage"
	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/provision/local"
	simprov "github.com/capstanhq/capstan/internal/provision/sim"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

var instancesFlag = flag.Int("fault.instances", 3, "instances in each scenario's fleet (one service task per instance)")

// hollowFlag runs the fleets on hollow instances (hollow_test.go).
var hollowFlag = flag.Bool("fault.hollow", false, "hollow instances: the sim provisioner's agents, in the test process on simulated containers, instead of agent processes on Docker (scenarios that need processes skip)")

// Sizes: instances of 1 vCPU and 1024 MiB hold one app task (600 MiB)
// next to the daemons, so a service of N tasks needs N instances, and
// leave room for a few standalone jobs.
const (
	appMemory    = 600
	jobMemory    = 48
	daemonMemory = 32
	cpName       = "fleet"
	serviceName  = "web"
	loopCmd      = "trap 'exit 0' TERM; while true; do sleep 1; done"
)

// setupDeadline is how long a fresh fleet of N instances may take to come
// up (instances launch one at a time per capacity provider).
func setupDeadline() time.Duration { return scaled(90 * time.Second) }

// scaled grows a deadline stated for the default 3 instances with the
// fleet size.
func scaled(d time.Duration) time.Duration {
	n := max(*instancesFlag, 3)
	return d * time.Duration(n) / 3
}

// agentEnv is what every provisioned agent gets: the test image is only
// local, and quick stops keep drains short.
var agentEnv = map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT": "5s"}

// fleet is one scenario's server, cluster and bookkeeping.
type fleet struct {
	t          *testing.T
	url        string
	creds      aws.Credentials
	c          *ecs.Client
	ev         *coverage.Client
	rt         containerLister      // Docker, or the hollow instances' simulated hosts
	sim        *simprov.Provisioner // the hollow instances, with -fault.hollow
	image      string
	bin        string
	dataDir    string
	cluster    string
	clusterArn string
	cpArn      string
	daemons    []coverage.Daemon
	daemonTDs  map[string]string // daemon → its task definition ARN as created
	services   map[string]int32  // desired counts
	jobs       []string          // standalone tasks the test started
	h          *coverage.History
	from       time.Time
}

// newFleet starts an in-process server with the local provisioner; edit
// may change its configuration (listen address, advertise URL).
func newFleet(t *testing.T, edit func(*server.Config)) *fleet {
	t.Helper()
	if *hollowFlag {
		return newHollowFleet(t, edit)
	}
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	srv := testenv.StartServerWith(t, func(c *server.Config) {
		c.Provisioner, c.AgentBinary, c.AgentEnv = "local", bin, agentEnv
		if edit != nil {
			edit(c)
		}
	})
	f := &fleet{t: t, url: srv.URL, rt: rt, bin: bin, dataDir: srv.Config.DataDir,
		creds: aws.Credentials{AccessKeyID: srv.Config.AdminKeyID, SecretAccessKey: srv.Config.AdminSecret}}
	t.Cleanup(func() {
		srv.Stop()
		f.terminateAll()
	})
	f.init()
	return f
}

// init makes the clients and a cluster whose name is unique to the test,
// so its containers are told apart from anyone else's.
func (f *fleet) init() {
	f.t.Helper()
	f.c = ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(f.url),
		Credentials: credentials.NewStaticCredentialsProvider(f.creds.AccessKeyID, f.creds.SecretAccessKey, ""),
		Retryer:     testenv.Retryer()})
	f.ev = coverage.NewClient(f.url, f.creds, nil)
	f.h = coverage.NewHistory()
	if f.image == "" {
		f.image = testenv.BusyboxImage(f.t)
	}
	f.services = map[string]int32{}
	f.daemonTDs = map[string]string{}
	b := make([]byte, 4)
	rand.Read(b)
	f.cluster = "fault-" + hex.EncodeToString(b)
	out, err := f.c.CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String(f.cluster)})
	if err != nil {
		f.t.Fatal(err)
	}
	f.clusterArn = aws.ToString(out.Cluster.ClusterArn)
	f.from = time.Now()
	f.t.Cleanup(func() {
		if f.t.Failed() {
			f.dump("failed")
		}
	})
}

// terminateAll terminates every local instance left in the data dir, with
// its containers and daemon network, as the e2e tests do.
func (f *fleet) terminateAll() {
	rt, ok := f.rt.(*docker.Runtime)
	if !ok {
		return
	}
	p, err := local.New(f.bin, filepath.Join(f.dataDir, "instances"), rt, slog.New(slog.DiscardHandler))
	if err != nil {
		return
	}
	handles, _ := p.Handles()
	for _, h := range handles {
		if err := p.Terminate(context.Background(), h); err != nil {
			f.t.Logf("cleanup: terminate %s: %v", h, err)
		}
	}
}

// setup builds the standard fleet: a critical daemon (and, with logs, a
// non-critical one) on a managed-instances capacity provider, and a
// service of n tasks that needs n instances; it returns when converged.
func (f *fleet) setup(n int, logs bool) {
	f.t.Helper()
	ctx := context.Background()
	out, err := f.c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String(cpName), Cluster: aws.String(f.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn:      aws.String("arn:aws:iam::123456789012:role/capstan"),
			InfrastructureOptimization: &types.InfrastructureOptimization{ScaleInAfter: aws.Int32(-1)},
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(1)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(1024)}}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.cpArn = aws.ToString(out.CapacityProvider.CapacityProviderArn)
	f.daemon("guard", true, loopCmd)
	if logs {
		f.daemon("logs", false, loopCmd)
	}
	td := f.taskDef(serviceName, appMemory)
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String(serviceName),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(int32(n)), CapacityProviderStrategy: f.strategy()}); err != nil {
		f.t.Fatal(err)
	}
	f.services[serviceName] = int32(n)
	f.converge("setup", setupDeadline())
}

func (f *fleet) strategy() []types.CapacityProviderStrategyItem {
	return []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cpName)}}
}

// daemonTaskDef registers a daemon task definition of family name.
func (f *fleet) daemonTaskDef(family string, cmd string) string {
	f.t.Helper()
	td, err := f.c.RegisterDaemonTaskDefinition(context.Background(), &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(family),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String(family), Image: aws.String(f.image),
			Memory: aws.Int32(daemonMemory), Command: []string{"sh", "-c", cmd}, Environment: f.simBehaviour(cmd)}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return aws.ToString(td.DaemonTaskDefinitionArn)
}

// daemon creates a daemon on the fleet's capacity provider.
func (f *fleet) daemon(name string, critical bool, cmd string) string {
	f.t.Helper()
	td := f.daemonTaskDef(name, cmd)
	f.daemonTDs[name] = td
	out, err := f.c.CreateDaemon(context.Background(), &ecs.CreateDaemonInput{DaemonName: aws.String(name), ClusterArn: aws.String(f.cluster),
		DaemonTaskDefinitionArn: aws.String(td), CapacityProviderArns: []string{f.cpArn}, Critical: aws.Bool(critical)})
	if err != nil {
		f.t.Fatal(err)
	}
	arn := aws.ToString(out.DaemonArn)
	f.daemons = append(f.daemons, coverage.Daemon{Name: name, Arn: arn, Critical: critical, CPs: []string{cpName}, Created: time.Now()})
	return arn
}

// taskDef registers a one-container task definition that runs until
// stopped.
func (f *fleet) taskDef(family string, memory int32) string {
	f.t.Helper()
	out, err := f.c.RegisterTaskDefinition(context.Background(), &ecs.RegisterTaskDefinitionInput{Family: aws.String(family),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("main"), Image: aws.String(f.image), Memory: aws.Int32(memory),
			Command: []string{"sh", "-c", loopCmd}}}})
	if err != nil {
		f.t.Fatalf("register %s: %v", family, err)
	}
	return aws.ToString(out.TaskDefinition.TaskDefinitionArn)
}

// runJobs starts n standalone tasks on the capacity provider and keeps
// their ARNs to account for them later.
func (f *fleet) runJobs(n int) []string {
	f.t.Helper()
	td := f.taskDef("job", jobMemory)
	var arns []string
	for len(arns) < n {
		out, err := f.c.RunTask(context.Background(), &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td),
			Count: aws.Int32(int32(n - len(arns))), CapacityProviderStrategy: f.strategy()})
		if err != nil {
			f.t.Fatalf("run jobs: %v", err)
		}
		if len(out.Tasks) == 0 {
			f.t.Fatalf("run jobs: %+v", out.Failures)
		}
		for _, tk := range out.Tasks {
			arns = append(arns, aws.ToString(tk.TaskArn))
		}
	}
	f.jobs = append(f.jobs, arns...)
	return arns
}

// snapshot is the fleet as the API and Docker show it at one moment.
type snapshot struct {
	instances  map[string]types.ContainerInstance // not INACTIVE
	tasks      map[string]types.Task              // desired RUNNING, and the jobs
	containers []runtime.Container                // of the cluster, running
}

func chunks(xs []string, n int) [][]string {
	var out [][]string
	for len(xs) > n {
		out = append(out, xs[:n])
		xs = xs[n:]
	}
	if len(xs) > 0 {
		out = append(out, xs)
	}
	return out
}

func (f *fleet) snapshot(ctx context.Context) (*snapshot, error) {
	s := &snapshot{instances: map[string]types.ContainerInstance{}, tasks: map[string]types.Task{}}
	var cis []string
	for p := ecs.NewListContainerInstancesPaginator(f.c, &ecs.ListContainerInstancesInput{Cluster: aws.String(f.cluster)}); p.HasMorePages(); {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		cis = append(cis, out.ContainerInstanceArns...)
	}
	for _, part := range chunks(cis, 100) {
		out, err := f.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(f.cluster), ContainerInstances: part})
		if err != nil {
			return nil, err
		}
		for _, ci := range out.ContainerInstances {
			s.instances[aws.ToString(ci.ContainerInstanceArn)] = ci
		}
	}
	arns := slices.Clone(f.jobs)
	for p := ecs.NewListTasksPaginator(f.c, &ecs.ListTasksInput{Cluster: aws.String(f.cluster)}); p.HasMorePages(); {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		arns = append(arns, out.TaskArns...)
	}
	slices.Sort(arns)
	for _, part := range chunks(slices.Compact(arns), 100) {
		out, err := f.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(f.cluster), Tasks: part})
		if err != nil {
			return nil, err
		}
		for _, tk := range out.Tasks {
			s.tasks[aws.ToString(tk.TaskArn)] = tk
		}
	}
	cs, err := f.rt.List(ctx, map[string]string{"com.capstan.cluster": f.cluster})
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.State == runtime.StateRunning && c.Labels["com.capstan.task-arn"] != "" {
			s.containers = append(s.containers, c)
		}
	}
	return s, nil
}

// unconverged says why the fleet is not in its steady state, or "" when it
// is: every instance ACTIVE and connected; every service at its desired
// count of RUNNING tasks; exactly one RUNNING task of each daemon on every
// ACTIVE instance; every job RUNNING or STOPPED; Docker running exactly
// the containers of the RUNNING tasks, each once, on their instance.
func (f *fleet) unconverged(s *snapshot) string {
	for arn, ci := range s.instances {
		if aws.ToString(ci.Status) != "ACTIVE" || !ci.AgentConnected {
			return fmt.Sprintf("instance %s is %s (connected %v)", arn, aws.ToString(ci.Status), ci.AgentConnected)
		}
	}
	type key struct{ group, instance string }
	live := map[key]int{}
	running := map[string]int{}
	for arn, tk := range s.tasks {
		st, group, inst := aws.ToString(tk.LastStatus), aws.ToString(tk.Group), aws.ToString(tk.ContainerInstanceArn)
		if slices.Contains(f.jobs, arn) {
			if st != "RUNNING" && st != "STOPPED" {
				return fmt.Sprintf("job %s is %s", arn, st)
			}
		}
		if st == "STOPPED" {
			continue
		}
		if _, ok := s.instances[inst]; !ok {
			return fmt.Sprintf("task %s (%s) is %s on %q, not a live instance", arn, group, st, inst)
		}
		if st != "RUNNING" {
			return fmt.Sprintf("task %s (%s) is %s", arn, group, st)
		}
		if aws.ToString(tk.DesiredStatus) != "RUNNING" {
			return fmt.Sprintf("task %s (%s) is stopping", arn, group)
		}
		live[key{group, inst}]++
		running[group]++
	}
	for name, want := range f.services {
		if got := running["service:"+name]; got != int(want) {
			return fmt.Sprintf("service %s runs %d of %d", name, got, want)
		}
	}
	for arn := range s.instances {
		for _, d := range f.daemons {
			if n := live[key{"daemon:" + d.Name, arn}]; n != 1 {
				return fmt.Sprintf("instance %s runs %d tasks of daemon %s", arn, n, d.Name)
			}
		}
	}
	seen := map[string]int{}
	for _, c := range s.containers {
		arn := c.Labels["com.capstan.task-arn"]
		tk, ok := s.tasks[arn]
		if !ok || aws.ToString(tk.LastStatus) != "RUNNING" {
			return fmt.Sprintf("container %s of task %s runs, the task is not RUNNING", c.ID[:12], arn)
		}
		if c.Labels["com.capstan.instance"] != aws.ToString(tk.ContainerInstanceArn) {
			return fmt.Sprintf("container %s of task %s runs on %s, the task is on %s", c.ID[:12], arn, c.Labels["com.capstan.instance"], aws.ToString(tk.ContainerInstanceArn))
		}
		seen[arn]++
	}
	for arn, tk := range s.tasks {
		if aws.ToString(tk.LastStatus) == "RUNNING" && seen[arn] != len(tk.Containers) {
			return fmt.Sprintf("task %s is RUNNING with %d running containers of %d", arn, seen[arn], len(tk.Containers))
		}
	}
	return ""
}

// converge waits up to deadline for the steady state, and for every extra
// condition (each says what it still misses, "" when met), and returns how
// long it took; past the deadline the test fails with the reason and the
// recorded history.
func (f *fleet) converge(what string, deadline time.Duration, extra ...func(*snapshot) string) time.Duration {
	f.t.Helper()
	start := time.Now()
	why := "not checked yet"
	for time.Since(start) < deadline {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := f.snapshot(ctx)
		cancel()
		if err != nil {
			why = err.Error()
		} else if why = f.unconverged(s); why == "" {
			for _, x := range extra {
				if why = x(s); why != "" {
					break
				}
			}
		}
		if why == "" {
			took := time.Since(start)
			f.t.Logf("%s: converged in %.1fs (deadline %s)", what, took.Seconds(), deadline)
			record(f.t.Name(), what, took, deadline)
			return took
		}
		time.Sleep(250 * time.Millisecond)
	}
	f.t.Fatalf("%s: not converged within %s: %s (events: %s)", what, deadline, why, f.dump(what))
	return 0
}

// gone is a convergence condition: the instances are no longer listed
// (deregistered).
func gone(instances ...string) func(*snapshot) string {
	return func(s *snapshot) string {
		for _, arn := range instances {
			if ci, ok := s.instances[arn]; ok {
				return fmt.Sprintf("instance %s is still %s", arn, aws.ToString(ci.Status))
			}
		}
		return ""
	}
}

// fetch reads the events recorded since the last fetch into the history.
func (f *fleet) fetch() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.h.Fetch(ctx, f.ev, f.cluster); err != nil {
		f.t.Fatalf("read events: %v", err)
	}
}

// dump writes the recorded history as JSON lines and returns the file's
// path: under the test's artifact directory with -artifacts, else in a
// temporary directory that is kept.
func (f *fleet) dump(what string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.h.Fetch(ctx, f.ev, f.cluster) // best effort: the server may be down
	dir := ""
	if fl := flag.Lookup("test.artifacts"); fl != nil && fl.Value.String() == "true" {
		dir = f.t.ArtifactDir()
	} else if d, err := os.MkdirTemp("", "capstan-fault-"); err == nil {
		dir = d
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(f.t.Name() + "-" + what)
	path := filepath.Join(dir, name+".events.jsonl")
	fh, err := os.Create(path)
	if err != nil {
		return "(could not write the events: " + err.Error() + ")"
	}
	defer fh.Close()
	w := bufio.NewWriter(fh)
	enc := json.NewEncoder(w)
	for _, ev := range f.h.Events() {
		enc.Encode(ev)
	}
	w.Flush()
	f.t.Logf("event history (%d events) written to %s", len(f.h.Events()), path)
	return path
}

// verify checks the recorded history from the fleet's start: the record
// invariants and no coverage gap. A violation fails the test with the
// history written out.
func (f *fleet) verify(what string) {
	f.t.Helper()
	f.fetch()
	v := recordViolations(f.h)
	var critical []coverage.Daemon
	for _, d := range f.daemons {
		if d.Critical {
			critical = append(critical, d)
		}
	}
	if gaps := f.h.Gaps(critical, f.from, time.Now(), coverage.Options{InferRepair: true}); len(gaps) > 0 {
		b, _ := json.Marshal(gaps)
		v = append(v, fmt.Sprintf("coverage gap %.3fs: %s", coverage.TotalSeconds(gaps), b))
	}
	if len(v) > 0 {
		f.t.Errorf("%s: %d invariant violations:\n  %s\nevents: %s", what, len(v), strings.Join(v, "\n  "), f.dump(what))
	}
}

// statusRank orders the ECS task statuses.
var statusRank = map[string]int{"PROVISIONING": 0, "PENDING": 1, "ACTIVATING": 2, "RUNNING": 3, "DEACTIVATING": 4,
	"STOPPING": 5, "DEPROVISIONING": 6, "STOPPED": 7}

// recordViolations checks the history for what must never be recorded:
// two live tasks of one daemon on one instance at the same moment, a task
// on two instances, a task status going backwards, an instance coming back
// from INACTIVE.
func recordViolations(h *coverage.History) []string {
	var v []string
	type key struct{ daemon, instance string }
	type span struct {
		arn      string
		from, to time.Time
	}
	spans := map[key][]span{}
	for _, t := range h.Tasks() {
		for i := 1; i < len(t.States); i++ {
			if statusRank[t.States[i].Status] < statusRank[t.States[i-1].Status] {
				v = append(v, fmt.Sprintf("task %s (%s) went back from %s to %s at %s", t.Arn, t.Group, t.States[i-1].Status, t.States[i].Status, t.States[i].At.Format(time.RFC3339Nano)))
			}
		}
		d, ok := strings.CutPrefix(t.Group, "daemon:")
		if !ok || len(t.States) == 0 {
			continue
		}
		sp := span{arn: t.Arn, from: t.States[0].At, to: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
		if s, ok := t.First("STOPPED"); ok {
			sp.to = s.At
		}
		spans[key{d, t.Instance}] = append(spans[key{d, t.Instance}], sp)
	}
	for k, ss := range spans {
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				if ss[i].from.Before(ss[j].to) && ss[j].from.Before(ss[i].to) {
					v = append(v, fmt.Sprintf("daemon %s has two live tasks on %s: %s and %s", k.daemon, k.instance, ss[i].arn, ss[j].arn))
				}
			}
		}
	}
	for _, in := range h.Instances() {
		for i := 1; i < len(in.States); i++ {
			if in.States[i-1].Status == "INACTIVE" && in.States[i].Status != "INACTIVE" {
				v = append(v, fmt.Sprintf("instance %s came back from INACTIVE to %s", in.Arn, in.States[i].Status))
			}
		}
	}
	// A task is recorded on one instance only.
	where := map[string]string{}
	for _, ev := range h.Events() {
		var d struct {
			TaskArn  string `json:"taskArn"`
			Instance string `json:"containerInstanceArn"`
		}
		if ev.DetailType != events.TaskStateChange || json.Unmarshal(ev.Detail, &d) != nil || d.Instance == "" {
			continue
		}
		if w, ok := where[d.TaskArn]; ok && w != d.Instance {
			v = append(v, fmt.Sprintf("task %s recorded on %s and on %s", d.TaskArn, w, d.Instance))
		}
		where[d.TaskArn] = d.Instance
	}
	slices.Sort(v)
	return slices.Compact(v)
}

// agent is a local instance's agent process.
type agent struct {
	instance string // container instance ARN
	pid      int
	dir      string
}

// agents maps the live local instances to their agent processes, from the
// provisioner's pid files and the "registered" line of each agent's log.
func (f *fleet) agents() map[string]agent {
	if f.sim != nil {
		return f.hollowAgents()
	}
	out := map[string]agent{}
	root := filepath.Join(f.dataDir, "instances")
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || syscall.Kill(pid, 0) != nil {
			continue
		}
		arn := registeredAs(filepath.Join(dir, "agent.log"))
		if arn != "" {
			out[arn] = agent{instance: arn, pid: pid, dir: dir}
		}
	}
	return out
}

// registeredAs is the last instance an agent's log says it registered.
func registeredAs(logPath string) string {
	fh, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer fh.Close()
	arn := ""
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg      string `json:"msg"`
			Instance string `json:"instance"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "registered" && l.Instance != "" {
			arn = l.Instance
		}
	}
	return arn
}

// kill9 kills an instance's agent with SIGKILL: the machine is gone.
func (f *fleet) kill9(instance string) {
	f.t.Helper()
	a, ok := f.agents()[instance]
	if !ok {
		f.t.Fatalf("no agent process for %s", instance)
	}
	if f.sim != nil {
		f.hollowKill(a)
		return
	}
	if err := syscall.Kill(a.pid, syscall.SIGKILL); err != nil {
		f.t.Fatalf("kill -9 %d: %v", a.pid, err)
	}
	f.t.Logf("kill -9 agent %d of %s", a.pid, instance)
}

// serviceInstances lists the instances running the service's tasks.
func (f *fleet) serviceInstances(s *snapshot, service string) []string {
	var out []string
	for _, tk := range s.tasks {
		if aws.ToString(tk.Group) == "service:"+service && aws.ToString(tk.LastStatus) == "RUNNING" {
			out = append(out, aws.ToString(tk.ContainerInstanceArn))
		}
	}
	slices.Sort(out)
	return out
}

func (f *fleet) mustSnapshot() *snapshot {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := f.snapshot(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start)
}
