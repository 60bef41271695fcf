// Package gateway serves agent sessions: one websocket per instance, over
// which the server pushes the instance's desired tasks and writes back the
// task states the agent reports. A session's key lives while its agent
// talks and this server lives: the session ends (and deletes its key) after
// the agent's silence limit, and the keys carry one lease of the server's,
// which etcd ends if the server dies. No etcd request per heartbeat or per
// session's renewal.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/cpus"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/link"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// Gateway accepts agent sessions.
type Gateway struct {
	svc      *fleet.State
	st       *store.Store
	verifier api.Verifier
	log      *slog.Logger
	server   string
	now      func() time.Time

	mu       sync.Mutex
	sessions map[string]*session // by cluster/instance
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	connected prometheus.Gauge
	states    prometheus.Counter
	// work admits agent messages and manifest builds.
	work *admission

	lmu   sync.Mutex
	lease *serverLease

	logSlots chan struct{} // log requests in progress (logs.go)
}

// serverLease is the lease the server's session keys carry; ctx ends when
// it is lost, and with it every session whose key it carried.
type serverLease struct {
	l   *store.Lease
	ctx context.Context
}

// New returns a gateway; Close ends every session.
func New(svc *fleet.State, st *store.Store, v api.Verifier, serverID string, log *slog.Logger) *Gateway {
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{svc: svc, st: st, verifier: v, log: log, server: serverID, now: time.Now,
		sessions: map[string]*session{}, ctx: ctx, cancel: cancel,
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "capstan_agent_sessions", Help: "Agent sessions connected to this server."}),
		states:    prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_agent_task_states_total", Help: "Task states written from agent reports."}),
		work:      newAdmission(placesInitial*cpus.Cores(), placesLow*cpus.Cores(), placesHigh*cpus.Cores()),
		logSlots:  make(chan struct{}, maxLogRequests),
	}
	g.wg.Go(func() { g.work.adjust(ctx) })
	if st != nil { // nil in tests of the gateway's parts
		g.wg.Go(func() { g.leaveWhenUnreachable(ctx) })
	}
	return g
}

// errUnreachable ends the sessions of a server that cannot reach etcd:
// their agents reconnect to another server of their endpoint list, which
// may, where this one could neither write their task states nor learn
// their desired tasks.
var errUnreachable = errors.New("this server cannot reach the store (etcd); reconnect to another server")

func (g *Gateway) reachable() (bool, string) {
	if g.st == nil {
		return true, ""
	}
	return g.st.Reachable()
}

// leaveWhenUnreachable ends every session each time etcd becomes
// unreachable; ServeHTTP refuses new ones until it is back.
func (g *Gateway) leaveWhenUnreachable(ctx context.Context) {
	for {
		changed := g.st.ReachChanged()
		if ok, why := g.st.Reachable(); !ok {
			g.mu.Lock()
			n := len(g.sessions)
			for _, s := range g.sessions {
				s.end(errUnreachable)
			}
			g.mu.Unlock()
			if n > 0 {
				g.log.Warn("ending agent sessions: etcd unreachable", "sessions", n, "reason", why)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// Collectors returns the gateway's metrics.
func (g *Gateway) Collectors() []prometheus.Collector {
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "capstan_agent_admission_limit", Help: "Agent messages and manifest builds the server admits at once (follows the cores' run queue)."},
		func() float64 { l, _, _ := g.work.state(); return float64(l) })
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "capstan_agent_admission_waiting", Help: "Agent messages and manifest builds waiting for admission."},
		func() float64 { _, _, w := g.work.state(); return float64(w) })
	return []prometheus.Collector{g.connected, g.states, limit, queued}
}

// Close ends all sessions and waits for them.
func (g *Gateway) Close() {
	g.mu.Lock()
	g.cancel()
	g.mu.Unlock()
	g.wg.Wait()
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		g.lease.l.Revoke(ctx)
		cancel()
	}
}

// serverLease returns the lease for session keys, granting and keeping a
// new one when there is none or it was lost.
func (g *Gateway) serverLease(ctx context.Context) (*serverLease, error) {
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.lease != nil && g.lease.ctx.Err() == nil {
		return g.lease, nil
	}
	l, err := g.st.Grant(ctx, protocol.SilenceLimit)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(g.ctx)
	lost, err := l.Keep(lctx)
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		<-lost
		if g.ctx.Err() == nil {
			g.log.Warn("server's session lease lost; ending its sessions")
		}
		cancel()
	}()
	g.lease = &serverLease{l: l, ctx: lctx}
	return g.lease, nil
}

// enter counts a session in, unless the gateway is closing.
func (g *Gateway) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx.Err() != nil {
		return false
	}
	g.wg.Add(1)
	return true
}

type session struct {
	conn     *websocket.Conn
	link     *link.Link // conn's reads and writes once the session is open
	cluster  string
	instance string
	managed  bool // provisioned by a capacity provider
	cancel   context.CancelFunc
	parked   *parkedConn // conn's socket, if its reads park (not TLS)
	outbox               // writes, and the writer's state (writer.go)
	logs     logRequests // log requests in progress (logs.go)
	execs    execStreams // exec streams in progress (exec.go)

	once  sync.Once
	first error // the session's error: the first of its parts' to end it
}

// end ends the session; the first error given is the session's.
func (s *session) end(err error) {
	s.once.Do(func() { s.first = err })
	s.cancel()
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, err := g.verifier.Verify(r.Context(), r, nil)
	if err != nil {
		var ae *auth.Error
		if errors.As(err, &ae) {
			w.Header().Set("X-Amzn-ErrorType", ae.Code)
			http.Error(w, ae.Code+": "+ae.Message, http.StatusForbidden)
			return
		}
		http.Error(w, "could not authenticate", http.StatusInternalServerError)
		return
	}
	if p.Role != auth.RoleAgent {
		http.Error(w, "AccessDeniedException: only agent credentials open sessions", http.StatusForbidden)
		return
	}
	if ok, why := g.reachable(); !ok {
		http.Error(w, "ServerException: "+why, http.StatusServiceUnavailable)
		return
	}
	if !g.enter() {
		http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
		return
	}
	pw := &parkingWriter{ResponseWriter: w}
	conn, err := websocket.Accept(pw, r, nil)
	if err != nil {
		g.wg.Done()
		return
	}
	conn.SetReadLimit(8 << 20)
	// The session goes on in a goroutine of its own and the handler
	// returns: net/http's goroutine would keep the upgrade request and
	// its deep stack for the session's life (~2 KiB of request and a
	// grown stack each, at 5,000 sessions ~15 MiB of live heap).
	go g.session(conn, pw.conn, p)
}

// session runs an accepted connection's session until it ends and closes
// the connection with the reason; parked is conn's socket when its reads
// park without a buffer (nil over TLS).
func (g *Gateway) session(conn *websocket.Conn, parked *parkedConn, p auth.Principal) {
	defer g.wg.Done()
	ctx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	err := g.serve(ctx, conn, parked, p)
	switch {
	case err == nil || errors.Is(err, context.Canceled):
		conn.Close(websocket.StatusGoingAway, "server closing the session")
	case errors.Is(err, errUnreachable):
		conn.Close(websocket.StatusTryAgainLater, err.Error())
	default:
		g.log.Info("agent session ended", "agent", p.AccessKeyID, "err", err)
		conn.Close(websocket.StatusPolicyViolation, truncate(err.Error(), 120))
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// serve opens the session and runs it. The receiving goroutine waits for
// messages for the session's life: it runs from here, not from under
// open's large frame (~2 KiB), so that its stack can shrink between
// messages (receive says how far).
func (g *Gateway) serve(ctx context.Context, conn *websocket.Conn, parked *parkedConn, p auth.Principal) error {
	s, sctx, closeSession, err := g.open(ctx, conn, p)
	if err != nil {
		return err
	}
	s.parked = parked
	defer closeSession()
	s.wmu.Lock() // the link's timer writes under it
	opts := link.Options{Beat: func() { g.heartbeat(s) }}
	if parked != nil {
		opts.Batch = parked.out
	}
	s.link = link.NewWith(sctx, conn, "agent", opts)
	s.wmu.Unlock()
	defer s.link.Close()
	// The session's goroutine receives; what it sends goes from whoever
	// has it to send (writer.go).
	g.startWriting(sctx, s)
	s.end(g.receive(sctx, s))
	s.endLogs()
	s.endExecs()
	g.stopWriting(s)
	return s.first
}

// open reads the agent's hello, checks it and claims the instance's
// session; closeSession undoes what it did once the session has ended.
func (g *Gateway) open(ctx context.Context, conn *websocket.Conn, p auth.Principal) (s *session, sctx context.Context, closeSession func(), err error) {
	hctx, hcancel := context.WithTimeout(ctx, protocol.SilenceLimit)
	msg, err := read(hctx, conn)
	hcancel()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("waiting for hello: %w", err)
	}
	if msg.Type != protocol.TypeHello || msg.Hello == nil {
		return nil, nil, nil, errors.New("the first message must be a hello")
	}
	hello := msg.Hello
	cluster, id, ok := g.svc.ParseInstanceArn(hello.ContainerInstanceArn)
	if !ok {
		return nil, nil, nil, refuse(ctx, conn, "InvalidParameter", "hello.containerInstanceArn is not a container instance ARN")
	}
	if p.InstanceID != id {
		return nil, nil, nil, refuse(ctx, conn, "AccessDenied", "this credential is bound to another container instance")
	}
	ci, err := g.svc.Instance(ctx, cluster, id)
	if err != nil {
		return nil, nil, nil, refuse(ctx, conn, "InstanceNotFound", "container instance is not registered")
	}
	managed := g.svc.Managed(ctx, ci)
	if ci.Status == "INACTIVE" {
		return nil, nil, nil, refuseWith(ctx, conn, inactive(managed))
	}
	sl, err := g.serverLease(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	key := store.SessionKey(cluster, id)
	val := store.Session{Server: g.server, ConnectedAt: g.now()}
	rev, err := g.st.Txn().PutWithLease(key, val, sl.l).Commit(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	sctx, scancel := context.WithCancel(ctx)
	stop := context.AfterFunc(sl.ctx, scancel)
	// The session reads in its own scope: its own writes, and what its
	// subscriptions told of, without waiting for every controller's
	// latest write; a write that conflicts makes it wait for the winner.
	sctx = g.st.InScope(sctx, g.st.NewScope(), true)
	s = &session{conn: conn, cluster: cluster, instance: id, managed: managed, cancel: scancel}
	kept := g.keepKey(sctx, s, sl, key, val, rev)
	g.claim(s)
	g.connected.Inc()
	g.log.Info("agent connected", "instance", hello.ContainerInstanceArn, "agent_version", hello.AgentVersion, "manifest_seq", hello.ManifestSeq)
	return s, sctx, func() {
		g.connected.Dec()
		g.release(s)
		stop()
		scancel()
		// Ended, the session deletes its key unless a newer session (here
		// or on another server) wrote it since.
		g.forget(key, kept.stop(), sl)
	}, nil
}

// forget deletes an ended session's key if it is still the one the session
// wrote, trying for as long as the server's lease would keep it: past
// that, etcd deletes it with the lease.
func (g *Gateway) forget(key string, rev int64, sl *serverLease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(sl.ctx), protocol.SilenceLimit)
	defer cancel()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		_, err := g.st.Txn().Delete(key, rev).Commit(ctx)
		if err == nil || errors.Is(err, store.ErrConflict) || sl.ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			g.log.Warn("could not delete an ended session's key", "key", key, "err", err)
			return
		case <-sl.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// claim makes s the instance's session on this server, ending an older one.
func (g *Gateway) claim(s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := s.cluster + "/" + s.instance
	if old := g.sessions[key]; old != nil {
		old.cancel()
	}
	g.sessions[key] = s
	if ok, _ := g.reachable(); !ok {
		s.end(errUnreachable) // etcd went as the session opened
	}
}

func (g *Gateway) release(s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := s.cluster + "/" + s.instance
	if g.sessions[key] == s {
		delete(g.sessions, key)
	}
}

func refuse(ctx context.Context, conn *websocket.Conn, code, message string) error {
	return refuseWith(ctx, conn, &protocol.Error{Code: code, Message: message})
}

func refuseWith(ctx context.Context, conn *websocket.Conn, e *protocol.Error) error {
	send(ctx, conn, protocol.Message{Type: protocol.TypeError, Error: e})
	return fmt.Errorf("%s: %s", e.Code, e.Message)
}

func read(ctx context.Context, conn *websocket.Conn) (protocol.Message, error) {
	_, b, err := conn.Read(ctx)
	if err != nil {
		return protocol.Message{}, err
	}
	return decode(b)
}

func decode(b []byte) (protocol.Message, error) {
	var m protocol.Message
	if err := codec.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: %v", errMalformed, err)
	}
	return m, nil
}

var errMalformed = errors.New("malformed message")

// send writes before the session is open (its refusals).
func send(ctx context.Context, conn *websocket.Conn, m protocol.Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, link.WriteLimit)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, b)
}

var errDeregistered = errors.New("container instance was deregistered")

// inactive tells an agent its instance was deregistered; a managed
// instance's agent is told it is retired too.
func inactive(managed bool) *protocol.Error {
	if managed {
		return &protocol.Error{Code: "InstanceInactive", Message: "managed container instance was deregistered: its capacity provider terminates it", Retired: true}
	}
	return &protocol.Error{Code: "InstanceInactive", Message: "container instance was deregistered"}
}

// receive handles what the agent sends; any message proves it alive. It
// waits for the next message in parkedConn.await, not deep in the
// websocket library's reader: the collector halves a parked goroutine's
// stack only while it uses under a quarter of it less 800 bytes, and
// waiting in the library (~3 KiB used) kept each session's receiving stack
// at 8 KiB; waiting in await (under 1 KiB) lets it come down to 4.
func (g *Gateway) receive(ctx context.Context, s *session) error {
	for {
		if s.parked != nil {
			s.parked.await()
		}
		buf, err := readPooled(s.link)
		if err != nil {
			// Silence comes back as link.ErrSilent, neither EOF nor a close.
			if errors.Is(err, io.EOF) || websocket.CloseStatus(err) != -1 {
				return nil
			}
			return err
		}
		err = g.handle(ctx, s, buf.Bytes())
		putMessageBuffer(buf)
		if err != nil {
			return err
		}
	}
}

// messageBuffers hold agents' messages while they are handled (nothing
// decoded from one refers to it): a buffer grown afresh for each of
// thousands of sessions' reports was a tenth of the gateway's CPU, most
// of it the collector's.
var messageBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledMessage: a rare large message's buffer is not kept.
const maxPooledMessage = 64 << 10

func putMessageBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledMessage {
		messageBuffers.Put(buf)
	}
}

// readPooled reads the next message into a buffer of messageBuffers.
func readPooled(l *link.Link) (*bytes.Buffer, error) {
	r, err := l.Reader()
	if err != nil {
		return nil, err
	}
	buf := messageBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		putMessageBuffer(buf)
		return nil, err
	}
	return buf, nil
}

// handle acts on one message of the agent's. Only a message that writes
// takes a place in the admission: heartbeats and acks, most of what an
// idle fleet sends, do nothing, and queueing them cost a sixth of the
// receiving side's CPU in a rollout.
func (g *Gateway) handle(ctx context.Context, s *session, b []byte) error {
	m, err := decode(b)
	if err != nil {
		g.log.Warn("malformed agent message", "instance", s.instance, "err", err)
		s.send(protocol.Message{Type: protocol.TypeError, Error: &protocol.Error{Code: "MalformedMessage", Message: truncate(err.Error(), 200)}})
		return nil
	}
	switch m.Type {
	case protocol.TypeHeartbeat, protocol.TypeManifestAck:
	case protocol.TypeLogChunk:
		if m.LogChunk != nil {
			s.routeLog(m.LogChunk.ID, m)
		}
	case protocol.TypeLogEnd:
		if m.LogEnd != nil {
			s.routeLog(m.LogEnd.ID, m)
		}
	case protocol.TypeExecOutput:
		if m.ExecOutput != nil {
			s.routeExec(m.ExecOutput.ID, m)
		}
	case protocol.TypeExecAck:
		if m.ExecAck != nil {
			s.routeExec(m.ExecAck.ID, m)
		}
	case protocol.TypeExecExit:
		if m.ExecExit != nil {
			s.routeExec(m.ExecExit.ID, m)
		}
	case protocol.TypeStateChange:
		if m.StateChange == nil {
			s.send(protocol.Message{Type: protocol.TypeError, Error: &protocol.Error{Code: "MalformedMessage", Message: "stateChange without body"}})
			return nil
		}
		t, err := g.work.enter(ctx)
		if err != nil {
			return err
		}
		err = g.svc.ApplyTaskStates(ctx, s.cluster, s.instance, m.StateChange.Tasks)
		t.done()
		if err != nil {
			return fmt.Errorf("write task states: %w", err)
		}
		g.states.Add(float64(len(m.StateChange.Tasks)))
		return s.send(protocol.Message{Type: protocol.TypeStateAck, StateAck: &protocol.StateAck{ID: m.StateChange.ID}})
	default:
		s.send(protocol.Message{Type: protocol.TypeError, Error: &protocol.Error{Code: "UnknownMessage", Message: "unknown message type " + truncate(m.Type, 40)}})
	}
	return nil
}
