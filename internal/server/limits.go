package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/iamapi"
)

// Limits before authentication (docs/security.md): how many connections
// may be open, and how many requests may be in flight before their
// signature is verified. A flood of unsigned or badly signed requests then
// costs the server a bounded amount of memory.
const (
	// fdReserve is what the connection cap leaves of the open-file limit
	// for etcd's files, the server's own and its outgoing connections.
	fdReserve = 1024
	// maxAutoConnections bounds the cap chosen from a very high open-file
	// limit: idle sockets still cost memory.
	maxAutoConnections = 100000
	// minAutoConnections is the cap under an open-file limit too low to
	// leave the reserve; the log says to raise the limit.
	minAutoConnections = 256
	// DefaultMaxUnauthenticated bounds the bodies read before a signature
	// is checked: 128 of at most 512 KiB (the Query API's cap) is 64 MiB.
	DefaultMaxUnauthenticated = 128
	// maxHeaderBytes is the most a request's headers take; signed AWS
	// requests carry a few KiB.
	maxHeaderBytes = 16 << 10
)

// limits counts connections and unauthenticated requests on one listener.
type limits struct {
	maxConns, maxUnauth int64
	conns, unauth       atomic.Int64
	connsRefused        atomic.Int64
	unauthRefused       atomic.Int64
	log                 *slog.Logger
	lastLog             atomic.Int64 // unix nanoseconds of the last refusal logged
}

func newLimits(maxConns, maxUnauth int, log *slog.Logger) *limits {
	nofile := openFileLimit()
	log.Info("API connections capped", "max_connections", maxConns, "open_file_limit", nofile)
	if nofile > 0 && uint64(maxConns)+fdReserve > nofile {
		log.Warn("--max-connections leaves less than 1,024 of the open-file limit for the server's own files; raise the limit (LimitNOFILE, ulimit -n) or lower the cap",
			"max_connections", maxConns, "open_file_limit", nofile)
	}
	return &limits{maxConns: int64(maxConns), maxUnauth: int64(maxUnauth), log: log}
}

// DefaultMaxConnections is the cap on open API connections when none is
// set: the open-file limit less fdReserve, so a fleet the limit allows is
// never refused sessions and the server never runs out of descriptors
// (one connection per instance: 10,000 instances need a limit of ~11,100).
func DefaultMaxConnections() int {
	return maxConnectionsFor(openFileLimit())
}

func maxConnectionsFor(nofile uint64) int {
	switch {
	case nofile == 0: // unknown
		return 10000
	case nofile < fdReserve+minAutoConnections:
		return minAutoConnections
	case nofile-fdReserve > maxAutoConnections:
		return maxAutoConnections
	}
	return int(nofile - fdReserve)
}

// openFileLimit is the soft RLIMIT_NOFILE (Go raises it to the hard limit
// at start), 0 when it cannot be read.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}

// refusedLog logs a refusal at most every 10 s: a flood must not flood the
// log as well.
func (l *limits) refusedLog(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(10*time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn(msg, args...)
}

// listener caps ln's open connections: one over the cap is closed as soon
// as it is accepted, before a byte of it is read (or a TLS handshake made).
func (l *limits) listener(ln net.Listener) net.Listener { return &limitListener{Listener: ln, l: l} }

type limitListener struct {
	net.Listener
	l *limits
}

func (ln *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ln.l.conns.Add(1) > ln.l.maxConns {
			ln.l.conns.Add(-1)
			ln.l.connsRefused.Add(1)
			c.Close()
			ln.l.refusedLog("connection refused: --max-connections reached", "max", ln.l.maxConns, "from", c.RemoteAddr().String())
			continue
		}
		return &trackedConn{Conn: c, l: ln.l}, nil
	}
}

// Request states of a connection.
const (
	idle     = iota // between requests: the next byte read starts one
	counted         // holds an unauthenticated slot
	over            // started while the slots were taken: to be refused
	released        // verified, refused or answered: holds no slot
)

// trackedConn counts its request as unauthenticated from the first byte
// read (TLS handshake included) until the request is verified or answered.
type trackedConn struct {
	net.Conn
	l      *limits
	mu     sync.Mutex
	state  int
	closed bool
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.begin()
	}
	return n, err
}

// begin starts a request on an idle connection, taking a slot if one is
// free.
func (c *trackedConn) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != idle || c.closed {
		return
	}
	if c.l.unauth.Add(1) > c.l.maxUnauth {
		c.l.unauth.Add(-1)
		c.state = over
		return
	}
	c.state = counted
}

// settle frees the slot, if held, and moves to next.
func (c *trackedConn) settle(next int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == counted {
		c.l.unauth.Add(-1)
	}
	c.state = next
}

// refused reports whether the request came over the cap, releasing it.
func (c *trackedConn) refused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != over {
		return false
	}
	c.state = released
	return true
}

func (c *trackedConn) Close() error {
	c.mu.Lock()
	first := !c.closed
	c.closed = true
	c.mu.Unlock()
	if first {
		c.settle(released)
		c.l.conns.Add(-1)
	}
	return c.Conn.Close()
}

// SyscallConn is the socket's, so that code taking the connection over
// (the agents' sessions park their reads on it) sees the socket through
// the tracker.
func (c *trackedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}

// CloseWrite half-closes the socket: net/http does so before it closes a
// connection whose request it did not read, so that the client reads the
// answer rather than a reset.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// tracked is the trackedConn under c (a TLS connection's included).
func tracked(c net.Conn) *trackedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	t, _ := c.(*trackedConn)
	return t
}

type connKey struct{}

// connContext gives a request its connection's tracker (http.Server.ConnContext).
func (l *limits) connContext(ctx context.Context, c net.Conn) context.Context {
	if t := tracked(c); t != nil {
		return context.WithValue(ctx, connKey{}, t)
	}
	return ctx
}

// connState ends a connection's request when the server is done with it
// (http.Server.ConnState).
func (l *limits) connState(c net.Conn, s http.ConnState) {
	t := tracked(c)
	if t == nil {
		return
	}
	switch s {
	case http.StateIdle:
		t.settle(idle)
	case http.StateHijacked, http.StateClosed:
		t.settle(released)
	}
}

// handler refuses the requests that came over the cap, and frees a
// request's slot once its signature is verified, or else when it is
// answered.
func (l *limits) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, _ := r.Context().Value(connKey{}).(*trackedConn)
		if t == nil {
			next.ServeHTTP(w, r)
			return
		}
		t.begin() // a request whose bytes all came with the previous one
		if unsigned(r) {
			t.refused()
			t.settle(released)
			next.ServeHTTP(w, r)
			return
		}
		if t.refused() {
			l.throttle(w, r)
			return
		}
		defer t.settle(released)
		next.ServeHTTP(w, r.WithContext(api.OnVerified(r.Context(), func() { t.settle(released) })))
	})
}

// unsigned are the endpoints that take no signature and read no body:
// they hold no slot, and are served through a flood, to show it.
func unsigned(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/metrics")
}

const throttleMessage = "Rate exceeded: too many requests are waiting for authentication on this server; retry later"

// throttle answers as AWS does when it throttles: ThrottlingException
// (Throttling on the Query API), HTTP 400, so that the SDKs back off and
// retry. The body is not read: the connection is taken over, answered and
// closed, so a stalled body holds nothing.
func (l *limits) throttle(w http.ResponseWriter, r *http.Request) {
	l.unauthRefused.Add(1)
	l.refusedLog("request refused: --max-unauthenticated-requests reached", "max", l.maxUnauth, "from", r.RemoteAddr)
	ctype, code := "application/x-amz-json-1.1", "ThrottlingException"
	b, _ := json.Marshal(map[string]string{"__type": code, "message": throttleMessage})
	if iamapi.Accepts(r) {
		type queryError struct {
			XMLName xml.Name `xml:"ErrorResponse"`
			Type    string   `xml:"Error>Type"`
			Code    string   `xml:"Error>Code"`
			Message string   `xml:"Error>Message"`
		}
		ctype, code = "text/xml", "Throttling"
		b, _ = xml.Marshal(queryError{Type: "Sender", Code: code, Message: throttleMessage})
	}
	if c, buf, err := http.NewResponseController(w).Hijack(); err == nil {
		defer c.Close()
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(buf, "HTTP/1.1 400 Bad Request\r\nContent-Type: %s\r\nX-Amzn-ErrorType: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
			ctype, code, len(b))
		buf.Write(b)
		buf.Flush()
		// As Go's server does: a close with the body unread would send a
		// reset, which may reach the client before the answer does.
		if t := tracked(c); t != nil {
			if tcp, ok := t.Conn.(*net.TCPConn); ok {
				tcp.CloseWrite()
				time.Sleep(500 * time.Millisecond)
			}
		}
		return
	}
	w.Header().Set("Connection", "close")
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(http.StatusBadRequest)
	w.Write(b)
}

var (
	connsDesc         = prometheus.NewDesc("capstan_http_connections", "Connections open on the API listener.", nil, nil)
	connsMaxDesc      = prometheus.NewDesc("capstan_http_connections_max", "The cap on open connections (--max-connections).", nil, nil)
	connsRefusedDesc  = prometheus.NewDesc("capstan_http_connections_refused_total", "Connections closed as accepted because the cap was reached.", nil, nil)
	unauthDesc        = prometheus.NewDesc("capstan_http_unauthenticated_requests", "Requests read in part whose signature is not verified yet.", nil, nil)
	unauthMaxDesc     = prometheus.NewDesc("capstan_http_unauthenticated_requests_max", "The cap on them (--max-unauthenticated-requests).", nil, nil)
	unauthRefusedDesc = prometheus.NewDesc("capstan_http_unauthenticated_refused_total", "Requests refused with ThrottlingException because the cap was reached.", nil, nil)
)

func (l *limits) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connsDesc, connsMaxDesc, connsRefusedDesc, unauthDesc, unauthMaxDesc, unauthRefusedDesc} {
		ch <- d
	}
}

func (l *limits) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(l.conns.Load()))
	ch <- prometheus.MustNewConstMetric(connsMaxDesc, prometheus.GaugeValue, float64(l.maxConns))
	ch <- prometheus.MustNewConstMetric(connsRefusedDesc, prometheus.CounterValue, float64(l.connsRefused.Load()))
	ch <- prometheus.MustNewConstMetric(unauthDesc, prometheus.GaugeValue, float64(l.unauth.Load()))
	ch <- prometheus.MustNewConstMetric(unauthMaxDesc, prometheus.GaugeValue, float64(l.maxUnauth))
	ch <- prometheus.MustNewConstMetric(unauthRefusedDesc, prometheus.CounterValue, float64(l.unauthRefused.Load()))
}
