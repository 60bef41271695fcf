package services_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/agent/session"
	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/testenv"
)

// history is what every fake agent did, in one order: a task was seen,
// ran, or stopped.
type history struct {
	mu     sync.Mutex
	events []happening
}

type happening struct{ arn, group, instance, status string }

func (h *history) add(e happening) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

func (h *history) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// bounds replays the history of a group and returns the fewest tasks
// RUNNING and the most tasks present (seen and not yet stopped) at any
// point from event `from` on.
func (h *history) bounds(group string, from int) (minRunning, maxPresent int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	running, present := map[string]bool{}, map[string]bool{}
	minRunning = 1 << 30
	for i, e := range h.events {
		if e.group == group {
			switch e.status {
			case "SEEN":
				present[e.arn] = true
			case "RUNNING":
				running[e.arn] = true
			case "STOPPED":
				delete(running, e.arn)
				delete(present, e.arn)
			}
		}
		if i >= from-1 {
			minRunning = min(minRunning, len(running))
			maxPresent = max(maxPresent, len(present))
		}
	}
	return minRunning, maxPresent
}

// fakeEngine runs whatever it is given at once and stops whatever it is
// told to, reporting over the real session. Tasks of a failing family
// fail to start; while held, new tasks stay PENDING.
type fakeEngine struct {
	instance string
	hist     *history
	changes  chan protocol.TaskState
	kick     chan struct{}

	mu      sync.Mutex
	desired []protocol.Task
	tasks   map[string]*fakeTask
	hold    bool
	failing string
}

type fakeTask struct {
	status    string
	seq       uint64
	group     string
	startedAt time.Time
}

func newFakeEngine(instance string, h *history) *fakeEngine {
	return &fakeEngine{instance: instance, hist: h, changes: make(chan protocol.TaskState, 1024), kick: make(chan struct{}, 1), tasks: map[string]*fakeTask{}}
}

func (e *fakeEngine) SetDesired(ts []protocol.Task) {
	e.mu.Lock()
	e.desired = ts
	e.mu.Unlock()
	e.poke()
}

func (e *fakeEngine) Changes() <-chan protocol.TaskState { return e.changes }

func (e *fakeEngine) poke() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

func (e *fakeEngine) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		}
		for _, st := range e.step() {
			select {
			case e.changes <- st:
			case <-ctx.Done():
				return
			}
		}
	}
}

// step moves every task one state towards its desired one.
func (e *fakeEngine) step() []protocol.TaskState {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []protocol.TaskState
	for _, d := range e.desired {
		ft := e.tasks[d.Arn]
		if ft == nil {
			if d.DesiredStatus != "RUNNING" {
				continue
			}
			ft = &fakeTask{status: "NONE", group: d.Group}
			e.tasks[d.Arn] = ft
			e.hist.add(happening{d.Arn, d.Group, e.instance, "SEEN"})
		}
		switch {
		case ft.status == "STOPPED":
		case d.DesiredStatus == "STOPPED":
			out = append(out, e.set(d.Arn, ft, "STOPPED", "", ""))
		case e.failing != "" && d.Definition.Family == e.failing:
			out = append(out, e.set(d.Arn, ft, "STOPPED", "TaskFailedToStart", "CannotPullContainerError: fake pull failure"))
		case ft.status == "NONE" && e.hold:
			out = append(out, e.set(d.Arn, ft, "PENDING", "", ""))
		case ft.status != "RUNNING" && !e.hold:
			out = append(out, e.set(d.Arn, ft, "RUNNING", "", ""))
		}
	}
	return out
}

func (e *fakeEngine) set(arn string, ft *fakeTask, status, code, reason string) protocol.TaskState {
	ft.status = status
	ft.seq++
	now := time.Now()
	st := protocol.TaskState{Arn: arn, LastStatus: status, Seq: ft.seq, StopCode: code, StoppedReason: reason}
	c := protocol.ContainerState{Name: "web", LastStatus: status}
	switch status {
	case "RUNNING":
		ft.startedAt = now
		st.StartedAt = now
		c.RuntimeID = "fake-" + arn[strings.LastIndexByte(arn, '/')+1:]
	case "STOPPED":
		st.StartedAt, st.StoppedAt = ft.startedAt, now
		exit := 0
		c.ExitCode = &exit
	case "PENDING":
		c.LastStatus = "PENDING"
	}
	st.Containers = []protocol.ContainerState{c}
	if status != "PENDING" {
		e.hist.add(happening{arn, ft.group, e.instance, status})
	}
	return st
}

// crash makes a RUNNING task exit as an essential container would.
func (e *fakeEngine) crash(arn string) bool {
	e.mu.Lock()
	ft := e.tasks[arn]
	if ft == nil || ft.status != "RUNNING" {
		e.mu.Unlock()
		return false
	}
	st := e.set(arn, ft, "STOPPED", "EssentialContainerExited", "Essential container in task exited")
	e.mu.Unlock()
	e.changes <- st
	return true
}

func (e *fakeEngine) setHold(v bool) {
	e.mu.Lock()
	e.hold = v
	e.mu.Unlock()
	e.poke()
}

func (e *fakeEngine) setFailing(family string) {
	e.mu.Lock()
	e.failing = family
	e.mu.Unlock()
}

type rig struct {
	srv  *testenv.Server
	c    *ecs.Client
	hist *history
}

func newRig(t *testing.T) *rig {
	t.Helper()
	srv := testenv.StartServer(t, "")
	r := &rig{srv: srv, c: srv.ECS(), hist: &history{}}
	if _, err := r.c.CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	return r
}

// agent registers an instance and runs a fake agent for it over a real
// session until the test ends.
func (r *rig) agent(t *testing.T) (string, *fakeEngine) {
	t.Helper()
	ctx := context.Background()
	cred, err := r.srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: "apps"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey).RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String("apps"),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 4096},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 4096},
		},
		VersionInfo: &types.VersionInfo{AgentVersion: aws.String("test"), DockerVersion: aws.String("none")},
	})
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.ContainerInstance.ContainerInstanceArn)
	db, err := state.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	eng := newFakeEngine(arn, r.hist)
	c := session.New(session.Config{Endpoint: r.srv.URL, AccessKeyID: cred.AccessKeyID, SecretKey: cred.SecretAccessKey,
		Region: "us-east-1", InstanceArn: arn, AgentVersion: "test", Store: db, Engine: eng,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); eng.run(runCtx) }()
	go func() { defer wg.Done(); c.Run(runCtx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); db.Close() })
	eventually(t, "agent connected", func() bool {
		d, err := r.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("apps"), ContainerInstances: []string{arn}})
		return err == nil && len(d.ContainerInstances) == 1 && d.ContainerInstances[0].AgentConnected
	})
	return arn, eng
}

func (r *rig) register(t *testing.T, family string) string {
	t.Helper()
	out, err := r.c.RegisterTaskDefinition(context.Background(), &ecs.RegisterTaskDefinitionInput{
		Family:               aws.String(family),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(128)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.TaskDefinition.TaskDefinitionArn)
}

func (r *rig) service(t *testing.T, name string) types.Service {
	t.Helper()
	out, err := r.c.DescribeServices(context.Background(), &ecs.DescribeServicesInput{Cluster: aws.String("apps"), Services: []string{name}})
	if err != nil || len(out.Services) != 1 {
		t.Fatalf("describe service %s: %+v %v", name, out, err)
	}
	return out.Services[0]
}

// tasks describes the service's tasks with the given desired status.
func (r *rig) tasks(t *testing.T, service, desired string) []types.Task {
	t.Helper()
	ctx := context.Background()
	l, err := r.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("apps"), ServiceName: aws.String(service), DesiredStatus: types.DesiredStatus(desired)})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.TaskArns) == 0 {
		return nil
	}
	d, err := r.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("apps"), Tasks: l.TaskArns})
	if err != nil {
		t.Fatal(err)
	}
	return d.Tasks
}

// steady waits until the service runs desired tasks of its one deployment.
func (r *rig) steady(t *testing.T, name string, desired int32) types.Service {
	t.Helper()
	var s types.Service
	eventually(t, fmt.Sprintf("service %s steady at %d", name, desired), func() bool {
		s = r.service(t, name)
		return s.RunningCount == desired && s.PendingCount == 0 && len(s.Deployments) == 1 &&
			s.Deployments[0].RolloutState == types.DeploymentRolloutStateCompleted && len(r.tasks(t, name, "RUNNING")) == int(desired)
	})
	return s
}

func hasEvent(s types.Service, substr string) bool {
	for _, e := range s.Events {
		if strings.Contains(aws.ToString(e.Message), substr) {
			return true
		}
	}
	return false
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func TestServiceKeepsDesiredCount(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	_, engA := r.agent(t)
	_, engB := r.agent(t)
	td := r.register(t, "web")
	created, err := r.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(3)})
	if err != nil {
		t.Fatal(err)
	}
	dep := aws.ToString(created.Service.Deployments[0].Id)
	s := r.steady(t, "web", 3)
	if !hasEvent(s, "(service web) has started 3 tasks: (task ") || !hasEvent(s, "(service web) (deployment "+dep+") deployment completed.") ||
		!hasEvent(s, "(service web) has reached a steady state.") {
		for _, e := range s.Events {
			t.Log(aws.ToString(e.Message))
		}
		t.Fatal("events missing")
	}
	running := r.tasks(t, "web", "RUNNING")
	for _, task := range running {
		if aws.ToString(task.Group) != "service:web" || aws.ToString(task.StartedBy) != dep {
			t.Fatalf("task group %q startedBy %q", aws.ToString(task.Group), aws.ToString(task.StartedBy))
		}
	}

	// A task whose essential container exits is replaced.
	victim := aws.ToString(running[0].TaskArn)
	if !engA.crash(victim) && !engB.crash(victim) {
		t.Fatalf("no agent runs %s", victim)
	}
	eventually(t, "replacement", func() bool {
		ts := r.tasks(t, "web", "RUNNING")
		for _, x := range ts {
			if aws.ToString(x.TaskArn) == victim || aws.ToString(x.LastStatus) != "RUNNING" {
				return false
			}
		}
		return len(ts) == 3
	})
	stopped := r.tasks(t, "web", "STOPPED")
	if len(stopped) != 1 || aws.ToString(stopped[0].TaskArn) != victim || stopped[0].StopCode != types.TaskStopCodeEssentialContainerExited {
		t.Fatalf("stopped tasks: %+v", stopped)
	}
	r.steady(t, "web", 3)

	// Scaling in stops the newest tasks, with the scheduler's stop code.
	newest := running[0]
	for _, x := range r.tasks(t, "web", "RUNNING") {
		if x.CreatedAt.After(*newest.CreatedAt) {
			newest = x
		}
	}
	if _, err := r.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), DesiredCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	r.steady(t, "web", 1)
	for _, x := range r.tasks(t, "web", "STOPPED") {
		if aws.ToString(x.TaskArn) == aws.ToString(newest.TaskArn) && x.StopCode != types.TaskStopCodeServiceSchedulerInitiated {
			t.Fatalf("scaled-in task: code %s reason %q", x.StopCode, aws.ToString(x.StoppedReason))
		}
	}
	if left := r.tasks(t, "web", "RUNNING"); aws.ToString(left[0].TaskArn) == aws.ToString(newest.TaskArn) {
		t.Fatal("scale-in kept the newest task")
	}

	// Deleting with force stops the rest, then the service is INACTIVE.
	if _, err := r.c.DeleteService(ctx, &ecs.DeleteServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), Force: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	w := ecs.NewServicesInactiveWaiter(r.c, func(o *ecs.ServicesInactiveWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 200*time.Millisecond
	})
	if err := w.Wait(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("apps"), Services: []string{"web"}}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// An INACTIVE service is no ListTasks filter any more, as in ECS.
	if _, err := r.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("apps"), ServiceName: aws.String("web")}); err == nil {
		t.Fatal("ListTasks accepted an INACTIVE service")
	}
	l, err := r.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("apps"), Family: aws.String("web")})
	if err != nil || len(l.TaskArns) != 0 {
		t.Fatalf("tasks left running after the delete: %v %v", l, err)
	}
}

func TestRollingUpdateStartsBeforeStopping(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.agent(t)
	r.agent(t)
	td1 := r.register(t, "web")
	td2 := r.register(t, "web")
	cases := []struct {
		name                 string
		desired, minPct, max int32
	}{
		{"web", 2, 100, 200}, // the defaults: all new first, then all old go
		{"api", 4, 50, 100},  // no surge: half stop first
		{"jobs", 3, 100, 150},
	}
	for _, tc := range cases {
		if _, err := r.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String(tc.name),
			TaskDefinition: aws.String(td1), DesiredCount: aws.Int32(tc.desired),
			DeploymentConfiguration: &types.DeploymentConfiguration{MinimumHealthyPercent: aws.Int32(tc.minPct), MaximumPercent: aws.Int32(tc.max)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		r.steady(t, tc.name, tc.desired)
	}
	from := r.hist.len()
	for _, tc := range cases {
		if _, err := r.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String(tc.name), TaskDefinition: aws.String(td2)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := r.steady(t, tc.name, tc.desired)
			if aws.ToString(s.Deployments[0].TaskDefinition) != td2 {
				t.Fatalf("primary deployment runs %s", aws.ToString(s.Deployments[0].TaskDefinition))
			}
			for _, x := range r.tasks(t, tc.name, "RUNNING") {
				if aws.ToString(x.TaskDefinitionArn) != td2 {
					t.Fatalf("task %s still runs %s", aws.ToString(x.TaskArn), aws.ToString(x.TaskDefinitionArn))
				}
			}
			minRunning, maxPresent := r.hist.bounds("service:"+tc.name, from)
			wantMin := int((tc.desired*tc.minPct + 99) / 100)
			wantMax := int(tc.desired * tc.max / 100)
			if minRunning < wantMin || maxPresent > wantMax {
				t.Fatalf("during the rollout %d..%d tasks ran or existed; the configuration allows at least %d RUNNING and at most %d",
					minRunning, maxPresent, wantMin, wantMax)
			}
			if tc.minPct == 100 && minRunning != int(tc.desired) {
				t.Fatalf("minimumHealthyPercent 100 dipped to %d RUNNING", minRunning)
			}
		})
	}
}

func TestDrainingMovesServiceTasks(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	a, _ := r.agent(t)
	b, _ := r.agent(t)
	td := r.register(t, "web")
	// A task not started by a service stays on a draining instance.
	single, err := r.c.StartTask(ctx, &ecs.StartTaskInput{Cluster: aws.String("apps"), TaskDefinition: aws.String(td), ContainerInstances: []string{a}})
	if err != nil || len(single.Tasks) != 1 {
		t.Fatalf("start task: %+v %v", single, err)
	}
	if _, err := r.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	r.steady(t, "web", 2)
	on := func(instance string) (n int) {
		for _, x := range r.tasks(t, "web", "RUNNING") {
			if aws.ToString(x.ContainerInstanceArn) == instance {
				n++
			}
		}
		return n
	}
	if on(a) != 1 || on(b) != 1 {
		t.Fatalf("service tasks not spread: %d on a, %d on b", on(a), on(b))
	}
	from := r.hist.len()
	if _, err := r.c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String("apps"),
		ContainerInstances: []string{a}, Status: types.ContainerInstanceStatusDraining}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "service tasks off the draining instance", func() bool {
		return on(a) == 0 && on(b) == 2 && r.service(t, "web").RunningCount == 2
	})
	if minRunning, _ := r.hist.bounds("service:web", from); minRunning < 2 {
		t.Fatalf("draining left %d service tasks RUNNING; it must replace before it stops", minRunning)
	}
	d, err := r.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("apps"), Tasks: []string{aws.ToString(single.Tasks[0].TaskArn)}})
	if err != nil || aws.ToString(d.Tasks[0].LastStatus) != "RUNNING" || aws.ToString(d.Tasks[0].DesiredStatus) != "RUNNING" {
		t.Fatalf("standalone task on the draining instance: %+v %v", d.Tasks, err)
	}

	// A PENDING service task on an instance that starts draining stops at
	// once, even with minimumHealthyPercent 100.
	c, engC := r.agent(t)
	engC.setHold(true)
	if _, err := r.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), DesiredCount: aws.Int32(3)}); err != nil {
		t.Fatal(err)
	}
	var pending string
	eventually(t, "a pending task on c", func() bool {
		for _, x := range r.tasks(t, "web", "RUNNING") {
			if aws.ToString(x.ContainerInstanceArn) == c && aws.ToString(x.LastStatus) == "PENDING" {
				pending = aws.ToString(x.TaskArn)
				return true
			}
		}
		return false
	})
	if _, err := r.c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String("apps"),
		ContainerInstances: []string{c}, Status: types.ContainerInstanceStatusDraining}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pending task stopped and replaced", func() bool {
		d, err := r.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("apps"), Tasks: []string{pending}})
		return err == nil && aws.ToString(d.Tasks[0].DesiredStatus) == "STOPPED" && on(b) == 3
	})
	engC.setHold(false)
	r.steady(t, "web", 3)
}

func TestServiceThrottlesFailingLaunches(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	_, eng := r.agent(t)
	eng.setFailing("broken")
	td := r.register(t, "broken")
	if _, err := r.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("bad"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	var s types.Service
	eventually(t, "throttle event", func() bool {
		s = r.service(t, "bad")
		return hasEvent(s, "(service bad) is unable to consistently start tasks successfully")
	})
	// The third failure started the wait: no fourth launch yet.
	if n := len(r.tasks(t, "bad", "STOPPED")) + len(r.tasks(t, "bad", "RUNNING")); n != 3 {
		t.Fatalf("%d launches when the throttle began, want 3", n)
	}
	if s.Deployments[0].FailedTasks != 3 || s.RunningCount != 0 {
		t.Fatalf("deployment: failed %d running %d", s.Deployments[0].FailedTasks, s.RunningCount)
	}
}
