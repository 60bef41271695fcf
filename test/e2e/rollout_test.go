package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/coverage"
	"github.com/capstanhq/capstan/internal/ops"
)

const loop = "trap 'exit 0' TERM; while true; do sleep 1; done"

// rollout is a managed fleet carrying a service and a critical daemon.
type rollout struct {
	*fleet
	cp, cpArn string
	daemonArn string
	service   string
	desired   int
	begin     time.Time
}

// newRollout provisions n local instances, each running one task of the
// service and the critical daemon "agentd".
func newRollout(t *testing.T, n int) *rollout {
	ctx := context.Background()
	f := newManagedFleet(t)
	r := &rollout{fleet: f, cp: "roll", service: "web", desired: n}
	r.cpArn = f.managedCapacityProvider(r.cp, 3600)
	r.daemonArn = f.daemon("agentd", r.cpArn, true, "sh", "-c", loop)
	// 700 MiB each on 1 GiB instances: one task per instance.
	c := f.container("web", "sh", "-c", loop)
	c.Memory = aws.Int32(700)
	td := f.register("web", c)
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String(r.service),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(int32(n)),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(r.cp)}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Duration(n)*60*time.Second, "service tasks RUNNING on their own instances", func() bool {
		return len(r.runningApps()) == n && len(r.activeInstances()) == n
	})
	r.begin = time.Now()
	return r
}

func (r *rollout) runningApps() []types.Task {
	var out []types.Task
	list, err := r.c.ListTasks(context.Background(), &ecs.ListTasksInput{Cluster: aws.String(r.cluster), ServiceName: aws.String(r.service)})
	if err != nil || len(list.TaskArns) == 0 {
		return nil
	}
	ts, err := r.c.DescribeTasks(context.Background(), &ecs.DescribeTasksInput{Cluster: aws.String(r.cluster), Tasks: list.TaskArns})
	if err != nil {
		return nil
	}
	for _, tk := range ts.Tasks {
		if aws.ToString(tk.LastStatus) == "RUNNING" {
			out = append(out, tk)
		}
	}
	return out
}

// activeInstances are the ACTIVE container instances of the provider.
func (r *rollout) activeInstances() []types.ContainerInstance {
	ctx := context.Background()
	list, err := r.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(r.cluster), Status: types.ContainerInstanceStatusActive})
	if err != nil || len(list.ContainerInstanceArns) == 0 {
		return nil
	}
	out, err := r.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(r.cluster), ContainerInstances: list.ContainerInstanceArns})
	if err != nil {
		return nil
	}
	return out.ContainerInstances
}

// newRevision registers another revision of the daemon's task definition.
func (r *rollout) newRevision(cmd ...string) string {
	td, err := r.c.RegisterDaemonTaskDefinition(context.Background(), &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agentd"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agentd"), Image: aws.String(r.image), Memory: aws.Int32(32), Command: cmd}}})
	if err != nil {
		r.t.Fatal(err)
	}
	return aws.ToString(td.DaemonTaskDefinitionArn)
}

func (r *rollout) update(td string, dc *types.DaemonDeploymentConfiguration) string {
	out, err := r.c.UpdateDaemon(context.Background(), &ecs.UpdateDaemonInput{DaemonArn: aws.String(r.daemonArn), DaemonTaskDefinitionArn: aws.String(td),
		CapacityProviderArns: []string{r.cpArn}, DeploymentConfiguration: dc, Critical: aws.Bool(true)})
	if err != nil {
		r.t.Fatal(err)
	}
	return aws.ToString(out.DeploymentArn)
}

func (r *rollout) deployment(arn string) types.DaemonDeployment {
	out, err := r.c.DescribeDaemonDeployments(context.Background(), &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{arn}})
	if err != nil || len(out.DaemonDeployments) != 1 {
		r.t.Fatalf("describe deployment %s: %+v %v", arn, out, err)
	}
	return out.DaemonDeployments[0]
}

// waitDeployment waits for one of the final statuses and returns it.
func (r *rollout) waitDeployment(arn string, d time.Duration, final ...types.DaemonDeploymentStatus) types.DaemonDeployment {
	r.t.Helper()
	var dep types.DaemonDeployment
	eventually(r.t, d, "deployment reaches "+string(final[0]), func() bool {
		dep = r.deployment(arn)
		return slices.Contains(final, dep.Status)
	})
	return dep
}

// history is the server's recorded event history of the fleet's cluster.
func (r *rollout) history() *coverage.History {
	h := coverage.NewHistory()
	after := ""
	for {
		out, err := r.srv.Service.ListEvents(context.Background(), &ops.ListEventsRequest{Cluster: r.cluster, After: after, MaxResults: aws.Int32(1000)})
		if err != nil {
			r.t.Fatal(err)
		}
		if err := h.Add(out.Events); err != nil {
			r.t.Fatal(err)
		}
		after = out.Cursor
		if len(out.Events) < 1000 {
			return h
		}
	}
}

// checkHistory asserts, from the record, that no instance ran the app
// without its critical daemon, that the service never had fewer tasks
// RUNNING than its minimum (100 % by default), and that no more instances
// drained at once than a batch.
func (r *rollout) checkHistory(batch int) {
	r.t.Helper()
	to := time.Now()
	h := r.history()
	d := []coverage.Daemon{{Name: "agentd", Arn: r.daemonArn, Critical: true, CPs: []string{r.cp}, Created: r.begin.Add(-time.Hour)}}
	if gaps := h.Gaps(d, r.begin, to, coverage.Options{InferRepair: true}); len(gaps) > 0 {
		r.t.Errorf("coverage gaps: %+v", gaps)
	}
	if n := h.MinRunning("service:"+r.service, r.begin, to); n < r.desired {
		r.t.Errorf("service had %d tasks RUNNING at some moment, minimum is %d", n, r.desired)
	}
	if n := maxServedDraining(h, r.begin, to); n > batch || n == 0 {
		r.t.Errorf("%d instances that had served drained at once, batch is %d", n, batch)
	}
}

// onRevision asserts every ACTIVE instance runs the daemon at revision
// rev and the daemon reports only that revision.
func (r *rollout) onRevision(rev string, n int) {
	r.t.Helper()
	ctx := context.Background()
	eventually(r.t, 30*time.Second, "daemon reports one revision on every instance", func() bool {
		d, err := r.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(r.daemonArn)})
		if err != nil || len(d.Daemon.CurrentRevisions) != 1 {
			return false
		}
		cur := d.Daemon.CurrentRevisions[0]
		return aws.ToString(cur.Arn) == rev && cur.TotalRunningCount == int32(n)
	})
	// Instances a rollback abandoned may still be draining: wait for them.
	eventually(r.t, 60*time.Second, "exactly one daemon task on every ACTIVE instance", func() bool {
		tasks := r.daemonTasks("agentd", "RUNNING")
		on := map[string]int{}
		for _, tk := range tasks {
			on[aws.ToString(tk.ContainerInstanceArn)]++
		}
		active := r.activeInstances()
		for _, ci := range active {
			if on[aws.ToString(ci.ContainerInstanceArn)] != 1 {
				return false
			}
		}
		return len(tasks) == n && len(active) == n
	})
}

// maxServedDraining is the most instances that had been ACTIVE and were
// DRAINING at one moment: a rollout may retire instances that never
// served (still REGISTERING) beyond its batch, as they carry no task.
func maxServedDraining(h *coverage.History, from, to time.Time) int {
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for _, in := range h.Instances() {
		served := false
		var since time.Time
		for _, st := range in.States {
			switch {
			case st.Status == "ACTIVE":
				served = true
			case st.Status == "DRAINING" && served && since.IsZero():
				since = st.At
			case st.Status != "DRAINING" && !since.IsZero():
				edges = append(edges, edge{since, 1}, edge{st.At, -1})
				since = time.Time{}
			}
		}
		if !since.IsZero() {
			edges = append(edges, edge{since, 1}, edge{to, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same moment
	})
	cur, best := 0, 0
	for _, e := range edges {
		cur += e.d
		if !e.at.Before(from) && !e.at.After(to) {
			best = max(best, cur)
		}
	}
	return best
}

func (r *rollout) instanceArns() []string {
	var out []string
	for _, ci := range r.activeInstances() {
		out = append(out, aws.ToString(ci.ContainerInstanceArn))
	}
	slices.Sort(out)
	return out
}

func deploymentEvents(t *testing.T, f *fleet, depArn string) []string {
	out, err := f.srv.Service.ListEvents(context.Background(), &ops.ListEventsRequest{Cluster: f.cluster, DetailType: "ECS Daemon Deployment State Change", Resource: depArn})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range out.Events {
		s := string(ev.Detail)
		if i := strings.Index(s, `"eventName":"`); i >= 0 {
			rest := s[i+len(`"eventName":"`):]
			names = append(names, rest[:strings.Index(rest, `"`)])
		}
	}
	return names
}

// TestDaemonRolloutReplacesInstances updates the critical daemon of 4
// instances carrying a service with drainPercent 50: two batches of two
// instances are replaced, every instance ends on the new revision, the
// service never drops below its minimum and no app task runs without the
// daemon at any moment of the record.
func TestDaemonRolloutReplacesInstances(t *testing.T) {
	r := newRollout(t, 4)
	before := r.instanceArns()
	td2 := r.newRevision("sh", "-c", "echo v2; "+loop)
	depArn := r.update(td2, &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(50)})
	dep := r.waitDeployment(depArn, 8*time.Minute, types.DaemonDeploymentStatusSuccessful, types.DaemonDeploymentStatusRollbackSuccessful, types.DaemonDeploymentStatusStopped)
	if dep.Status != types.DaemonDeploymentStatusSuccessful {
		t.Fatalf("deployment %s: %s", dep.Status, aws.ToString(dep.StatusReason))
	}
	target := aws.ToString(dep.TargetDaemonRevision.Arn)
	if dep.StartedAt == nil || dep.FinishedAt == nil || dep.FinishedAt.Before(*dep.StartedAt) || dep.StoppedAt != nil {
		t.Errorf("timestamps: started %v finished %v stopped %v", dep.StartedAt, dep.FinishedAt, dep.StoppedAt)
	}
	if aws.ToInt32(dep.TargetDaemonRevision.TotalRunningInstanceCount) != 4 || len(dep.SourceDaemonRevisions) != 1 ||
		aws.ToInt32(dep.SourceDaemonRevisions[0].TotalRunningInstanceCount) != 0 {
		t.Errorf("final counts: target running %d sources %d running %d", aws.ToInt32(dep.TargetDaemonRevision.TotalRunningInstanceCount), len(dep.SourceDaemonRevisions), aws.ToInt32(dep.SourceDaemonRevisions[0].TotalRunningInstanceCount))
	}
	if dep.CircuitBreaker == nil || dep.CircuitBreaker.Status != types.DaemonDeploymentRollbackMonitorsStatusMonitoringComplete || dep.CircuitBreaker.FailureCount != 0 {
		t.Errorf("breaker: %+v", dep.CircuitBreaker)
	}
	r.onRevision(target, 4)
	after := r.instanceArns()
	for _, a := range after {
		if slices.Contains(before, a) {
			t.Errorf("instance %s was not replaced", a)
		}
	}
	if len(r.runningApps()) != 4 {
		t.Errorf("service runs %d tasks", len(r.runningApps()))
	}
	r.checkHistory(2)
	eventually(t, 10*time.Second, "deployment events", func() bool {
		return slices.Equal(deploymentEvents(t, r.fleet, depArn), []string{"DAEMON_DEPLOYMENT_PENDING", "DAEMON_DEPLOYMENT_IN_PROGRESS", "DAEMON_DEPLOYMENT_SUCCESSFUL"})
	})
}

// TestDaemonRolloutBreakerRollsBack deploys a revision whose container
// exits at once with `capstan daemon update --wait`: the breaker trips at
// its threshold (3 for 2 instances), the rollout rolls back to the old
// revision on every instance, and --wait exits non-zero.
func TestDaemonRolloutBreakerRollsBack(t *testing.T) {
	r := newRollout(t, 2)
	old := r.daemonTasks("agentd", "RUNNING")
	bad := r.newRevision("sh", "-c", "echo broken; exit 3")
	code, out, errOut := r.capstanCLI("daemon", "update", "agentd", "--cluster", r.cluster, "--task-definition", bad,
		"--capacity-provider", r.cp, "--drain-percent", "50", "--wait", "--timeout", "8m")
	if code == 0 {
		t.Fatalf("--wait exited 0 on a failing rollout:\n%s\n%s", out, errOut)
	}
	dep, _, _ := r.latestDeployment(r.daemonArn)
	if dep.Status != types.DaemonDeploymentStatusRollbackSuccessful {
		t.Fatalf("deployment %s: %s\n%s", dep.Status, aws.ToString(dep.StatusReason), out)
	}
	cb := dep.CircuitBreaker
	if cb == nil || cb.Status != types.DaemonDeploymentRollbackMonitorsStatusTriggered || cb.Threshold != 3 || cb.FailureCount < 3 {
		t.Errorf("breaker: %+v", cb)
	}
	rb := dep.Rollback
	if rb == nil || !strings.Contains(aws.ToString(rb.Reason), "Circuit breaker") || rb.StartedAt == nil || aws.ToString(rb.RollbackTargetDaemonRevisionArn) == "" {
		t.Fatalf("rollback: %+v", rb)
	}
	oldRev := aws.ToString(rb.RollbackTargetDaemonRevisionArn)
	if len(dep.SourceDaemonRevisions) != 1 || aws.ToString(dep.SourceDaemonRevisions[0].Arn) != oldRev {
		t.Errorf("rollback target %s is not the source %+v", oldRev, dep.SourceDaemonRevisions)
	}
	r.onRevision(oldRev, 2)
	if len(old) != 2 {
		t.Fatalf("daemon tasks before: %d", len(old))
	}
	r.checkHistory(1)
	names := deploymentEvents(t, r.fleet, aws.ToString(dep.DaemonDeploymentArn))
	for _, want := range []string{"DAEMON_DEPLOYMENT_STOP_REQUESTED", "DAEMON_DEPLOYMENT_ROLLBACK_IN_PROGRESS", "DAEMON_DEPLOYMENT_ROLLBACK_SUCCESSFUL"} {
		if !slices.Contains(names, want) {
			t.Errorf("events %v lack %s", names, want)
		}
	}
	if !strings.Contains(out+errOut, "ROLLBACK_SUCCESSFUL") {
		t.Errorf("--wait output does not say how it ended:\n%s", out)
	}
}

// TestDaemonRolloutSupersedeAndDelete: an update made while another rolls
// out stops the first (STOPPED) and completes; DeleteDaemon then replaces
// the instances without the daemon and removes it.
func TestDaemonRolloutSupersedeAndDelete(t *testing.T) {
	ctx := context.Background()
	r := newRollout(t, 2)
	first := r.update(r.newRevision("sh", "-c", "echo v2; "+loop), &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(50)})
	eventually(t, 60*time.Second, "first rollout replacing an instance", func() bool {
		out, err := r.srv.Service.DescribeDaemonRollout(ctx, &ops.DescribeDaemonRolloutRequest{DaemonArn: r.daemonArn, DaemonDeploymentArn: first})
		return err == nil && out.Status == "IN_PROGRESS" && out.CapacityProviders[0].Draining+out.CapacityProviders[0].Launching > 0
	})
	td3 := r.newRevision("sh", "-c", "echo v3; "+loop)
	second := r.update(td3, nil)
	if dep := r.deployment(first); dep.Status != types.DaemonDeploymentStatusStopped || dep.StoppedAt == nil {
		t.Fatalf("superseded deployment: %s %v", dep.Status, dep.StoppedAt)
	}
	dep := r.waitDeployment(second, 8*time.Minute, types.DaemonDeploymentStatusSuccessful, types.DaemonDeploymentStatusRollbackSuccessful, types.DaemonDeploymentStatusStopped)
	if dep.Status != types.DaemonDeploymentStatusSuccessful {
		t.Fatalf("second deployment %s: %s", dep.Status, aws.ToString(dep.StatusReason))
	}
	r.onRevision(aws.ToString(dep.TargetDaemonRevision.Arn), 2)
	r.checkHistory(1)
	// The AWS CLI waiters read these states: stopped and successful are
	// reached, and waiting for success on a stopped deployment fails.
	wait := func(waiter, arn string) error {
		_, stderr, err := runAWS(t, r.srv.Env(), "ecs", "wait", waiter, "--daemon-deployment-arns", arn, "--endpoint-url", r.srv.URL, "--region", "us-east-1")
		if err != nil {
			t.Logf("aws ecs wait %s: %v: %s", waiter, err, stderr)
		}
		return err
	}
	if wait("daemon-deployment-stopped", first) != nil || wait("daemon-deployment-successful", second) != nil {
		t.Error("AWS CLI waiters did not see the final states")
	}
	if wait("daemon-deployment-successful", first) == nil {
		t.Error("waiting for a stopped deployment to succeed did not fail")
	}

	before := r.instanceArns()
	del, err := r.c.DeleteDaemon(ctx, &ecs.DeleteDaemonInput{DaemonArn: aws.String(r.daemonArn)})
	if err != nil || del.Status != types.DaemonStatusDeleteInProgress {
		t.Fatalf("delete: %+v %v", del, err)
	}
	dd := r.waitDeployment(aws.ToString(del.DeploymentArn), 8*time.Minute, types.DaemonDeploymentStatusSuccessful, types.DaemonDeploymentStatusStopped)
	if dd.Status != types.DaemonDeploymentStatusSuccessful {
		t.Fatalf("delete deployment %s: %s", dd.Status, aws.ToString(dd.StatusReason))
	}
	if _, err := r.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(r.daemonArn)}); apiCode(err) != "DaemonNotFoundException" {
		t.Fatalf("deleted daemon still described: %v", err)
	}
	if n := len(r.daemonTasks("agentd", "RUNNING")); n != 0 {
		t.Errorf("%d daemon tasks still running", n)
	}
	after := r.instanceArns()
	if len(after) != 2 || slices.ContainsFunc(after, func(a string) bool { return slices.Contains(before, a) }) {
		t.Errorf("instances before %v after %v: the delete must replace them", before, after)
	}
	if len(r.runningApps()) != 2 {
		t.Errorf("service runs %d tasks", len(r.runningApps()))
	}
}
