package fault

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/capstanhq/capstan/internal/failover"
	"github.com/capstanhq/capstan/internal/testenv"
)

var (
	// linFaults is how long the clients run while servers are killed.
	linFaults = 60 * time.Second
	// linSettle bounds the steady state after the last fault.
	linSettle = 2 * time.Minute
)

const (
	linServerCount = 3
	linClients     = 4
	linDaemons     = 3
	linCP          = "idle" // a capacity provider without instances: daemon deployments end at once
)

// linServers is several `capstan server` processes on one etcd member,
// sharing the local provisioner's machines.
type linServers struct {
	t     *testing.T
	bin   string
	addrs []string
	dirs  []string
	args  []string
	procs []*serverProcess
}

func startLinServers(t *testing.T, bin string, n int) *linServers {
	t.Helper()
	s := &linServers{t: t, bin: bin}
	var eps []string
	for range n {
		s.addrs, s.dirs = append(s.addrs, freeAddr(t)), append(s.dirs, t.TempDir())
		eps = append(eps, "http://"+s.addrs[len(s.addrs)-1])
	}
	if err := os.MkdirAll(filepath.Join(s.dirs[0], "instances"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range s.dirs[1:] {
		if err := os.Symlink(filepath.Join(s.dirs[0], "instances"), filepath.Join(d, "instances")); err != nil {
			t.Fatal(err)
		}
	}
	s.args = append(startEtcdMember(t, bin), "--secrets-key-file", filepath.Join(t.TempDir(), "secrets.key"),
		"--advertise-url", strings.Join(eps, ","))
	s.procs = make([]*serverProcess, n)
	for i := range n {
		s.start(i)
	}
	return s
}

func (s *linServers) start(i int) {
	s.procs[i] = startSharedServer(s.t, s.bin, s.addrs[i], s.dirs[i], s.args...)
}

func (s *linServers) endpoints() []string {
	var out []string
	for _, a := range s.addrs {
		out = append(out, "http://"+a)
	}
	return out
}

// leader is the live server that says it leads, waiting up to d for one.
func (s *linServers) leader(d time.Duration) int {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		for i, p := range s.procs {
			select {
			case <-p.done:
				continue
			default:
			}
			if strings.Contains(p.log.String(), `"leading"`) {
				return i
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no server leads after %s", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *linServers) killAll() {
	for _, p := range s.procs {
		if p != nil {
			p.kill9()
		}
	}
}

// linClient is an ECS client over every server, failing over as the CLI
// does: a read to the next server after any connection error, a write
// only when the connection was never made. The SDK does not retry, so
// each call is sent once per server at most.
func linClient(endpoints []string, creds aws.Credentials) *ecs.Client {
	var eps []*url.URL
	for _, e := range endpoints {
		u, _ := url.Parse(e)
		eps = append(eps, u)
	}
	mw := failover.New("LinFailover", eps, func(ctx context.Context, err error) bool {
		return neverReached(err) || (isRead(middleware.GetOperationName(ctx)) && errors.As(err, new(*smithyhttp.RequestSendError)))
	})
	return ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoints[0]),
		Credentials: credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, ""),
		Retryer:     aws.NopRetryer{}, APIOptions: []func(*middleware.Stack) error{mw.Add}})
}

func isRead(op string) bool {
	return strings.HasPrefix(op, "Describe") || strings.HasPrefix(op, "List")
}

// neverReached is a failure to connect: the request was not sent.
func neverReached(err error) bool {
	var se *smithyhttp.RequestSendError
	if !errors.As(err, &se) {
		return false
	}
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// refusal names a definite refusal ("exists", "notfound"), or "" for an
// error that leaves the outcome open.
func refusal(err error) string {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return ""
	}
	switch {
	case ae.ErrorCode() == "InvalidParameterException" && strings.Contains(ae.ErrorMessage(), "already exists"):
		return "exists"
	case ae.ErrorCode() == "DaemonNotFoundException":
		return "notfound"
	}
	return ""
}

// linHistory records the operations of every client.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	open  []int             // indexes of operations whose outcome is unknown
	runs  map[string]string // RunTask startedBy → task ARN ("" unknown outcome, "-" refused)
	tasks []string          // task ARNs returned by RunTask
	seen  map[string][]string
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *linHistory) add(client int, in linIn, out linOut, call int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: h.now()})
	if out.Unknown {
		h.open = append(h.open, len(h.ops)-1)
	}
}

// linRun is what one client needs.
type linRun struct {
	f       *fleet
	h       *linHistory
	c       *ecs.Client
	daemons []string // ARNs
	jobTD   string
	spare   string // the instance whose state the clients set
	stop    chan struct{}
}

// client issues random operations until stopped.
func (r *linRun) client(id int, wg *sync.WaitGroup) {
	defer wg.Done()
	rng := rand.New(rand.NewPCG(uint64(id), uint64(r.h.start.UnixNano())))
	var live []string // tasks this client started and has not stopped
	n := 0
	for {
		select {
		case <-r.stop:
			return
		case <-time.After(time.Duration(rng.IntN(30)) * time.Millisecond):
		}
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		d := rng.IntN(len(r.daemons))
		switch p := rng.IntN(100); {
		case p < 5:
			r.createDaemon(ctx, id, d)
		case p < 17:
			r.updateDaemon(ctx, id, d)
		case p < 32:
			r.describeDaemon(ctx, id, d)
		case p < 42:
			r.describeDeployment(ctx, id, d, rng)
		case p < 52 && len(live) < 2:
			if arn := r.runTask(ctx, id, fmt.Sprintf("lin-%d-%d", id, n)); arn != "" {
				live = append(live, arn)
			}
		case p < 60 && len(live) > 0:
			i := rng.IntN(len(live))
			r.stopTask(ctx, id, live[i])
			live = slices.Delete(live, i, i+1)
		case p < 80:
			r.describeTasks(ctx, id, rng)
		case p < 87:
			r.setState(ctx, id, []string{"ACTIVE", "DRAINING"}[rng.IntN(2)])
		default:
			r.describeInstance(ctx, id)
		}
		cancel()
	}
}

// daemonTD registers a fresh daemon task definition: each daemon write
// names its own, so that the deployment it made is found afterwards.
func (r *linRun) daemonTD(ctx context.Context) string {
	for range 5 {
		out, err := r.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("lin"),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("lin"), Image: aws.String(r.f.image),
				Memory: aws.Int32(daemonMemory), Command: []string{"sh", "-c", loopCmd}}}})
		if err == nil {
			return aws.ToString(out.DaemonTaskDefinitionArn)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ""
}

// write records a write's outcome; a write that never reached a server is
// left out.
func (r *linRun) write(id int, in linIn, call int64, err error, ok linOut) {
	switch {
	case err == nil:
		r.h.add(id, in, ok, call)
	case neverReached(err):
	case refusal(err) != "":
		r.h.add(id, in, linOut{Err: refusal(err)}, call)
	default:
		r.h.add(id, in, linOut{Unknown: true}, call)
	}
}

func (r *linRun) createDaemon(ctx context.Context, id, d int) {
	td := r.daemonTD(ctx)
	if td == "" {
		return
	}
	in := linIn{Kind: opCreateDaemon, Key: "daemon:" + short(r.daemons[d]), Arg: td}
	call := r.h.now()
	out, err := r.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String(short(r.daemons[d])), ClusterArn: aws.String(r.f.cluster),
		DaemonTaskDefinitionArn: aws.String(td), CapacityProviderArns: []string{linCP}})
	var ok linOut
	if err == nil {
		ok.Dep = aws.ToString(out.DeploymentArn)
		r.saw(in.Key, ok.Dep)
	}
	r.write(id, in, call, err, ok)
}

func (r *linRun) updateDaemon(ctx context.Context, id, d int) {
	td := r.daemonTD(ctx)
	if td == "" {
		return
	}
	in := linIn{Kind: opUpdateDaemon, Key: "daemon:" + short(r.daemons[d]), Arg: td}
	call := r.h.now()
	out, err := r.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(r.daemons[d]),
		DaemonTaskDefinitionArn: aws.String(td), CapacityProviderArns: []string{linCP}})
	var ok linOut
	if err == nil {
		ok.Dep = aws.ToString(out.DeploymentArn)
		r.saw(in.Key, ok.Dep)
	}
	r.write(id, in, call, err, ok)
}

func (r *linRun) describeDaemon(ctx context.Context, id, d int) {
	in := linIn{Kind: opDescribeDaemon, Key: "daemon:" + short(r.daemons[d])}
	call := r.h.now()
	out, err := r.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(r.daemons[d])})
	switch {
	case err == nil && out.Daemon != nil:
		dep := aws.ToString(out.Daemon.DeploymentArn)
		r.h.add(id, in, linOut{Dep: dep}, call)
		r.saw(in.Key, dep)
	case refusal(err) == "notfound":
		r.h.add(id, in, linOut{Err: "notfound"}, call)
	}
}

// saw keeps a deployment of a daemon for later reads.
func (r *linRun) saw(key, dep string) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if !slices.Contains(r.h.seen[key], dep) {
		r.h.seen[key] = append(r.h.seen[key], dep)
	}
}

// describeDeployment reads one of the daemon's deployments that a client
// has seen.
func (r *linRun) describeDeployment(ctx context.Context, id, d int, rng *rand.Rand) {
	key := "daemon:" + short(r.daemons[d])
	r.h.mu.Lock()
	seen := slices.Clone(r.h.seen[key])
	r.h.mu.Unlock()
	if len(seen) == 0 {
		return
	}
	in := linIn{Kind: opDescribeDep, Key: key, Arg: seen[rng.IntN(len(seen))]}
	call := r.h.now()
	out, err := r.c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{in.Arg}})
	switch {
	case err != nil:
	case len(out.DaemonDeployments) == 1:
		r.h.add(id, in, linOut{Status: string(out.DaemonDeployments[0].Status)}, call)
	default:
		r.h.add(id, in, linOut{Status: "MISSING"}, call)
	}
}

func taskOut(tk types.Task) linOut {
	return linOut{Status: aws.ToString(tk.LastStatus), Desired: aws.ToString(tk.DesiredStatus), Instance: aws.ToString(tk.ContainerInstanceArn)}
}

// runTask starts a job; its startedBy tells its tasks apart afterwards,
// so that an unknown outcome can be checked for a duplicate.
func (r *linRun) runTask(ctx context.Context, id int, token string) string {
	call := r.h.now()
	out, err := r.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(r.f.cluster), TaskDefinition: aws.String(r.jobTD),
		StartedBy: aws.String(token), CapacityProviderStrategy: r.f.strategy()})
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	switch {
	case err == nil && len(out.Tasks) == 1:
		arn := aws.ToString(out.Tasks[0].TaskArn)
		r.h.runs[token] = arn
		r.h.tasks = append(r.h.tasks, arn)
		r.h.ops = append(r.h.ops, porcupine.Operation{ClientId: id, Input: linIn{Kind: opRunTask, Key: "task:" + arn, Arg: token},
			Output: taskOut(out.Tasks[0]), Call: call, Return: r.h.now()})
		return arn
	case err == nil || neverReached(err):
		r.h.runs[token] = "-"
	default:
		r.h.runs[token] = ""
	}
	return ""
}

func (r *linRun) stopTask(ctx context.Context, id int, arn string) {
	in := linIn{Kind: opStopTask, Key: "task:" + arn}
	call := r.h.now()
	out, err := r.c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(r.f.cluster), Task: aws.String(arn), Reason: aws.String("linearizability check")})
	var ok linOut
	if err == nil && out.Task != nil {
		ok = taskOut(*out.Task)
	}
	r.write(id, in, call, err, ok)
}

// describeTasks reads up to three tasks the clients started; each task is
// its own operation in the history.
func (r *linRun) describeTasks(ctx context.Context, id int, rng *rand.Rand) {
	r.h.mu.Lock()
	all := slices.Clone(r.h.tasks)
	r.h.mu.Unlock()
	if len(all) == 0 {
		return
	}
	var arns []string
	for range 3 {
		if a := all[rng.IntN(len(all))]; !slices.Contains(arns, a) {
			arns = append(arns, a)
		}
	}
	call := r.h.now()
	out, err := r.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(r.f.cluster), Tasks: arns})
	if err != nil {
		return
	}
	for _, a := range arns {
		o := linOut{Err: "notfound"}
		for _, tk := range out.Tasks {
			if aws.ToString(tk.TaskArn) == a {
				o = taskOut(tk)
			}
		}
		r.h.add(id, linIn{Kind: opDescribeTask, Key: "task:" + a}, o, call)
	}
}

func (r *linRun) setState(ctx context.Context, id int, status string) {
	in := linIn{Kind: opSetState, Key: "instance:" + r.spare, Arg: status}
	call := r.h.now()
	out, err := r.c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String(r.f.cluster),
		ContainerInstances: []string{r.spare}, Status: types.ContainerInstanceStatus(status)})
	var ok linOut
	if err == nil {
		ok.Status = "MISSING"
		if len(out.ContainerInstances) == 1 {
			ok.Status = aws.ToString(out.ContainerInstances[0].Status)
		}
	}
	r.write(id, in, call, err, ok)
}

func (r *linRun) describeInstance(ctx context.Context, id int) {
	call := r.h.now()
	out, err := r.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(r.f.cluster), ContainerInstances: []string{r.spare}})
	if err != nil {
		return
	}
	o := linOut{Status: "MISSING"}
	if len(out.ContainerInstances) == 1 {
		o.Status = aws.ToString(out.ContainerInstances[0].Status)
	}
	r.h.add(id, linIn{Kind: opDescribeInst, Key: "instance:" + r.spare}, o, call)
}

// TestLinearizableAPI runs concurrent ECS clients against several servers
// on one etcd member while servers are killed with SIGKILL and restarted
// (the leader, then another), records every call and its answer, and
// checks the history with porcupine against the sequential model of
// linmodel_test.go: daemons (create, update, the current deployment,
// deployment statuses), standalone tasks (run, stop, describe) and a
// container instance's state. Then the fleet's invariants as after every
// fault, and no RunTask that made two tasks.
func TestLinearizableAPI(t *testing.T) {
	skipHollow(t, "server processes with the local provisioner are killed; hollow agents would live in them")
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	servers := startLinServers(t, bin, linServerCount)
	servers.leader(30 * time.Second)
	creds := aws.Credentials{AccessKeyID: processKey, SecretAccessKey: processSecret}
	f := &fleet{t: t, url: "http://" + servers.addrs[0], rt: rt, bin: bin, dataDir: servers.dirs[0], creds: creds}
	t.Cleanup(func() {
		servers.killAll()
		f.terminateAll()
	})
	f.init()
	f.c = linClient(servers.endpoints(), creds)
	n := *instancesFlag
	f.setup(n, false)
	ctx := context.Background()

	// One more instance, held by a job: the clients drain and activate it,
	// which moves no service task.
	spareTD := f.taskDef("spare", appMemory)
	ro, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(spareTD), CapacityProviderStrategy: f.strategy()})
	if err != nil || len(ro.Tasks) != 1 {
		t.Fatalf("run the spare instance's job: %v %+v", err, ro)
	}
	spareJob := aws.ToString(ro.Tasks[0].TaskArn)
	f.jobs = append(f.jobs, spareJob)
	f.converge("spare instance", setupDeadline())
	spare := aws.ToString(f.describe([]string{spareJob})[0].ContainerInstanceArn)

	// Daemons on a capacity provider without instances.
	if _, err := f.c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String(linCP), Cluster: aws.String(f.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(1)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(1024)}}}}}); err != nil {
		t.Fatal(err)
	}
	r := &linRun{f: f, c: f.c, jobTD: f.taskDef("job", jobMemory), spare: spare, stop: make(chan struct{}),
		h: &linHistory{start: time.Now(), runs: map[string]string{}, seen: map[string][]string{}}}
	base := strings.TrimSuffix(f.daemons[0].Arn, "guard")
	for i := range linDaemons {
		r.daemons = append(r.daemons, fmt.Sprintf("%slin%d", base, i))
	}

	var wg sync.WaitGroup
	for i := range linClients {
		wg.Add(1)
		go r.client(i, &wg)
	}
	// The faults: kill -9 the leader, then a server that does not lead;
	// each is started again on its data dir after two seconds.
	end := time.Now().Add(linFaults)
	kills := 0
	for i := 0; time.Now().Before(end); i++ {
		victim := servers.leader(30 * time.Second)
		what := "leader"
		if i%2 == 1 {
			victim, what = (victim+1+rand.IntN(linServerCount-1))%linServerCount, "non-leader"
		}
		servers.procs[victim].kill9()
		kills++
		t.Logf("%.1fs: kill -9 %s server %d", time.Since(r.h.start).Seconds(), what, victim)
		time.Sleep(2 * time.Second)
		servers.start(victim)
		time.Sleep(min(time.Until(end), 8*time.Second))
	}
	close(r.stop)
	wg.Wait()
	servers.leader(30 * time.Second)

	// The spare instance back in service, as the last write.
	for range 10 {
		call := r.h.now()
		out, err := f.c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String(f.cluster),
			ContainerInstances: []string{spare}, Status: types.ContainerInstanceStatusActive})
		answer := linOut{Status: "MISSING"}
		if err == nil && len(out.ContainerInstances) == 1 {
			answer.Status = aws.ToString(out.ContainerInstances[0].Status) // REGISTERING while its daemons start
		}
		r.write(0, linIn{Kind: opSetState, Key: "instance:" + spare, Arg: "ACTIVE"}, call, err, answer)
		if err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	f.jobs = append(f.jobs, r.h.tasks...)
	f.converge("after the faults", scaled(linSettle))
	f.verify("linearizability run")

	// The checks read through new connections, retrying: a pooled one
	// may still be to a killed server.
	r.c = linClient(servers.endpoints(), creds)
	r.resolve(ctx)
	r.checkRuns(ctx)
	r.check()
	t.Logf("%d server kills; %d operations by %d clients, %d with unknown outcome", kills, len(r.h.ops), linClients, len(r.h.open))
}

// resolve finds out which daemon writes with a lost answer were applied:
// each write named its own task definition, and a deployment records its
// revision's. A write applied twice, or an answered one whose deployment
// is missing, fails the test.
func (r *linRun) resolve(ctx context.Context) {
	t := r.f.t
	t.Helper()
	depOf := map[string][]string{} // task definition → deployments
	for _, d := range r.daemons {
		var revs []string
		revDeps := map[string][]string{}
		var next *string
		for {
			var out *ecs.ListDaemonDeploymentsOutput
			err := reread(func() (err error) {
				out, err = r.c.ListDaemonDeployments(ctx, &ecs.ListDaemonDeploymentsInput{DaemonArn: aws.String(d), NextToken: next})
				return err
			})
			if refusal(err) == "notfound" {
				break
			}
			if err != nil {
				t.Fatalf("list deployments of %s: %v", d, err)
			}
			for _, s := range out.DaemonDeployments {
				rev := aws.ToString(s.TargetDaemonRevisionArn)
				revs = append(revs, rev)
				revDeps[rev] = append(revDeps[rev], aws.ToString(s.DaemonDeploymentArn))
			}
			if next = out.NextToken; next == nil {
				break
			}
		}
		for _, part := range chunks(revs, 20) {
			var out *ecs.DescribeDaemonRevisionsOutput
			err := reread(func() (err error) {
				out, err = r.c.DescribeDaemonRevisions(ctx, &ecs.DescribeDaemonRevisionsInput{DaemonRevisionArns: part})
				return err
			})
			if err != nil {
				t.Fatalf("describe revisions of %s: %v", d, err)
			}
			for _, rv := range out.DaemonRevisions {
				td := aws.ToString(rv.DaemonTaskDefinitionArn)
				depOf[td] = append(depOf[td], revDeps[aws.ToString(rv.DaemonRevisionArn)]...)
			}
		}
	}
	end := r.h.now() + 1
	var drop []int
	for i, op := range r.h.ops {
		in, out := op.Input.(linIn), op.Output.(linOut)
		if in.Kind != opCreateDaemon && in.Kind != opUpdateDaemon {
			if out.Unknown {
				r.h.ops[i].Return = end
			}
			continue
		}
		deps := depOf[in.Arg]
		switch {
		case len(deps) > 1:
			t.Errorf("%s with %s made %d deployments: %v", in.Kind, in.Arg, len(deps), deps)
		case out.Unknown && len(deps) == 1:
			out.Dep = deps[0]
			r.h.ops[i].Output, r.h.ops[i].Return = out, end
		case out.Unknown:
			drop = append(drop, i)
		case out.Err == "" && (len(deps) != 1 || deps[0] != out.Dep):
			t.Errorf("%s with %s answered deployment %s; recorded: %v", in.Kind, in.Arg, out.Dep, deps)
		case out.Err != "" && len(deps) > 0:
			t.Errorf("%s with %s was refused (%s) but made %v", in.Kind, in.Arg, out.Err, deps)
		}
	}
	for _, i := range slices.Backward(drop) {
		r.h.ops = slices.Delete(r.h.ops, i, i+1)
	}
}

// reread runs a read until it answers (a definite refusal is an answer),
// a few times at most.
func reread(read func() error) error {
	var err error
	for range 10 {
		if err = read(); err == nil || refusal(err) != "" {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
	return err
}

// checkRuns: a RunTask made exactly one task when it answered one, none
// when refused, at most one when its answer was lost.
func (r *linRun) checkRuns(ctx context.Context) {
	t := r.f.t
	t.Helper()
	var arns []string
	for _, desired := range []types.DesiredStatus{types.DesiredStatusRunning, types.DesiredStatusStopped} {
		for p := ecs.NewListTasksPaginator(r.c, &ecs.ListTasksInput{Cluster: aws.String(r.f.cluster), DesiredStatus: desired}); p.HasMorePages(); {
			var out *ecs.ListTasksOutput
			err := reread(func() (err error) {
				out, err = p.NextPage(ctx)
				return err
			})
			if err != nil {
				t.Fatalf("list tasks: %v", err)
			}
			arns = append(arns, out.TaskArns...)
		}
	}
	made := map[string][]string{}
	for _, part := range chunks(arns, 100) {
		var out *ecs.DescribeTasksOutput
		err := reread(func() (err error) {
			out, err = r.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(r.f.cluster), Tasks: part})
			return err
		})
		if err != nil {
			t.Fatalf("describe tasks: %v", err)
		}
		for _, tk := range out.Tasks {
			if by := aws.ToString(tk.StartedBy); strings.HasPrefix(by, "lin-") {
				made[by] = append(made[by], aws.ToString(tk.TaskArn))
			}
		}
	}
	unknown := 0
	for token, arn := range r.h.runs {
		got := made[token]
		switch arn {
		case "":
			unknown++
			if len(got) > 1 {
				t.Errorf("RunTask %s (answer lost) made %d tasks: %v", token, len(got), got)
			}
		case "-":
			if len(got) > 0 {
				t.Errorf("RunTask %s was refused but made %v", token, got)
			}
		default:
			if len(got) != 1 || got[0] != arn {
				t.Errorf("RunTask %s answered %s; tasks with its startedBy: %v", token, arn, got)
			}
		}
	}
	t.Logf("%d RunTask calls (%d with the answer lost), %d tasks found", len(r.h.runs), unknown, len(made))
}

// check runs porcupine over the history; a history that is not
// linearizable is written as porcupine's HTML visualization.
func (r *linRun) check() {
	t := r.f.t
	t.Helper()
	initial := func(key string) linState {
		if strings.HasPrefix(key, "instance:") {
			return linState{status: "ACTIVE"}
		}
		return linState{}
	}
	model := linModel(initial)
	kinds := map[string]int{}
	for _, op := range r.h.ops {
		kinds[op.Input.(linIn).Kind]++
	}
	t.Logf("history: %v", kinds)
	res, info := porcupine.CheckOperationsVerbose(model, r.h.ops, 2*time.Minute)
	if res == porcupine.Ok {
		t.Logf("linearizable: %d operations", len(r.h.ops))
		return
	}
	path := filepath.Join(artifactDir(t), strings.ReplaceAll(t.Name(), "/", "_")+".porcupine.html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		path = "(could not write the visualization: " + err.Error() + ")"
	}
	t.Errorf("the history of %d operations is not linearizable (porcupine: %s); visualization: %s", len(r.h.ops), res, path)
}

// artifactDir is the test's artifact directory with -artifacts, else a
// kept temporary directory (as fleet.dump does).
func artifactDir(t *testing.T) string {
	if fl := flag.Lookup("test.artifacts"); fl != nil && fl.Value.String() == "true" {
		return t.ArtifactDir()
	}
	if d, err := os.MkdirTemp("", "capstan-fault-"); err == nil {
		return d
	}
	return os.TempDir()
}
