package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/testenv"
)

// agentConn is one instance's session, spoken by hand: the test reads
// only when it expects something, so the client side runs no goroutine.
type agentConn struct {
	t        *testing.T
	conn     *websocket.Conn
	instance string
}

// registerAgent makes cluster, an agent credential in it and an instance
// of 1,024 CPU and MiB registered with it, and opens the instance's
// session; it returns the session and the instance's ARN.
func registerAgent(t *testing.T, srv *testenv.Server, cluster string) (*agentConn, string) {
	t.Helper()
	ctx := context.Background()
	if _, err := srv.ECS().CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(cluster)}); err != nil {
		t.Fatal(err)
	}
	cred, err := srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	out, err := srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey).RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String(cluster),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 1024},
		},
		VersionInfo: &types.VersionInfo{AgentVersion: aws.String("test"), DockerVersion: aws.String("none")},
	})
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.ContainerInstance.ContainerInstanceArn)
	return dialAgent(t, srv, cred, arn), arn
}

func dialAgent(t *testing.T, srv *testenv.Server, cred *ops.CreateAgentCredentialResponse, instance string) *agentConn {
	t.Helper()
	conn := testenv.DialSession(t, srv.URL, cred.AccessKeyID, cred.SecretAccessKey)
	a := &agentConn{t: t, conn: conn, instance: instance}
	a.send(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{ProtocolVersion: protocol.Version, ContainerInstanceArn: instance, AgentVersion: "test"}})
	return a
}

func (a *agentConn) send(m protocol.Message) {
	a.t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		a.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.conn.Write(ctx, websocket.MessageText, b); err != nil {
		a.t.Fatalf("send %s: %v", m.Type, err)
	}
}

// next reads messages until one of type typ, within d.
func (a *agentConn) next(typ string, d time.Duration) (protocol.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		_, b, err := a.conn.Read(ctx)
		if err != nil {
			return protocol.Message{}, err
		}
		var m protocol.Message
		if err := json.Unmarshal(b, &m); err != nil {
			return m, fmt.Errorf("undecodable message %q: %w", b, err)
		}
		if m.Type == typ {
			return m, nil
		}
	}
}

func (a *agentConn) must(typ string, d time.Duration) protocol.Message {
	a.t.Helper()
	m, err := a.next(typ, d)
	if err != nil {
		a.t.Fatalf("%s: no %s within %s: %v", a.instance, typ, d, err)
	}
	return m
}

// A session sends what it owes from whichever goroutine has it to send
// (manifests from a writer that lives while one is owed, acks from its
// receiver, heartbeats from its timer), so an idle session holds one
// goroutine on the server, not two. Each path is checked here: the first
// manifest, a manifest after a placement, an ack, heartbeats, and the end
// of a deregistered instance's session.
func TestIdleSessionsHoldOneGoroutine(t *testing.T) {
	const n = 40
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	admin := srv.ECS()
	if _, err := admin.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("idle")}); err != nil {
		t.Fatal(err)
	}
	type instance struct {
		cred *ops.CreateAgentCredentialResponse
		arn  string
	}
	var fleet []instance
	for range n {
		cred, err := srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: "idle"})
		if err != nil {
			t.Fatal(err)
		}
		out, err := srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey).RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
			Cluster: aws.String("idle"),
			TotalResources: []types.Resource{
				{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024},
				{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 1024},
			},
			VersionInfo: &types.VersionInfo{AgentVersion: aws.String("test"), DockerVersion: aws.String("none")},
		})
		if err != nil {
			t.Fatalf("register: %v", err)
		}
		fleet = append(fleet, instance{cred, aws.ToString(out.ContainerInstance.ContainerInstanceArn)})
	}
	settled := func() int {
		// Goroutines that end (requests' connections, timers' calls) are
		// given a moment; what stays is counted.
		least := runtime.NumGoroutine()
		for range 10 {
			time.Sleep(20 * time.Millisecond)
			least = min(least, runtime.NumGoroutine())
		}
		return least
	}
	before := settled()

	agents := make([]*agentConn, n)
	for i, in := range fleet {
		agents[i] = dialAgent(t, srv, in.cred, in.arn)
	}
	byArn := map[string]*agentConn{}
	for _, a := range agents {
		m := a.must(protocol.TypeManifest, 10*time.Second)
		a.send(protocol.Message{Type: protocol.TypeManifestAck, ManifestAck: &protocol.ManifestAck{Seq: m.Manifest.Seq}})
		byArn[a.instance] = a
	}
	// Two goroutines a session would be 2n: one each is n.
	if d := settled() - before; d > n+n/4 {
		t.Fatalf("%d idle sessions hold %d goroutines on the server, want about %d", n, d, n)
	}

	// A placement owes its instance a manifest, sent by a writer that
	// ends once it has.
	td, err := admin.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("idle"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("app"), Image: aws.String("busybox"), Memory: aws.Int32(128)}}})
	if err != nil {
		t.Fatal(err)
	}
	run, err := admin.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("idle"), TaskDefinition: td.TaskDefinition.TaskDefinitionArn})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run task: %+v %v", run, err)
	}
	task := run.Tasks[0]
	a := byArn[aws.ToString(task.ContainerInstanceArn)]
	if a == nil {
		t.Fatalf("task placed on %s, not one of the fleet", aws.ToString(task.ContainerInstanceArn))
	}
	m := a.must(protocol.TypeManifest, 10*time.Second)
	if len(m.Manifest.Tasks) != 1 || m.Manifest.Tasks[0].Arn != aws.ToString(task.TaskArn) {
		t.Fatalf("manifest after the placement: %+v", m.Manifest.Tasks)
	}

	// The receiver acknowledges a state report itself.
	a.send(protocol.Message{Type: protocol.TypeStateChange, StateChange: &protocol.StateChange{ID: 1, Tasks: []protocol.TaskState{{
		Arn: aws.ToString(task.TaskArn), LastStatus: "RUNNING", Seq: 1, StartedAt: time.Now(),
		Containers: []protocol.ContainerState{{Name: "app", RuntimeID: "r1", LastStatus: "RUNNING"}}}}}})
	if ack := a.must(protocol.TypeStateAck, 10*time.Second); ack.StateAck.ID != 1 {
		t.Fatalf("ack of batch 1: %+v", ack.StateAck)
	}

	// Idle past the heartbeat interval, the server sends heartbeats.
	if hb := agents[0].must(protocol.TypeHeartbeat, protocol.HeartbeatInterval+5*time.Second); hb.Heartbeat == nil {
		t.Fatal("heartbeat without a body")
	}
	if d := settled() - before; d > n+n/4 {
		t.Fatalf("after a placement, an ack and heartbeats, %d sessions hold %d goroutines, want about %d", n, d, n)
	}

	// A deregistered instance's session is told so and ended.
	last := agents[n-1]
	if _, err := admin.DeregisterContainerInstance(ctx, &ecs.DeregisterContainerInstanceInput{Cluster: aws.String("idle"),
		ContainerInstance: aws.String(last.instance), Force: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	e := last.must(protocol.TypeError, 10*time.Second)
	if e.Error.Code != "InstanceInactive" {
		t.Fatalf("deregistered instance told %+v", e.Error)
	}
	if _, err := last.next(protocol.TypeManifest, 10*time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deregistered instance's session: %v, want it ended", err)
	}
}
