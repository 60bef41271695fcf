package fault

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/coverage"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// protocolDeadline bounds each exchange with the server in the protocol
// scenario (a manifest, an acknowledgement).
const protocolDeadline = 20 * time.Second

// wireAgent speaks the session protocol by hand with a real agent
// credential, so the test decides what is sent, twice or out of order.
type wireAgent struct {
	t        *testing.T
	conn     *websocket.Conn
	instance string
	in       chan protocol.Message
	done     chan error
}

func dialSession(t *testing.T, url, key, secret, instance string) *wireAgent {
	t.Helper()
	conn := testenv.DialSession(t, url, key, secret)
	w := &wireAgent{t: t, conn: conn, instance: instance, in: make(chan protocol.Message, 64), done: make(chan error, 1)}
	go func() {
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				w.done <- err
				close(w.in)
				return
			}
			var m protocol.Message
			if json.Unmarshal(b, &m) == nil {
				w.in <- m
			}
		}
	}()
	w.send(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{ProtocolVersion: protocol.Version, ContainerInstanceArn: instance, AgentVersion: "fault-test"}})
	return w
}

func (w *wireAgent) send(m protocol.Message) {
	w.t.Helper()
	b, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(context.Background(), protocolDeadline)
	defer cancel()
	if err := w.conn.Write(ctx, websocket.MessageText, b); err != nil {
		w.t.Fatalf("send %s: %v", m.Type, err)
	}
}

// next returns the next message of type typ accepted by ok, skipping others.
func (w *wireAgent) next(typ string, ok func(protocol.Message) bool) protocol.Message {
	w.t.Helper()
	timeout := time.After(protocolDeadline)
	for {
		select {
		case m, open := <-w.in:
			if !open {
				w.t.Fatalf("session closed while waiting for %s", typ)
			}
			if m.Type == protocol.TypeError {
				w.t.Logf("server error: %+v", m.Error)
			}
			if m.Type == typ && (ok == nil || ok(m)) {
				return m
			}
		case <-timeout:
			w.t.Fatalf("no %s within %s", typ, protocolDeadline)
		}
	}
}

// report sends a state batch and waits for its acknowledgement.
func (w *wireAgent) report(id uint64, states ...protocol.TaskState) {
	w.t.Helper()
	w.send(protocol.Message{Type: protocol.TypeStateChange, StateChange: &protocol.StateChange{ID: id, Tasks: states}})
	w.next(protocol.TypeStateAck, func(m protocol.Message) bool { return m.StateAck.ID == id })
}

func state(arn, status string, seq uint64) protocol.TaskState {
	st := protocol.TaskState{Arn: arn, LastStatus: status, Seq: seq,
		Containers: []protocol.ContainerState{{Name: "main", LastStatus: map[bool]string{true: "RUNNING", false: "PENDING"}[status == "RUNNING"], RuntimeID: "fake-" + arn[len(arn)-8:]}}}
	now := time.Now()
	switch status {
	case "RUNNING":
		st.StartedAt = now
	case "STOPPED":
		st.StoppedAt, st.StoppedReason = now, "Essential container in task exited"
		st.Containers[0].LastStatus = "STOPPED"
	}
	return st
}

// TestDuplicateAndReorderedReports drives the session protocol directly:
// replayed batches, states out of order within and across batches, a
// late state after STOPPED, a state for another instance's task, and a
// second session for the same instance. The server must never move a task
// back or create a task.
func TestDuplicateAndReorderedReports(t *testing.T) {
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	ctx := context.Background()
	cluster := "fault-wire"
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(cluster)}); err != nil {
		t.Fatal(err)
	}
	register := func() (key, secret, arn string) {
		key, secret = agents.Credential(t, srv, cluster)
		out, err := srv.ECSWith(key, secret).RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String(cluster),
			TotalResources: []types.Resource{{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 2048},
				{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 2048}}})
		if err != nil {
			t.Fatal(err)
		}
		return key, secret, aws.ToString(out.ContainerInstance.ContainerInstanceArn)
	}
	keyA, secretA, instA := register()
	_, _, instB := register()
	a := dialSession(t, srv.URL, keyA, secretA, instA)
	a.next(protocol.TypeManifest, nil)

	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("wire"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("main"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	start := func(inst string) string {
		out, err := c.StartTask(ctx, &ecs.StartTaskInput{Cluster: aws.String(cluster), TaskDefinition: td.TaskDefinition.TaskDefinitionArn, ContainerInstances: []string{inst}})
		if err != nil || len(out.Tasks) != 1 {
			t.Fatalf("start task on %s: %+v %v", inst, out, err)
		}
		return aws.ToString(out.Tasks[0].TaskArn)
	}
	t1, t2, other := start(instA), start(instA), start(instB)
	a.next(protocol.TypeManifest, func(m protocol.Message) bool { return len(m.Manifest.Tasks) == 2 })
	status := func(arn string) string {
		out, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(cluster), Tasks: []string{arn}})
		if err != nil || len(out.Tasks) != 1 {
			t.Fatalf("describe %s: %v", arn, err)
		}
		return aws.ToString(out.Tasks[0].LastStatus)
	}
	expect := func(when, arn, want string) {
		t.Helper()
		if got := status(arn); got != want {
			t.Errorf("%s: task %s is %s, want %s", when, arn, got, want)
		}
	}

	a.report(1, state(t1, "PENDING", 1))
	a.report(2, state(t1, "RUNNING", 2))
	a.report(1, state(t1, "PENDING", 1)) // replayed
	a.report(2, state(t1, "RUNNING", 2)) // duplicated
	expect("after a replayed batch", t1, "RUNNING")

	a.report(3, state(t2, "RUNNING", 2), state(t2, "PENDING", 1)) // reordered within a batch
	expect("after states reordered within a batch", t2, "RUNNING")
	a.report(4, state(t2, "PENDING", 7)) // a lower status with a higher seq
	expect("after a lower status with a higher seq", t2, "RUNNING")

	a.report(6, state(t1, "STOPPED", 4)) // batches out of order
	a.report(5, state(t1, "RUNNING", 3))
	expect("after batches out of order", t1, "STOPPED")
	a.report(7, state(t1, "RUNNING", 9)) // a late state after STOPPED
	expect("after a late state", t1, "STOPPED")

	a.report(8, state(other, "RUNNING", 1)) // not this instance's task
	expect("after a report from the wrong instance", other, "PROVISIONING")

	// A second session for the same instance (a duplicate agent) replaces
	// the first, which the server closes.
	b := dialSession(t, srv.URL, keyA, secretA, instA)
	b.next(protocol.TypeManifest, nil)
	select {
	case <-a.done:
	case <-time.After(protocolDeadline):
		t.Errorf("the first session stayed open beside the second")
	}
	b.report(9, state(t2, "RUNNING", 2)) // replayed through the new session
	expect("after a replay through a new session", t2, "RUNNING")

	list, err := c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), DesiredStatus: types.DesiredStatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.TaskArns) != 2 {
		t.Errorf("tasks desired RUNNING: %v, want %s and %s", list.TaskArns, t2, other)
	}

	h := coverage.NewHistory()
	if err := h.Fetch(ctx, coverage.NewClient(srv.URL, aws.Credentials{AccessKeyID: srv.Config.AdminKeyID, SecretAccessKey: srv.Config.AdminSecret}, nil), cluster); err != nil {
		t.Fatal(err)
	}
	v := recordViolations(h)
	// Each accepted state is recorded once: t1 PENDING, RUNNING, STOPPED.
	if tk := h.Task(t1); tk == nil || len(tk.States) != 3 {
		v = append(v, "task "+t1+" recorded states: "+statesOf(tk)+", want PENDING RUNNING STOPPED")
	}
	if len(v) > 0 {
		f := &fleet{t: t, h: h, ev: coverage.NewClient(srv.URL, aws.Credentials{AccessKeyID: srv.Config.AdminKeyID, SecretAccessKey: srv.Config.AdminSecret}, nil), cluster: cluster}
		t.Errorf("%d invariant violations:\n  %s\nevents: %s", len(v), strings.Join(v, "\n  "), f.dump("protocol"))
	}
}

func statesOf(t *coverage.Task) string {
	if t == nil {
		return "none"
	}
	var s []string
	for _, st := range t.States {
		s = append(s, st.Status)
	}
	return strings.Join(s, " ")
}
