// Package session is the agent's side of its session with the control
// plane: it keeps a websocket open (reconnecting with jittered exponential
// back-off), persists each manifest before acknowledging it and hands it to
// the engine, and reports the engine's task states in numbered batches that
// are persisted first and resent until the server acknowledges them.
package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/link"
	"github.com/capstanhq/capstan/internal/protocol"
)

// ErrInstanceInactive ends Run: the server deregistered this instance, so
// the agent must retire it and register anew.
var ErrInstanceInactive = errors.New("session: the container instance was deregistered")

// ErrInstanceRetired ends Run: the server deregistered this managed
// instance, which its capacity provider terminates; registering anew would
// be refused.
var ErrInstanceRetired = errors.New("session: the managed container instance was deregistered and is being retired")

// Store is the durable part of the session.
type Store interface {
	PutManifest(seq uint64, data []byte) error
	Manifest() (uint64, []byte, error)
	AppendBatch(id uint64, data []byte) error
	Batches() ([]state.Batch, error)
	AckThrough(id uint64) error
	LastBatchID() (uint64, error)
}

// Engine runs the tasks.
type Engine interface {
	SetDesired([]protocol.Task)
	Changes() <-chan protocol.TaskState
}

// Config wires a Client.
type Config struct {
	Endpoint string // http(s)://host:port of the server
	// Endpoints, when set, are several servers to fail over between, in
	// order; Endpoint is then ignored.
	Endpoints []string
	// CABundle names the file HTTPClient trusts, for error messages.
	CABundle     string
	AccessKeyID  string
	SecretKey    string
	Region       string
	InstanceArn  string
	AgentVersion string
	Store        Store
	Engine       Engine
	// Logs answers the server's log requests; nil refuses them.
	Logs LogServer
	// Exec runs exec sessions' commands; nil refuses them.
	Exec       ExecServer
	HTTPClient *http.Client
	Log        *slog.Logger
	// BatchDelay, when positive, gathers state changes for this long before
	// persisting a batch; by default a batch holds whatever changes are
	// already waiting, so a lone change goes out at once and bursts still
	// share one write.
	BatchDelay time.Duration
	// MinBackoff and MaxBackoff bound reconnect waits (250ms, and a third
	// of protocol.SilenceLimit: after any outage of the server or its
	// store, an agent is back well before the server counts it lost).
	MinBackoff, MaxBackoff time.Duration
}

// Client maintains the session.
type Client struct {
	cfg     Config
	eps     *endpoints
	batches chan struct{} // a new batch was persisted
	mu      sync.Mutex
	firstAt map[uint64]time.Time // batch id → when its oldest change happened

	Reconnects prometheus.Counter
	AckLatency prometheus.Histogram
	Connected  prometheus.Gauge
}

// New returns a client; Run drives it.
func New(cfg Config) *Client {
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 250 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = protocol.SilenceLimit / 3
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, eps: newEndpoints(cfg.Endpoint, cfg.Endpoints), batches: make(chan struct{}, 1), firstAt: map[uint64]time.Time{},
		Reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_agent_session_reconnects_total", Help: "Sessions opened after the first."}),
		AckLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "capstan_agent_state_change_seconds",
			Help: "Time from a task state change to the server's acknowledgement.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "capstan_agent_session_connected", Help: "1 while the session is open."}),
	}
}

// Collectors returns the session's metrics.
func (c *Client) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.Reconnects, c.AckLatency, c.Connected}
}

// Run restores the last manifest, then keeps the session up until ctx ends.
func (c *Client) Run(ctx context.Context) error {
	if seq, data, err := c.cfg.Store.Manifest(); err != nil {
		return fmt.Errorf("read stored manifest: %w", err)
	} else if data != nil {
		var m protocol.Manifest
		if err := json.Unmarshal(data, &m); err == nil {
			c.cfg.Log.Info("resuming from stored manifest", "seq", seq, "tasks", len(m.Tasks))
			c.cfg.Engine.SetDesired(m.Tasks)
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	cctx, stopCollect := context.WithCancel(ctx)
	defer stopCollect() // before the Wait above: Run may return while ctx lives
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.collect(cctx)
	}()

	backoff := c.cfg.MinBackoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			c.Reconnects.Inc()
		}
		started := time.Now()
		err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrInstanceInactive) || errors.Is(err, ErrInstanceRetired) {
			return err
		}
		if time.Since(started) > 2*c.cfg.MaxBackoff {
			backoff = c.cfg.MinBackoff // a long healthy session resets the back-off
		}
		// Another server not yet tried is tried soon; only a whole round
		// of failures waits the back-off.
		ended := c.eps.current()
		bound := backoff
		if c.eps.next() {
			bound = c.cfg.MinBackoff
		}
		// Full jitter: agents that lost the same server do not return in lockstep.
		wait := time.Duration(rand.Int64N(int64(bound))) + c.cfg.MinBackoff/2
		c.cfg.Log.Warn("session ended; reconnecting", "endpoint", ended, "err", err, "next", c.eps.current(), "in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if bound == backoff {
			backoff = min(backoff*2, c.cfg.MaxBackoff)
		}
	}
}

// collect turns engine changes into persisted batches, whether or not a
// session is open, keeping the latest state per task within a batch.
func (c *Client) collect(ctx context.Context) {
	changes := c.cfg.Engine.Changes()
	var pending []protocol.TaskState
	var oldest time.Time
	var timer <-chan time.Time
	flush := func() {
		if len(pending) == 0 {
			return
		}
		for {
			if err := c.persist(pending, oldest); err != nil {
				c.cfg.Log.Error("persist task states; retrying", "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
					continue
				}
			}
			break
		}
		pending, timer = nil, nil
		select {
		case c.batches <- struct{}{}:
		default:
		}
	}
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case st, ok := <-changes:
			if !ok {
				flush()
				return
			}
			if len(pending) == 0 {
				oldest = time.Now()
				if c.cfg.BatchDelay > 0 {
					timer = time.After(c.cfg.BatchDelay)
				}
			}
			add := func(st protocol.TaskState) {
				for i := range pending {
					if pending[i].Arn == st.Arn {
						pending[i] = st
						return
					}
				}
				pending = append(pending, st)
			}
			add(st)
			if c.cfg.BatchDelay > 0 {
				continue
			}
			// Take what else is already waiting, then write once.
		drain:
			for {
				select {
				case more, ok := <-changes:
					if !ok {
						break drain
					}
					add(more)
				default:
					break drain
				}
			}
			flush()
		case <-timer:
			flush()
		}
	}
}

func (c *Client) persist(states []protocol.TaskState, oldest time.Time) error {
	last, err := c.cfg.Store.LastBatchID()
	if err != nil {
		return err
	}
	id := last + 1
	data, err := json.Marshal(protocol.StateChange{ID: id, Tasks: states})
	if err != nil {
		return err
	}
	if err := c.cfg.Store.AppendBatch(id, data); err != nil {
		return err
	}
	c.mu.Lock()
	c.firstAt[id] = oldest
	c.mu.Unlock()
	return nil
}

// dial opens the websocket with a SigV4-signed upgrade request.
func (c *Client) dial(ctx context.Context) (*websocket.Conn, error) {
	endpoint := c.eps.current()
	u := strings.TrimRight(endpoint, "/") + protocol.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	empty := sha256.Sum256(nil)
	err = v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: c.cfg.AccessKeyID, SecretAccessKey: c.cfg.SecretKey},
		req, hex.EncodeToString(empty[:]), "ecs", c.cfg.Region, time.Now())
	if err != nil {
		return nil, fmt.Errorf("sign session request: %w", err)
	}
	h := http.Header{}
	for _, k := range []string{"Authorization", "X-Amz-Date"} {
		h.Set(k, req.Header.Get(k))
	}
	wsURL := "ws" + strings.TrimPrefix(u, "http")
	conn, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: c.cfg.HTTPClient, HTTPHeader: h})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("open session: %s: %w", resp.Status, err)
		}
		return nil, fmt.Errorf("open session with %s: %w", endpoint, ExplainTLS(err, endpoint, c.cfg.CABundle))
	}
	conn.SetReadLimit(64 << 20)
	return conn, nil
}

func (c *Client) session(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	conn, err := c.dial(dctx)
	cancel()
	if err != nil {
		return err
	}
	defer conn.CloseNow()
	seq, _, err := c.cfg.Store.Manifest()
	if err != nil {
		return err
	}
	acked, err := c.cfg.Store.LastBatchID()
	if err != nil {
		return err
	}
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	l := link.New(sctx, conn, "server")
	defer l.Close()
	if err := l.Send(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{ProtocolVersion: protocol.Version,
		ContainerInstanceArn: c.cfg.InstanceArn, AgentVersion: c.cfg.AgentVersion, ManifestSeq: seq, StateID: acked}}); err != nil {
		return err
	}
	// Connected goes to 1 with the first manifest: the server has accepted
	// the session by then.
	defer c.Connected.Set(0)
	c.eps.opened()
	c.cfg.Log.Info("session open", "endpoint", c.eps.current(), "manifest_seq", seq)

	out := make(chan protocol.Message, 16)
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); errs <- c.writer(sctx, l, out) }()
	a := newAcks()
	go func() { defer wg.Done(); errs <- c.sender(sctx, out, a) }()
	ls := &logStreams{cancel: map[uint64]context.CancelFunc{}}
	es := &execRuns{runs: map[uint64]*execRun{}}
	go func() { defer wg.Done(); errs <- c.reader(sctx, l, out, a, ls, es) }()
	err = <-errs
	scancel()
	conn.Close(websocket.StatusNormalClosure, "")
	wg.Wait()
	ls.wg.Wait()
	es.wg.Wait()
	return err
}

// writer sends queued messages, and heartbeats when it has sent nothing
// else for a while.
func (c *Client) writer(ctx context.Context, l *link.Link, out <-chan protocol.Message) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-out:
			if err := l.Send(m); err != nil {
				return err
			}
		case <-l.Heartbeat():
			if err := l.SendHeartbeat(time.Now()); err != nil {
				return err
			}
		}
	}
}

// resendAfter is how long the sender waits for the server to acknowledge
// the message it has in flight before sending it again on the same
// session. The server answers every message or ends the session (and a new
// session resends them all): this only covers a server that lost one, and
// must be long, or a busy server's slow acks bring it the same reports
// again.
const resendAfter = 30 * time.Second

// acks tells a session's sender how far the server has acknowledged.
type acks struct {
	through atomic.Uint64
	wake    chan struct{}
}

func newAcks() *acks { return &acks{wake: make(chan struct{}, 1)} }

func (a *acks) ack(id uint64) {
	if id > a.through.Load() {
		a.through.Store(id)
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// sender keeps one message of task states in flight: the unacknowledged
// batches merged, each task at its latest state. What changes while the
// server writes a message goes in the next one, so a server that keeps up
// sees every state as it happens and a busy one is sent fewer, newer
// states instead of a queue of stale ones (each a write). Every batch is
// sent again after a reconnect; resending is safe: the server ignores
// states it has already written.
func (c *Client) sender(ctx context.Context, out chan<- protocol.Message, a *acks) error {
	var sent uint64 // the last batch in the message in flight, 0 for none
	var sentAt time.Time
	for {
		if sent != 0 && a.through.Load() >= sent {
			sent = 0
		}
		if sent != 0 && time.Since(sentAt) >= resendAfter {
			sent = 0 // the server may have dropped it
		}
		if sent == 0 {
			batches, err := c.cfg.Store.Batches()
			if err != nil {
				return err
			}
			if sc, ok := c.merge(batches); ok {
				select {
				case out <- protocol.Message{Type: protocol.TypeStateChange, StateChange: &sc}:
					sent, sentAt = sc.ID, time.Now()
				case <-ctx.Done():
					return nil
				}
			}
		}
		wait := resendAfter
		if sent != 0 {
			wait = max(resendAfter-time.Since(sentAt), 0)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.batches:
		case <-a.wake:
		case <-time.After(wait):
		}
	}
}

// merge is the batches as one state change numbered as the last of them,
// holding each task's latest state in the order the tasks first appear.
// An unreadable batch is dropped (it can never be sent).
func (c *Client) merge(batches []state.Batch) (protocol.StateChange, bool) {
	var sc protocol.StateChange
	at := map[string]int{}
	for _, b := range batches {
		var one protocol.StateChange
		if err := json.Unmarshal(b.Data, &one); err != nil {
			c.cfg.Log.Error("dropping unreadable state batch", "id", b.ID, "err", err)
			if sc.ID == 0 {
				c.cfg.Store.AckThrough(b.ID)
				continue
			}
			break // send what comes before it; it is dropped once they are acknowledged
		}
		sc.ID = b.ID
		for _, st := range one.Tasks {
			if i, ok := at[st.Arn]; ok {
				if st.Seq >= sc.Tasks[i].Seq {
					sc.Tasks[i] = st
				}
				continue
			}
			at[st.Arn] = len(sc.Tasks)
			sc.Tasks = append(sc.Tasks, st)
		}
	}
	return sc, sc.ID != 0
}

// reader handles what the server sends.
func (c *Client) reader(ctx context.Context, l *link.Link, out chan<- protocol.Message, a *acks, ls *logStreams, es *execRuns) error {
	for {
		b, err := l.Read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var m protocol.Message
		if err := codec.Unmarshal(b, &m); err != nil {
			c.cfg.Log.Warn("ignoring malformed message from server", "err", err)
			continue
		}
		switch m.Type {
		case protocol.TypeHeartbeat:
		case protocol.TypeManifest:
			if m.Manifest == nil {
				continue
			}
			if err := c.manifest(*m.Manifest); err != nil {
				return err
			}
			c.Connected.Set(1)
			select {
			case out <- protocol.Message{Type: protocol.TypeManifestAck, ManifestAck: &protocol.ManifestAck{Seq: m.Manifest.Seq}}:
			case <-ctx.Done():
				return nil
			}
		case protocol.TypeStateAck:
			if m.StateAck == nil {
				continue
			}
			if err := c.cfg.Store.AckThrough(m.StateAck.ID); err != nil {
				return err
			}
			c.observeAck(m.StateAck.ID)
			a.ack(m.StateAck.ID)
		case protocol.TypeLogRequest:
			if m.LogRequest != nil {
				c.startLogs(ctx, ls, *m.LogRequest, out)
			}
		case protocol.TypeLogCancel:
			if m.LogCancel != nil {
				ls.stop(m.LogCancel.ID)
			}
		case protocol.TypeExecStart:
			if m.ExecStart != nil {
				c.startExec(ctx, es, *m.ExecStart, out)
			}
		case protocol.TypeExecInput:
			if m.ExecInput != nil {
				es.input(*m.ExecInput)
			}
		case protocol.TypeExecResize:
			if m.ExecResize != nil {
				es.resize(*m.ExecResize)
			}
		case protocol.TypeExecAck:
			if m.ExecAck != nil {
				es.ack(*m.ExecAck)
			}
		case protocol.TypeExecCancel:
			if m.ExecCancel != nil {
				es.stop(m.ExecCancel.ID)
			}
		case protocol.TypeError:
			if m.Error != nil {
				c.cfg.Log.Warn("server reported an error", "code", m.Error.Code, "message", m.Error.Message)
				if m.Error.Code == "InstanceInactive" && m.Error.Retired {
					return ErrInstanceRetired
				}
				if m.Error.Code == "InstanceInactive" {
					return ErrInstanceInactive
				}
				if m.Error.Code == "AccessDenied" {
					return fmt.Errorf("%s: %s", m.Error.Code, m.Error.Message)
				}
			}
		default:
			c.cfg.Log.Warn("ignoring unknown message type", "type", m.Type)
		}
	}
}

// manifest persists a manifest, then hands it to the engine; an older one
// than what is stored is ignored (it was superseded).
func (c *Client) manifest(m protocol.Manifest) error {
	stored, _, err := c.cfg.Store.Manifest()
	if err != nil {
		return err
	}
	if m.Seq < stored {
		return nil
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := c.cfg.Store.PutManifest(m.Seq, data); err != nil {
		return fmt.Errorf("persist manifest %d: %w", m.Seq, err)
	}
	c.cfg.Engine.SetDesired(m.Tasks)
	return nil
}

func (c *Client) observeAck(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for bid, at := range c.firstAt {
		if bid <= id {
			c.AckLatency.Observe(time.Since(at).Seconds())
			delete(c.firstAt, bid)
		}
	}
}
