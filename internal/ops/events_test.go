package ops_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/testenv"
)

// callExtension calls a CapstanV1 operation over HTTP, signed like any
// ECS request. A failure comes back as "ErrorType: message".
func callExtension(ctx context.Context, srv *testenv.Server, op string, in, out any) error {
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "CapstanV1."+op)
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: srv.Config.AdminKeyID, SecretAccessKey: srv.Config.AdminSecret}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "ecs", "us-east-1", time.Now()); err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
		}
		json.Unmarshal(b, &e)
		return fmt.Errorf("%s: %s", e.Type, e.Message)
	}
	return json.Unmarshal(b, out)
}

func listEvents(t *testing.T, srv *testenv.Server, in ops.ListEventsRequest) ops.ListEventsResponse {
	t.Helper()
	var out ops.ListEventsResponse
	if err := callExtension(context.Background(), srv, "ListEvents", in, &out); err != nil {
		t.Fatalf("ListEvents %+v: %v", in, err)
	}
	return out
}

// waitEvents follows the cluster's events with long polls until want of
// them (after the filters) have come, or fails after a deadline.
func waitEvents(t *testing.T, srv *testenv.Server, in ops.ListEventsRequest, want int) []events.Event {
	t.Helper()
	in.WaitSeconds = aws.Int32(5)
	var got []events.Event
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < want {
		if time.Now().After(deadline) {
			t.Fatalf("got %d events, want %d: %v", len(got), want, got)
		}
		out := listEvents(t, srv, in)
		got = append(got, out.Events...)
		in.After = out.Cursor
	}
	return got
}

func detail[T any](t *testing.T, e events.Event) T {
	t.Helper()
	var d T
	if err := json.Unmarshal(e.Detail, &d); err != nil {
		t.Fatalf("detail of %s: %v", e.DetailType, err)
	}
	return d
}

func statuses(t *testing.T, evs []events.Event) []string {
	var out []string
	for _, e := range evs {
		switch e.DetailType {
		case events.TaskStateChange:
			out = append(out, detail[events.TaskDetail](t, e).LastStatus)
		case events.ContainerInstanceStateChange:
			out = append(out, detail[events.ContainerInstanceDetail](t, e).Status)
		case events.DaemonDeploymentStateChange:
			out = append(out, detail[events.DeploymentDetail](t, e).EventName)
		}
	}
	return out
}

// registerInstance registers an instance as the admin and marks its agent
// connected, so that RunTask places on it.
func registerInstance(t *testing.T, srv *testenv.Server, cluster string) types.ContainerInstance {
	t.Helper()
	ctx := context.Background()
	out, err := srv.ECS().RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String(cluster),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 2048},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 4096},
		},
	})
	if err != nil {
		t.Fatalf("register instance: %v", err)
	}
	ci := *out.ContainerInstance
	id := aws.ToString(ci.ContainerInstanceArn)[strings.LastIndexByte(aws.ToString(ci.ContainerInstanceArn), '/')+1:]
	if _, err := srv.Store.Txn().Put(store.SessionKey(cluster, id), store.Session{Server: "test", ConnectedAt: time.Now()}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ci
}

func TestEventsForTasksAndInstances(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("ev")}); err != nil {
		t.Fatal(err)
	}
	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{
		Family:               aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(128)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ci := registerInstance(t, srv, "ev")
	ciArn := aws.ToString(ci.ContainerInstanceArn)
	instID := ciArn[strings.LastIndexByte(ciArn, '/')+1:]

	run, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("ev"), TaskDefinition: td.TaskDefinition.TaskDefinitionArn, StartedBy: aws.String("events-test")})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run task: %v %+v", err, run)
	}
	taskArn := aws.ToString(run.Tasks[0].TaskArn)
	now := time.Now()
	exit := 0
	err = srv.Service.ApplyTaskStates(ctx, "ev", instID, []protocol.TaskState{
		{Arn: taskArn, LastStatus: "RUNNING", StartedAt: now, Seq: 1,
			Containers: []protocol.ContainerState{{Name: "web", LastStatus: "RUNNING", RuntimeID: "c0ffee"}}},
		{Arn: taskArn, LastStatus: "STOPPED", StoppedAt: now, StopCode: "EssentialContainerExited", StoppedReason: "Essential container in task exited", Seq: 2,
			Containers: []protocol.ContainerState{{Name: "web", LastStatus: "STOPPED", ExitCode: &exit}}},
		{Arn: taskArn, LastStatus: "RUNNING", Seq: 1}, // a resent, older state changes nothing
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Store.Sync(ctx); err != nil { // written in-process, not by the API's caller
		t.Fatal(err)
	}

	tasks := listEvents(t, srv, ops.ListEventsRequest{Cluster: "ev", DetailType: events.TaskStateChange}).Events
	if got := statuses(t, tasks); !slices.Equal(got, []string{"RUNNING", "STOPPED"}) {
		t.Fatalf("task events %v", got)
	}
	for _, e := range tasks {
		if e.Source != "aws.ecs" || e.Version != "0" || e.Account != "123456789012" || e.Region != "us-east-1" ||
			!slices.Equal(e.Resources, []string{taskArn}) {
			t.Errorf("envelope %+v", e)
		}
		if _, err := time.Parse(time.RFC3339, e.Time); err != nil {
			t.Errorf("time %q: %v", e.Time, err)
		}
	}
	stopped := detail[events.TaskDetail](t, tasks[1])
	if stopped.TaskArn != taskArn || stopped.ContainerInstanceArn != ciArn || stopped.DesiredStatus != "STOPPED" ||
		stopped.StopCode != "EssentialContainerExited" || stopped.StartedBy != "events-test" || stopped.Group != "family:web" ||
		stopped.Version != 3 || stopped.ClusterArn != "arn:aws:ecs:us-east-1:123456789012:cluster/ev" {
		t.Errorf("stopped detail %+v", stopped)
	}
	if len(stopped.Containers) != 1 || stopped.Containers[0].ExitCode == nil || *stopped.Containers[0].ExitCode != 0 ||
		stopped.Containers[0].RuntimeID != "c0ffee" || stopped.Containers[0].LastStatus != "STOPPED" {
		t.Errorf("stopped containers %+v", stopped.Containers)
	}

	if _, err := c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String("ev"),
		ContainerInstances: []string{ciArn}, Status: types.ContainerInstanceStatusDraining}); err != nil {
		t.Fatal(err)
	}
	// Draining twice is no change and no event.
	if _, err := c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String("ev"),
		ContainerInstances: []string{ciArn}, Status: types.ContainerInstanceStatusDraining}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeregisterContainerInstance(ctx, &ecs.DeregisterContainerInstanceInput{Cluster: aws.String("ev"), ContainerInstance: aws.String(ciArn)}); err != nil {
		t.Fatal(err)
	}
	insts := listEvents(t, srv, ops.ListEventsRequest{Cluster: "ev", DetailType: events.ContainerInstanceStateChange}).Events
	if got := statuses(t, insts); !slices.Equal(got, []string{"ACTIVE", "DRAINING", "INACTIVE"}) {
		t.Fatalf("instance events %v", got)
	}
	reg := detail[events.ContainerInstanceDetail](t, insts[0])
	if reg.ContainerInstanceArn != ciArn || reg.AgentConnected || len(reg.RegisteredResources) == 0 || !slices.Equal(insts[0].Resources, []string{ciArn}) {
		t.Errorf("registration detail %+v", reg)
	}
	if d := detail[events.ContainerInstanceDetail](t, insts[1]); !d.AgentConnected {
		t.Errorf("draining detail: agent not connected: %+v", d)
	}

	// All of it, oldest first; the resource filter finds the task's events.
	all := listEvents(t, srv, ops.ListEventsRequest{Cluster: "ev"}).Events
	if got := statuses(t, all); !slices.Equal(got, []string{"ACTIVE", "RUNNING", "STOPPED", "DRAINING", "INACTIVE"}) {
		t.Fatalf("all events %v", got)
	}
	byTask := listEvents(t, srv, ops.ListEventsRequest{Cluster: "ev", Resource: taskArn}).Events
	if len(byTask) != 2 {
		t.Fatalf("events naming the task: %d", len(byTask))
	}
	// Events are per cluster.
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("quiet")}); err != nil {
		t.Fatal(err)
	}
	if n := len(listEvents(t, srv, ops.ListEventsRequest{Cluster: "quiet"}).Events); n != 0 {
		t.Fatalf("%d events in another cluster", n)
	}
}

func TestEventsForDaemonDeployments(t *testing.T) {
	f := newDaemonFixture(t)
	out := f.create(t, "monitoring", nil)
	daemonArn := aws.ToString(out.DaemonArn)
	got := waitEvents(t, f.srv, ops.ListEventsRequest{Cluster: "fleet", Resource: daemonArn}, 3)
	want := []string{"DAEMON_DEPLOYMENT_PENDING", "DAEMON_DEPLOYMENT_IN_PROGRESS", "DAEMON_DEPLOYMENT_SUCCESSFUL"}
	if s := statuses(t, got); !slices.Equal(s, want) {
		t.Fatalf("deployment events %v, want %v", s, want)
	}
	for _, e := range got {
		d := detail[events.DeploymentDetail](t, e)
		if e.DetailType != events.DaemonDeploymentStateChange || d.EventType != "INFO" || d.DaemonArn != daemonArn ||
			d.DaemonDeploymentArn != aws.ToString(out.DeploymentArn) || d.ClusterArn != f.cluster ||
			!strings.Contains(d.TargetDaemonRevisionArn, ":daemon-revision/fleet/monitoring/") {
			t.Errorf("event %s: %+v", e.ID, d)
		}
		if !slices.Equal(e.Resources, []string{daemonArn}) {
			t.Errorf("resources %v", e.Resources)
		}
	}
}

func TestListEventsPagesAndWaits(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	if _, err := srv.ECS().CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("pg")}); err != nil {
		t.Fatal(err)
	}
	em := srv.Service.Events()
	emit := func(n int) {
		t.Helper()
		ev := events.TaskStateChangeEvent(shapes.Task{TaskArn: fmt.Sprintf("arn:aws:ecs:us-east-1:123456789012:task/pg/%032d", n), LastStatus: "RUNNING"}, time.Now())
		if err := em.Emit(ctx, "pg", ev); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 25 {
		emit(i)
	}
	// Emitted in-process, not by the API's caller: its reads need not wait
	// for them (docs/api.md), so they are in the cache before it lists.
	if err := srv.Store.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("paging", func(t *testing.T) {
		var ids []string
		var pages []int
		in := ops.ListEventsRequest{Cluster: "pg", MaxResults: aws.Int32(10)}
		for {
			out := listEvents(t, srv, in)
			pages = append(pages, len(out.Events))
			if len(out.Events) == 0 {
				break
			}
			for _, e := range out.Events {
				ids = append(ids, e.ID)
			}
			in.After = out.Cursor
		}
		if !slices.Equal(pages, []int{10, 10, 5, 0}) || len(ids) != 25 || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != 25 {
			t.Fatalf("pages %v, ids %v", pages, ids)
		}
		// An event id is a cursor too.
		out := listEvents(t, srv, ops.ListEventsRequest{Cluster: "pg", After: ids[19]})
		if len(out.Events) != 5 || out.Events[0].ID != ids[20] {
			t.Fatalf("after %s: %d events", ids[19], len(out.Events))
		}
	})

	t.Run("late commit", func(t *testing.T) {
		// An event whose ID sorts before the cursor but that was committed
		// after the listing (a slow writer) still comes next.
		cur := listEvents(t, srv, ops.ListEventsRequest{Cluster: "pg", MaxResults: aws.Int32(1000)}).Cursor
		ms := time.Now().Add(-2 * time.Second).UnixMilli()
		id := fmt.Sprintf("%08x-%04x-7000-8000-000000000000", ms>>16, ms&0xffff)
		late := events.DaemonDeploymentStateChangeEvent(events.DeploymentChange{Status: "PENDING", DaemonArn: "late"})
		late.ID = id
		if _, err := srv.Store.Txn().Put(store.EventKey("pg", id), late).Commit(ctx); err != nil {
			t.Fatal(err)
		}
		// The listing is another caller's read, which need not wait for a
		// write it did not make (docs/api.md): the write is in the cache
		// first, as it would be a moment later.
		if err := srv.Store.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		out := listEvents(t, srv, ops.ListEventsRequest{Cluster: "pg", After: cur})
		if len(out.Events) != 1 || out.Events[0].ID != id {
			t.Fatalf("late event not listed: %+v", out.Events)
		}
		if again := listEvents(t, srv, ops.ListEventsRequest{Cluster: "pg", After: out.Cursor}); len(again.Events) != 0 {
			t.Fatalf("late event listed twice: %+v", again.Events)
		}
	})

	t.Run("long poll", func(t *testing.T) {
		cur := listEvents(t, srv, ops.ListEventsRequest{Cluster: "pg", MaxResults: aws.Int32(1000)}).Cursor
		type result struct {
			out ops.ListEventsResponse
			err error
		}
		done := make(chan result, 1)
		go func() {
			var out ops.ListEventsResponse
			err := callExtension(ctx, srv, "ListEvents", ops.ListEventsRequest{Cluster: "pg", After: cur, WaitSeconds: aws.Int32(20)}, &out)
			done <- result{out, err}
		}()
		// Give the poll a moment to be waiting; it returns the event either way.
		select {
		case r := <-done:
			t.Fatalf("long poll returned before any event: %+v %v", r.out, r.err)
		case <-time.After(300 * time.Millisecond):
		}
		emit(100)
		r := <-done
		if r.err != nil || len(r.out.Events) != 1 || !strings.HasSuffix(r.out.Events[0].Resources[0], fmt.Sprintf("%032d", 100)) {
			t.Fatalf("long poll: %+v %v", r.out, r.err)
		}
		// With nothing new it times out empty, with a cursor to go on from.
		out := listEvents(t, srv, ops.ListEventsRequest{Cluster: "pg", After: r.out.Cursor, WaitSeconds: aws.Int32(1)})
		if len(out.Events) != 0 || out.Cursor == "" {
			t.Fatalf("idle poll: %+v", out)
		}
		// A shutting-down server ends polls at once.
		em.EndWaits()
		out = listEvents(t, srv, ops.ListEventsRequest{Cluster: "pg", After: out.Cursor, WaitSeconds: aws.Int32(20)})
		if len(out.Events) != 0 {
			t.Fatalf("poll after EndWaits: %+v", out)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		for _, in := range []ops.ListEventsRequest{
			{},
			{Cluster: "pg", MaxResults: aws.Int32(0)},
			{Cluster: "pg", MaxResults: aws.Int32(1001)},
			{Cluster: "pg", WaitSeconds: aws.Int32(21)},
			{Cluster: "pg", WaitSeconds: aws.Int32(-1)},
			{Cluster: "pg", After: "not-a-cursor"},
			{Cluster: "pg", DetailType: "ECS Something Else"},
		} {
			var out ops.ListEventsResponse
			err := callExtension(ctx, srv, "ListEvents", in, &out)
			if err == nil || !strings.HasPrefix(err.Error(), "InvalidParameterException") {
				t.Errorf("%+v: %v", in, err)
			}
		}
		var out ops.ListEventsResponse
		if err := callExtension(ctx, srv, "ListEvents", ops.ListEventsRequest{Cluster: "nope"}, &out); err == nil || !strings.HasPrefix(err.Error(), "ClusterNotFoundException") {
			t.Errorf("unknown cluster: %v", err)
		}
	})
}
