package session_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/agent/session"
	"github.com/capstanhq/capstan/internal/protocol"
)

// TestFailoverToAnotherServer: given several endpoints, the client skips
// one that refuses, and when its server dies with a report unacknowledged
// it opens a session on the next server, which sees the stored manifest's
// seq and the last stored batch in the hello and gets the report
// again; the engine keeps its tasks throughout.
func TestFailoverToAnotherServer(t *testing.T) {
	// A refused endpoint: a port nobody listens on any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()

	type seen struct {
		hello  protocol.Hello
		states []protocol.StateChange
	}
	var mu sync.Mutex
	got := map[string]*seen{}
	task := protocol.Task{Arn: "arn:t", DesiredStatus: "RUNNING"}
	reported := make(chan struct{})
	serve := func(name string, ack bool) func(ctx context.Context, conn *websocket.Conn, hello protocol.Hello) {
		return func(ctx context.Context, conn *websocket.Conn, hello protocol.Hello) {
			mu.Lock()
			s := &seen{hello: hello}
			got[name] = s
			mu.Unlock()
			m, _ := json.Marshal(protocol.Message{Type: protocol.TypeManifest, Manifest: &protocol.Manifest{Seq: 3, Tasks: []protocol.Task{task}}})
			conn.Write(ctx, websocket.MessageText, m)
			for {
				_, b, err := conn.Read(ctx)
				if err != nil {
					return
				}
				var msg protocol.Message
				if json.Unmarshal(b, &msg) != nil || msg.Type != protocol.TypeStateChange {
					continue
				}
				mu.Lock()
				s.states = append(s.states, *msg.StateChange)
				mu.Unlock()
				if !ack {
					close(reported)
					return // the server dies with the report unacknowledged
				}
				a, _ := json.Marshal(protocol.Message{Type: protocol.TypeStateAck, StateAck: &protocol.StateAck{ID: msg.StateChange.ID}})
				conn.Write(ctx, websocket.MessageText, a)
			}
		}
	}
	a := helloServer(t, serve("a", false))
	b := helloServer(t, serve("b", true))

	eng := newFakeEngine()
	db := openDB(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	c := session.New(session.Config{Endpoints: []string{dead, a.URL, b.URL}, AccessKeyID: "AK", SecretKey: "s", Region: "us-east-1",
		InstanceArn: "arn:i", Store: db, Engine: eng, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Minute})
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	eventually(t, 10*time.Second, "the manifest from the second endpoint", func() bool { _, ok := eng.task(task.Arn); return ok })
	eng.changes <- protocol.TaskState{Arn: task.Arn, LastStatus: "RUNNING", Seq: 1}
	select {
	case <-reported:
	case <-time.After(10 * time.Second):
		t.Fatal("the report did not reach the first live server")
	}
	a.Close() // and it refuses from now on
	// A minute's back-off would fail this: the next server is tried at once.
	eventually(t, 10*time.Second, "the report acknowledged by the third endpoint", func() bool {
		bs, err := db.Batches()
		return err == nil && len(bs) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	first, second := got["a"], got["b"]
	if second == nil {
		t.Fatal("no session on the third endpoint")
	}
	if second.hello.ManifestSeq != 3 || len(first.states) != 1 || second.hello.StateID != first.states[0].ID {
		t.Errorf("hello on failover: manifest seq %d, state id %d; want 3 and the report's batch %+v", second.hello.ManifestSeq, second.hello.StateID, first.states)
	}
	if len(first.states) != 1 || len(second.states) == 0 || second.states[0].ID != first.states[0].ID ||
		len(second.states[0].Tasks) != 1 || second.states[0].Tasks[0].LastStatus != "RUNNING" || second.states[0].Tasks[0].Arn != task.Arn {
		t.Errorf("the unacknowledged report was not sent again as it was: first server %+v, second %+v", first.states, second.states)
	}
	if _, ok := eng.task(task.Arn); !ok {
		t.Error("the engine lost its task across the failover")
	}
}

// helloServer serves each websocket session by reading the client's hello
// and handing it and the connection to serve.
func helloServer(t *testing.T, serve func(ctx context.Context, conn *websocket.Conn, hello protocol.Hello)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		_, b, err := conn.Read(r.Context())
		var m protocol.Message
		if err != nil || json.Unmarshal(b, &m) != nil || m.Hello == nil {
			return
		}
		serve(r.Context(), conn, *m.Hello)
	}))
	t.Cleanup(srv.Close)
	return srv
}
