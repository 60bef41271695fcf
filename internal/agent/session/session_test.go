package session_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/agent/session"
	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/testenv"
)

// fakeEngine records what the session hands it and reports what the test
// tells it to.
type fakeEngine struct {
	mu      sync.Mutex
	desired []protocol.Task
	sets    int
	changes chan protocol.TaskState
}

func newFakeEngine() *fakeEngine { return &fakeEngine{changes: make(chan protocol.TaskState, 64)} }

func (e *fakeEngine) SetDesired(ts []protocol.Task) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.desired = ts
	e.sets++
}

func (e *fakeEngine) Changes() <-chan protocol.TaskState { return e.changes }

func (e *fakeEngine) task(arn string) (protocol.Task, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.desired {
		if t.Arn == arn {
			return t, true
		}
	}
	return protocol.Task{}, false
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type rig struct {
	srv      *testenv.Server
	admin    *ecs.Client
	agent    *ecs.Client
	cred     ops.CreateAgentCredentialResponse
	instance string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	r := &rig{srv: srv, admin: srv.ECS()}
	if _, err := r.admin.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("edge")}); err != nil {
		t.Fatal(err)
	}
	cred, err := srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	r.cred = *cred
	r.agent = srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey)
	out, err := r.agent.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String("edge"),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 2048},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 1024},
			{Name: aws.String("PORTS"), Type: aws.String("STRINGSET"), StringSetValue: []string{"22"}},
		},
		VersionInfo: &types.VersionInfo{AgentVersion: aws.String("test"), DockerVersion: aws.String("none")},
	})
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	r.instance = aws.ToString(out.ContainerInstance.ContainerInstanceArn)
	return r
}

// start runs a session client until the returned stop is called.
func (r *rig) start(t *testing.T, db *state.DB, eng *fakeEngine, endpoint string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := session.New(session.Config{Endpoint: endpoint, AccessKeyID: r.cred.AccessKeyID, SecretKey: r.cred.SecretAccessKey,
		Region: "us-east-1", InstanceArn: r.instance, AgentVersion: "test", Store: db, Engine: eng,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	return func() { cancel(); <-done }
}

func (r *rig) connected(t *testing.T) bool {
	t.Helper()
	out, err := r.admin.DescribeContainerInstances(context.Background(), &ecs.DescribeContainerInstancesInput{
		Cluster: aws.String("edge"), ContainerInstances: []string{r.instance}})
	if err != nil {
		t.Fatal(err)
	}
	return out.ContainerInstances[0].AgentConnected
}

func (r *rig) registerTD(t *testing.T) string {
	t.Helper()
	out, err := r.admin.RegisterTaskDefinition(context.Background(), &ecs.RegisterTaskDefinitionInput{
		Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(256),
			PortMappings: []types.PortMapping{{ContainerPort: aws.Int32(80), HostPort: aws.Int32(8080)}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.TaskDefinition.TaskDefinitionArn)
}

func (r *rig) describe(t *testing.T, arn string) types.Task {
	t.Helper()
	out, err := r.admin.DescribeTasks(context.Background(), &ecs.DescribeTasksInput{Cluster: aws.String("edge"), Tasks: []string{arn}})
	if err != nil || len(out.Tasks) != 1 {
		t.Fatalf("describe task: %+v %v", out, err)
	}
	return out.Tasks[0]
}

func openDB(t *testing.T, dir string) *state.DB {
	t.Helper()
	db, err := state.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestTaskLifecycleOverSession(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	eng := newFakeEngine()
	stop := r.start(t, openDB(t, t.TempDir()), eng, r.srv.URL)
	defer stop()
	eventually(t, 10*time.Second, "agentConnected", func() bool { return r.connected(t) })

	td := r.registerTD(t)
	run, err := r.admin.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("edge"), TaskDefinition: aws.String(td), Count: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	// Two tasks both want host port 8080: one is placed, one fails with a reason.
	if len(run.Tasks) != 1 || len(run.Failures) != 1 || aws.ToString(run.Failures[0].Reason) == "" {
		t.Fatalf("run: %d tasks, failures %+v", len(run.Tasks), run.Failures)
	}
	arn := aws.ToString(run.Tasks[0].TaskArn)
	eventually(t, 10*time.Second, "manifest with the task", func() bool { _, ok := eng.task(arn); return ok })

	ci, _ := r.admin.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("edge"), ContainerInstances: []string{r.instance}})
	if got := remaining(ci.ContainerInstances[0], "MEMORY"); got != 1024-256 {
		t.Fatalf("remaining memory after placement: %d", got)
	}

	exit := 0
	eng.changes <- protocol.TaskState{Arn: arn, LastStatus: "RUNNING", Seq: 1, StartedAt: time.Now(),
		Containers: []protocol.ContainerState{{Name: "web", RuntimeID: "abc123", LastStatus: "RUNNING"}}}
	eventually(t, 10*time.Second, "task RUNNING", func() bool { return aws.ToString(r.describe(t, arn).LastStatus) == "RUNNING" })
	if c := r.describe(t, arn).Containers[0]; aws.ToString(c.RuntimeId) != "abc123" {
		t.Fatalf("container: %+v", c)
	}

	if _, err := r.admin.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String("edge"), Task: aws.String(arn), Reason: aws.String("test over")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "desired STOPPED reaches the agent", func() bool {
		d, ok := eng.task(arn)
		return ok && d.DesiredStatus == "STOPPED" && d.StoppedReason == "test over"
	})
	eng.changes <- protocol.TaskState{Arn: arn, LastStatus: "STOPPED", Seq: 2, StoppedAt: time.Now(),
		Containers: []protocol.ContainerState{{Name: "web", LastStatus: "STOPPED", ExitCode: &exit}}}
	eventually(t, 10*time.Second, "task STOPPED", func() bool { return aws.ToString(r.describe(t, arn).LastStatus) == "STOPPED" })
	task := r.describe(t, arn)
	if aws.ToString(task.StoppedReason) != "test over" || task.StopCode != types.TaskStopCodeUserInitiated || aws.ToInt32(task.Containers[0].ExitCode) != 0 {
		t.Fatalf("stopped task: reason %q code %s", aws.ToString(task.StoppedReason), task.StopCode)
	}
	eventually(t, 10*time.Second, "task leaves the manifest", func() bool { _, ok := eng.task(arn); return !ok })
	ci, _ = r.admin.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("edge"), ContainerInstances: []string{r.instance}})
	if got := remaining(ci.ContainerInstances[0], "MEMORY"); got != 1024 {
		t.Fatalf("memory not released: %d", got)
	}
	// A resent old state changes nothing.
	eng.changes <- protocol.TaskState{Arn: arn, LastStatus: "RUNNING", Seq: 1}
	time.Sleep(300 * time.Millisecond)
	if aws.ToString(r.describe(t, arn).LastStatus) != "STOPPED" {
		t.Fatal("an old state moved a stopped task back")
	}
}

func remaining(ci types.ContainerInstance, name string) int32 {
	for _, r := range ci.RemainingResources {
		if aws.ToString(r.Name) == name {
			return r.IntegerValue
		}
	}
	return -1
}

// proxy forwards TCP to target until cut.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	down   bool
	frozen bool
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.pipe(c, up)
			go p.pipe(up, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

// pipe copies a to b, dropping the bytes while the proxy is frozen (a
// partition that sends no FIN or RST).
func (p *proxy) pipe(a, b net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := a.Read(buf)
		p.mu.Lock()
		frozen := p.frozen
		p.mu.Unlock()
		if n > 0 && !frozen {
			if _, werr := b.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			a.Close()
			b.Close()
			return
		}
	}
}

// cut drops every connection and refuses new ones until heal.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) heal() {
	p.mu.Lock()
	p.down, p.frozen = false, false
	p.mu.Unlock()
}

// freeze silently drops traffic on open connections.
func (p *proxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func TestSessionSurvivesNetworkCutAndNoticesSilence(t *testing.T) {
	r := newRig(t)
	eng := newFakeEngine()
	px := startProxy(t, r.srv.Addr)
	db := openDB(t, t.TempDir())
	stop := r.start(t, db, eng, "http://"+px.ln.Addr().String())
	defer stop()
	eventually(t, 10*time.Second, "agentConnected", func() bool { return r.connected(t) })
	td := r.registerTD(t)
	run, err := r.admin.RunTask(context.Background(), &ecs.RunTaskInput{Cluster: aws.String("edge"), TaskDefinition: aws.String(td)})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run: %+v %v", run, err)
	}
	arn := aws.ToString(run.Tasks[0].TaskArn)
	eventually(t, 10*time.Second, "manifest with the task", func() bool { _, ok := eng.task(arn); return ok })

	px.cut()
	// A state change made while the network is down is kept and delivered later.
	eng.changes <- protocol.TaskState{Arn: arn, LastStatus: "RUNNING", Seq: 1, StartedAt: time.Now(),
		Containers: []protocol.ContainerState{{Name: "web", RuntimeID: "cut-1", LastStatus: "RUNNING"}}}
	eventually(t, 25*time.Second, "server notices the silent agent", func() bool { return !r.connected(t) })
	px.heal()
	eventually(t, 15*time.Second, "agent reconnects", func() bool { return r.connected(t) })
	eventually(t, 10*time.Second, "state from the cut reaches the server", func() bool {
		return aws.ToString(r.describe(t, arn).LastStatus) == "RUNNING"
	})
	eventually(t, 5*time.Second, "outbox empties after the ack", func() bool {
		batches, err := db.Batches()
		return err == nil && len(batches) == 0
	})

	// A partition that drops packets without closing anything: both ends
	// must notice the silence on their own.
	px.freeze()
	frozeAt := time.Now()
	eventually(t, 25*time.Second, "server notices the silent agent", func() bool { return !r.connected(t) })
	if waited := time.Since(frozeAt); waited < 10*time.Second {
		t.Fatalf("agent reported gone after %s, before the silence limit", waited)
	}
	px.cut()
	px.heal()
	eventually(t, 20*time.Second, "agent reconnects after the partition", func() bool { return r.connected(t) })
}

func TestAgentCredentialIsConfined(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	_, err := r.agent.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("x")})
	if err == nil {
		t.Fatal("agent credential created a cluster")
	}
	// The same credential cannot register a second instance.
	other := "arn:aws:ecs:us-east-1:123456789012:container-instance/edge/0123456789abcdef0123456789abcdef"
	_, err = r.agent.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String("edge"), ContainerInstanceArn: aws.String(other),
		TotalResources: []types.Resource{{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 512}}})
	if err == nil {
		t.Fatal("agent credential registered a second instance")
	}
	// Re-registering its own instance is idempotent.
	again, err := r.agent.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String("edge"),
		TotalResources: []types.Resource{{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 2048},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 1024}}})
	if err != nil || aws.ToString(again.ContainerInstance.ContainerInstanceArn) != r.instance {
		t.Fatalf("re-register: %v %v", again, err)
	}
}

// fakeServer serves each websocket session by reading the client's hello
// and handing the connection to serve.
func fakeServer(t *testing.T, serve func(ctx context.Context, conn *websocket.Conn)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		conn.Read(r.Context()) // hello
		serve(r.Context(), conn)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// runClient runs a session client against url until the test ends.
func runClient(t *testing.T, url string, db *state.DB, eng *fakeEngine) {
	ctx, cancel := context.WithCancel(context.Background())
	c := session.New(session.Config{Endpoint: url, AccessKeyID: "AK", SecretKey: "s", Region: "us-east-1", InstanceArn: "arn:i",
		Store: db, Engine: eng, MinBackoff: 50 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestMalformedServerMessagesAreIgnored runs the client against a server
// that sends garbage before a valid manifest: the client logs and goes on.
func TestMalformedServerMessagesAreIgnored(t *testing.T) {
	got := make(chan struct{})
	srv := fakeServer(t, func(ctx context.Context, conn *websocket.Conn) {
		for _, junk := range []string{"not json", `{"type":"manifest"}`, `{"type":"surprise"}`, `{"type":"manifest","manifest":{"seq":"x"}}`, `[1,2]`} {
			conn.Write(ctx, websocket.MessageText, []byte(junk))
		}
		m, _ := json.Marshal(protocol.Message{Type: protocol.TypeManifest, Manifest: &protocol.Manifest{Seq: 7, Tasks: []protocol.Task{{Arn: "arn:x", DesiredStatus: "RUNNING"}}}})
		conn.Write(ctx, websocket.MessageText, m)
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var msg protocol.Message
			if json.Unmarshal(b, &msg) == nil && msg.Type == protocol.TypeManifestAck && msg.ManifestAck.Seq == 7 {
				close(got)
				<-ctx.Done()
				return
			}
		}
	})
	eng := newFakeEngine()
	db := openDB(t, t.TempDir())
	runClient(t, srv.URL, db, eng)
	select {
	case <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the valid manifest after the garbage was not acknowledged")
	}
	if _, ok := eng.task("arn:x"); !ok {
		t.Fatal("manifest not handed to the engine")
	}
	if seq, _, _ := db.Manifest(); seq != 7 {
		t.Fatalf("stored manifest seq %d", seq)
	}
}

// TestStatesChangedDuringAWriteGoInOneMessage: the client keeps one state
// message in flight. States a task reaches while the server has not yet
// acknowledged are sent together, each task at its latest state, and once
// acknowledged nothing is sent again.
func TestStatesChangedDuringAWriteGoInOneMessage(t *testing.T) {
	msgs := make(chan protocol.StateChange, 16)
	release := make(chan struct{})
	srv := fakeServer(t, func(ctx context.Context, conn *websocket.Conn) {
		m, _ := json.Marshal(protocol.Message{Type: protocol.TypeManifest, Manifest: &protocol.Manifest{Seq: 1}})
		conn.Write(ctx, websocket.MessageText, m)
		var wmu sync.Mutex
		ack := func(id uint64) {
			b, _ := json.Marshal(protocol.Message{Type: protocol.TypeStateAck, StateAck: &protocol.StateAck{ID: id}})
			wmu.Lock()
			defer wmu.Unlock()
			conn.Write(ctx, websocket.MessageText, b)
		}
		first := true
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var msg protocol.Message
			if json.Unmarshal(b, &msg) != nil || msg.Type != protocol.TypeStateChange {
				continue
			}
			msgs <- *msg.StateChange
			if first { // a slow write: acknowledged when the test says
				first = false
				go func(id uint64) {
					select {
					case <-release:
						ack(id)
					case <-ctx.Done():
					}
				}(msg.StateChange.ID)
				continue
			}
			ack(msg.StateChange.ID)
		}
	})
	eng := newFakeEngine()
	db := openDB(t, t.TempDir())
	runClient(t, srv.URL, db, eng)
	next := func() protocol.StateChange {
		t.Helper()
		select {
		case sc := <-msgs:
			return sc
		case <-time.After(10 * time.Second):
			t.Fatal("no state message")
		}
		return protocol.StateChange{}
	}

	eng.changes <- protocol.TaskState{Arn: "arn:a", LastStatus: "PENDING", Seq: 1}
	if sc := next(); len(sc.Tasks) != 1 || sc.Tasks[0].Seq != 1 {
		t.Fatalf("first message: %+v", sc)
	}
	// While the server writes it, a moves on twice and b appears, each
	// change a batch of its own.
	for _, st := range []protocol.TaskState{{Arn: "arn:a", LastStatus: "ACTIVATING", Seq: 2}, {Arn: "arn:b", LastStatus: "PENDING", Seq: 1},
		{Arn: "arn:a", LastStatus: "RUNNING", Seq: 3}} {
		before, _ := db.LastBatchID()
		eng.changes <- st
		eventually(t, 10*time.Second, "the change persisted", func() bool { last, _ := db.LastBatchID(); return last > before })
	}
	select {
	case sc := <-msgs:
		t.Fatalf("a second message went out before the first was acknowledged: %+v", sc)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	sc := next()
	if len(sc.Tasks) != 2 || sc.Tasks[0].Arn != "arn:a" || sc.Tasks[0].Seq != 3 || sc.Tasks[0].LastStatus != "RUNNING" ||
		sc.Tasks[1].Arn != "arn:b" || sc.Tasks[1].Seq != 1 {
		t.Fatalf("merged message: %+v", sc)
	}
	last, _ := db.LastBatchID()
	if sc.ID != last {
		t.Fatalf("merged message numbered %d, the last batch is %d", sc.ID, last)
	}
	eventually(t, 10*time.Second, "every batch acknowledged", func() bool { bs, _ := db.Batches(); return len(bs) == 0 })
	// With the server keeping up, each state goes out as it happens.
	eng.changes <- protocol.TaskState{Arn: "arn:a", LastStatus: "STOPPED", Seq: 4}
	if sc := next(); len(sc.Tasks) != 1 || sc.Tasks[0].Seq != 4 {
		t.Fatalf("after the acks: %+v", sc)
	}
	select {
	case sc := <-msgs:
		t.Fatalf("an acknowledged state was sent again: %+v", sc)
	case <-time.After(300 * time.Millisecond):
	}
}
