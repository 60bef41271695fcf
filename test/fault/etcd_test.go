package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"
	"github.com/capstanhq/capstan/internal/failover"
)

var (
	// etcdKillDeadline bounds a rollout over the fleet with the etcd leader
	// member killed and restarted in its middle (scaled).
	etcdKillDeadline = 4 * time.Minute
	// quorumLoss is how long two of the three members are stopped.
	quorumLoss = 30 * time.Second
	// quorumDeadline bounds recovery once the quorum is back: a new etcd
	// leader, sessions and leadership renewed, the held-back write applied.
	quorumDeadline = 2 * time.Minute
	// etcdCutDeadline bounds the other server taking over (the cut
	// leader's election lease ends in 10 s) and the agents moving to it.
	etcdCutDeadline = 90 * time.Second
)

// TestKillEtcdLeader kills the etcd leader member with SIGKILL in the
// middle of a daemon rollout by instance replacement, and starts it again
// on its data dir 10 s later. The rollout ends SUCCESSFUL with each
// instance replaced once, and the record holds.
func TestKillEtcdLeader(t *testing.T) {
	n := *instancesFlag
	e := newEtcdFleet(t, n, false, false)
	td := e.daemonTaskDef("guard", "echo v2; "+loopCmd)
	dep := e.updateDaemon(td)
	ctx := context.Background()
	eventually(t, scaled(etcdKillDeadline), "the rollout under way (an instance draining)", func() bool {
		out, err := e.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(e.cluster), Status: types.ContainerInstanceStatusDraining})
		return err == nil && len(out.ContainerInstanceArns) > 0
	})
	lead := e.etcd.leader()
	lead.kill9()
	t.Logf("kill -9 etcd leader member %s", lead.name)
	time.Sleep(10 * time.Second)
	lead.start(t, e.bin)
	lead.awaitReady(t)
	t.Logf("member %s restarted; the leader is now %s", lead.name, e.etcd.leader().name)
	e.converge("etcd leader killed mid-rollout", scaled(etcdKillDeadline), e.ended(dep, types.DaemonDeploymentStatusSuccessful, td))
	e.verify("etcd leader killed mid-rollout")
	if all, active := e.instanceCounts(); all != 2*n || active != n {
		t.Errorf("%d instances registered, %d ACTIVE at the end; want %d and %d (each of %d replaced once)", all, active, 2*n, n, n)
	}
}

// instanceCounts counts the instances the record names, and those ACTIVE
// at its end.
func (f *fleet) instanceCounts() (all, active int) {
	for _, in := range f.h.Instances() {
		all++
		if len(in.States) > 0 && in.States[len(in.States)-1].Status == "ACTIVE" {
			active++
		}
	}
	return all, active
}

// apiError is an API call's ECS error code and message.
func apiError(err error) (code, msg string) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode(), ae.ErrorMessage()
	}
	return "", err.Error()
}

// quiet is what shows a controller acting: the containers Docker runs
// for the cluster and the agent processes (instances).
func (f *fleet) quiet() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := f.rt.List(ctx, map[string]string{"com.capstan.cluster": f.cluster})
	if err != nil {
		f.t.Fatal(err)
	}
	var ids []string
	for _, c := range s {
		ids = append(ids, c.ID[:12]+" "+string(c.State))
	}
	for arn, a := range f.agents() {
		ids = append(ids, fmt.Sprintf("agent %d %s", a.pid, arn))
	}
	slices.Sort(ids)
	return strings.Join(ids, "\n")
}

// TestQuorumLoss stops two of the three etcd members (SIGSTOP: their
// connections stay open and silent, as in a partition) for quorumLoss,
// with API calls going on. During the loss the API answers in the ECS
// error format, no controller acts (no container or instance started or
// stopped, no event recorded); once the members continue, the write
// refused during the loss succeeds, the fleet converges to it and nothing
// acknowledged before the loss is missing.
func TestQuorumLoss(t *testing.T) {
	n := *instancesFlag
	e := newEtcdFleet(t, n, false, false)
	ctx := context.Background()
	raw := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.urlA),
		Credentials: credentials.NewStaticCredentialsProvider(processKey, processSecret, ""), Retryer: aws.NopRetryer{}})
	before := e.taskDef("before-loss", jobMemory) // acknowledged just before
	pre := e.mustSnapshot()

	lead := e.etcd.leader()
	var stopped []*etcdMember
	stopped = append(stopped, lead)
	for _, m := range e.etcd.members {
		if m != lead && len(stopped) < 2 {
			stopped = append(stopped, m)
		}
	}
	for _, m := range stopped {
		m.signal(t, syscall.SIGSTOP)
	}
	lossStart := time.Now()
	t.Logf("SIGSTOP members %s and %s (%s led) for %s", stopped[0].name, stopped[1].name, lead.name, quorumLoss)
	quietAtStart := e.quiet()

	// Calls during the loss, each with its own deadline and no retries.
	type answer struct {
		op, code, msg string
		took          time.Duration
	}
	var answers []answer
	call := func(op string, fn func(context.Context) error) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		start := time.Now()
		err := fn(cctx)
		a := answer{op: op, took: time.Since(start)}
		if err != nil {
			a.code, a.msg = apiError(err)
		}
		answers = append(answers, a)
		t.Logf("during the loss: %s → %q %q after %.1fs", op, a.code, a.msg, a.took.Seconds())
	}
	for time.Since(lossStart) < quorumLoss-12*time.Second {
		call("UpdateService", func(c context.Context) error {
			_, err := raw.UpdateService(c, &ecs.UpdateServiceInput{Cluster: aws.String(e.cluster), Service: aws.String(serviceName), DesiredCount: aws.Int32(int32(n + 1))})
			return err
		})
		call("RegisterTaskDefinition", func(c context.Context) error {
			_, err := raw.RegisterTaskDefinition(c, &ecs.RegisterTaskDefinitionInput{Family: aws.String("during-loss"),
				ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("main"), Image: aws.String(e.image), Memory: aws.Int32(jobMemory)}}})
			return err
		})
		call("DescribeServices", func(c context.Context) error {
			_, err := raw.DescribeServices(c, &ecs.DescribeServicesInput{Cluster: aws.String(e.cluster), Services: []string{serviceName}})
			return err
		})
	}
	time.Sleep(time.Until(lossStart.Add(quorumLoss)))
	quietAtEnd := e.quiet()
	for _, m := range stopped {
		m.signal(t, syscall.SIGCONT)
	}
	healed := time.Now()
	t.Logf("SIGCONT after %.1fs", healed.Sub(lossStart).Seconds())

	for _, a := range answers {
		if a.op == "DescribeServices" {
			continue // may be answered from the server's cache
		}
		if a.code != "ServerException" || !strings.Contains(a.msg, "unavailable") {
			t.Errorf("%s during the quorum loss answered %q %q; want ServerException saying the store is unavailable", a.op, a.code, a.msg)
		}
	}
	if quietAtStart != quietAtEnd {
		t.Errorf("containers or instances changed during the quorum loss:\nat its start:\n%s\nat its end:\n%s", quietAtStart, quietAtEnd)
	}

	// The refused write, again: it succeeds once the quorum is back (the
	// SDK's retries wait out the new election), and the controllers act.
	if _, err := e.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(e.cluster), Service: aws.String(serviceName), DesiredCount: aws.Int32(int32(n + 1))}); err != nil {
		t.Fatalf("UpdateService after the quorum returned: %v", err)
	}
	e.services[serviceName] = int32(n + 1)
	e.converge("quorum regained, service grown", scaled(quorumDeadline))
	t.Logf("quorum regained: converged %.1fs after SIGCONT", time.Since(healed).Seconds())
	e.verify("quorum loss")

	// No event recorded during the loss (a second's grace at its start
	// for writes committed as the members stopped).
	for _, ev := range e.h.Events() {
		at, err := time.Parse(time.RFC3339Nano, ev.Time)
		// Nor at its end: an event is stamped when made and may wait up to
		// the emitter's timeout (5 s) for the store, so one made in the
		// loss's last seconds is written once quorum is back.
		if err == nil && at.After(lossStart.Add(time.Second)) && at.Before(healed.Add(-5*time.Second)) {
			t.Errorf("event recorded during the quorum loss: %s %s at %s", ev.DetailType, ev.Resources, ev.Time)
		}
	}
	// Nothing acknowledged before the loss is missing: the task
	// definition, and every task then RUNNING still is, where it was.
	if _, err := e.c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(before)}); err != nil {
		t.Errorf("task definition registered before the loss: %v", err)
	}
	// No instance was declared lost once the quorum was back: the agents
	// reconnect as soon as a server reaches etcd again, well within the
	// silence limit. Every task RUNNING before the loss still runs where
	// it was, and no instance was replaced.
	post := e.mustSnapshot()
	for arn, tk := range pre.tasks {
		if aws.ToString(tk.LastStatus) != "RUNNING" {
			continue
		}
		now, ok := post.tasks[arn]
		if ok && aws.ToString(now.LastStatus) == "RUNNING" && aws.ToString(now.ContainerInstanceArn) == aws.ToString(tk.ContainerInstanceArn) {
			continue
		}
		if !ok { // stopped tasks are not listed as running: described by ARN
			if out, err := e.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(e.cluster), Tasks: []string{arn}}); err == nil && len(out.Tasks) == 1 {
				now = out.Tasks[0]
			}
		}
		t.Errorf("task %s (%s) RUNNING before the loss is now %s on %s (%s)", arn, aws.ToString(tk.Group), aws.ToString(now.LastStatus),
			aws.ToString(now.ContainerInstanceArn), aws.ToString(now.StoppedReason))
	}
	if all, active := e.instanceCounts(); active != n+1 || all != n+1 {
		t.Errorf("%d instances registered, %d ACTIVE; want %d, none lost or replaced", all, active, n+1)
	}
	for _, p := range []*serverProcess{e.a, e.b} {
		if lost := logged(p, "managed instance lost: its agent has no session"); len(lost) > 0 {
			t.Errorf("a server declared %d instances lost (agent silent), the first %.1fs after SIGCONT", len(lost), lost[0].Sub(healed).Seconds())
		}
	}
	t.Logf("agent sessions after the loss: a %v, b %v", metric(t, e.urlA, "capstan_agent_sessions"), metric(t, e.urlB, "capstan_agent_sessions"))
}

// health is a server's /healthz answer.
func health(url string) (int, string) {
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric reads a server's gauge or the sum of a counter's series.
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fs := strings.Fields(rest)
		v, _ := strconv.ParseFloat(fs[len(fs)-1], 64)
		sum += v
	}
	return sum
}

// TestPartitionServerFromEtcd cuts the leading server off every etcd
// member (TCP proxies that hold its bytes) while its agents still reach
// it. It must stop its controllers before its election lease can end, so
// that the other server takes over only after; it fails its health check
// and ends its agent sessions, so the agents move to the other server; a
// scale-up through that one places its task while the cut lasts; after the
// cut heals the old leader is healthy again but neither leads nor
// reconciles, and no instance or task was made twice.
func TestPartitionServerFromEtcd(t *testing.T) {
	n := *instancesFlag
	e := newEtcdFleet(t, n, true, true)
	ctx := context.Background()
	if metric(t, e.urlA, "capstan_controllers_leading") != 1 || metric(t, e.urlB, "capstan_controllers_leading") != 0 {
		t.Fatal("server a does not lead alone before the cut")
	}
	for _, p := range e.proxies {
		p.setCut(true)
	}
	cut := time.Now()
	t.Log("server a cut off etcd")
	var aStopped time.Duration
	took := eventually(t, etcdCutDeadline, "server b leading", func() bool {
		if aStopped == 0 && metric(t, e.urlA, "capstan_controllers_leading") == 0 {
			aStopped = time.Since(cut)
		}
		return metric(t, e.urlB, "capstan_controllers_leading") == 1
	})
	t.Logf("server a's controllers stopped %.1fs after the cut (gauge); b leads after %.1fs", aStopped.Seconds(), took.Seconds())
	stops, leads := logged(e.a, "controllers stopped"), logged(e.b, "leading")
	if aStopped == 0 || len(stops) == 0 || len(leads) == 0 || !stops[len(stops)-1].Before(leads[len(leads)-1]) {
		t.Fatalf("server a's controllers did not stop before b led: a stopped %v (gauge after %s), b led %v", stops, aStopped, leads)
	}
	t.Logf("a's controllers stopped %s before b led (logs)", leads[len(leads)-1].Sub(stops[len(stops)-1]))
	reconcilesA := metric(t, e.urlA, "capstan_reconciles_total")

	// Cut off, a fails its health check and ends its agent sessions: the
	// agents move to b.
	unhealthy := eventually(t, etcdCutDeadline, "server a's /healthz failing", func() bool {
		code, _ := health(e.urlA)
		return code != http.StatusOK
	})
	if code, body := health(e.urlA); code != http.StatusServiceUnavailable || !strings.Contains(body, "the store (etcd) is unavailable") {
		t.Errorf("server a's /healthz during the cut: %d %q; want 503 saying the store is unavailable", code, body)
	}
	t.Logf("server a's /healthz failing %.1fs after server b led", unhealthy.Seconds())
	moved := eventually(t, etcdCutDeadline, "the agents on server b, none on a", func() bool {
		return metric(t, e.urlB, "capstan_agent_sessions") == float64(n) && metric(t, e.urlA, "capstan_agent_sessions") == 0
	})
	t.Logf("agents on b, none on a, %.1fs later", moved.Seconds())
	// API calls to a are refused after its 5 s wait for etcd, marked
	// untried, so the CLI given both servers sends even a write on to b.
	onlyA := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.urlA),
		Credentials: credentials.NewStaticCredentialsProvider(processKey, processSecret, ""), Retryer: aws.NopRetryer{}})
	start := time.Now()
	_, err := onlyA.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{e.cluster}})
	var re *awshttp.ResponseError
	if code, msg := apiError(err); code != "ServerException" || !strings.Contains(msg, "nothing was read or written") ||
		!errors.As(err, &re) || re.HTTPStatusCode() != http.StatusServiceUnavailable || re.Response.Header.Get(failover.StoreUnreachableHeader) == "" || time.Since(start) > 8*time.Second {
		t.Errorf("DescribeClusters on a during the cut: %v after %s; want an untried 503 ServerException within about 5 s", err, time.Since(start))
	}
	cli := exec.Command(e.bin, "cluster", "create", "during-cut")
	cli.Env = append(os.Environ(), "CAPSTAN_ENDPOINT="+e.endpoints, "AWS_ACCESS_KEY_ID="+processKey, "AWS_SECRET_ACCESS_KEY="+processSecret)
	if out, err := cli.CombinedOutput(); err != nil {
		t.Errorf("capstan cluster create with endpoints %s during the cut: %v\n%s", e.endpoints, err, out)
	}
	// A scale-up through b during the cut: its new instance's agent is
	// refused by a and attaches to b, and the task runs there.
	if _, err := e.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(e.cluster), Service: aws.String(serviceName), DesiredCount: aws.Int32(int32(n + 1))}); err != nil {
		t.Fatal(err)
	}
	e.services[serviceName] = int32(n + 1)
	e.converge("scaled up through b during the cut", setupDeadline())
	t.Logf("scaled up during the cut %.1fs after it began", time.Since(cut).Seconds())
	if got := metric(t, e.urlB, "capstan_agent_sessions"); got != float64(n+1) {
		t.Errorf("%v agent sessions on b after the scale-up during the cut; want %d", got, n+1)
	}

	// The fleet as b shows it, with the cut lasting past a's session
	// lease (15 s).
	time.Sleep(time.Until(cut.Add(20 * time.Second)))
	e.converge("leader cut off etcd for 20 s", etcdCutDeadline)

	for _, p := range e.proxies {
		p.setCut(false)
	}
	healed := time.Now()
	t.Log("cut healed")
	eventually(t, healDeadline, "server a healthy again", func() bool { code, _ := health(e.urlA); return code == http.StatusOK })
	e.converge("cut healed", healDeadline)
	t.Logf("healed and converged %.1fs after the heal", time.Since(healed).Seconds())
	e.verify("leader cut off etcd")
	if got := metric(t, e.urlA, "capstan_controllers_leading"); got != 0 {
		t.Errorf("server a leads again after the heal")
	}
	if got := metric(t, e.urlA, "capstan_reconciles_total"); got != reconcilesA {
		t.Errorf("server a reconciled %v times after it stepped down", got-reconcilesA)
	}
	if all, active := e.instanceCounts(); all != n+1 || active != n+1 {
		t.Errorf("%d instances registered, %d ACTIVE; want %d: none replaced or launched twice", all, active, n+1)
	}
	tasks := 0
	for _, tk := range e.h.Tasks() {
		if tk.Group == "service:"+serviceName {
			tasks++
		}
	}
	if tasks != n+1 {
		t.Errorf("%d tasks of service %s ever; want %d, none started twice", tasks, serviceName, n+1)
	}
}
