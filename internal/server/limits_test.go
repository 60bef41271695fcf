package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
)

type acceptAll struct{}

func (acceptAll) Verify(context.Context, *http.Request, []byte) (auth.Principal, error) {
	return auth.Principal{AccessKeyID: "AKIDTEST"}, nil
}

// limitsServer serves, behind the limits: /verified verifies at once and
// then waits for hold to close; /body reads its whole body first.
func limitsServer(t *testing.T, maxConns, maxUnauth int) (*limits, string, chan struct{}) {
	t.Helper()
	lim := newLimits(maxConns, maxUnauth, slog.New(slog.DiscardHandler))
	hold := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/verified", func(w http.ResponseWriter, r *http.Request) {
		api.Marking(acceptAll{}).Verify(r.Context(), r, nil)
		<-hold
		fmt.Fprintln(w, "done")
	})
	mux.HandleFunc("/body", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fmt.Fprintln(w, "read")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: lim.handler(mux), ConnContext: lim.connContext, ConnState: lim.connState, MaxHeaderBytes: maxHeaderBytes}
	go srv.Serve(lim.listener(ln))
	t.Cleanup(func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
		srv.Close()
	})
	return lim, ln.Addr().String(), hold
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A request holds an unauthenticated slot from its first byte until it is
// verified; one that finds the slots taken is answered ThrottlingException
// without its body being read, and the connection closed. Health checks
// pass through. Connections over the cap are closed as accepted.
func TestLimitsBeforeAuthentication(t *testing.T) {
	lim, addr, hold := limitsServer(t, 4, 2)

	// A verified request in flight holds no slot.
	verified := dial(t, addr)
	fmt.Fprintf(verified, "GET /verified HTTP/1.1\r\nHost: x\r\n\r\n")
	waitFor(t, "the verified request to hold nothing", func() bool { return lim.conns.Load() == 1 && lim.unauth.Load() == 0 })

	// The socket shows through the tracker: the agents' sessions park
	// their reads on it once they take the connection over.
	if sc, ok := any(&trackedConn{Conn: verified}).(syscall.Conn); !ok {
		t.Fatal("a tracked connection hides its socket")
	} else if _, err := sc.SyscallConn(); err != nil {
		t.Fatalf("the socket under a tracked connection: %v", err)
	}

	if _, ok := any(&trackedConn{Conn: verified}).(interface{ CloseWrite() error }); !ok {
		t.Fatal("a tracked connection cannot be half-closed")
	}

	// A single byte takes a slot; so does a body still coming.
	partial := dial(t, addr)
	partial.Write([]byte("P"))
	waitFor(t, "one slot taken by a first byte", func() bool { return lim.unauth.Load() == 1 })
	stalled := dial(t, addr)
	fmt.Fprintf(stalled, "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n%s", strings.Repeat("x", 1000))
	waitFor(t, "two slots taken", func() bool { return lim.unauth.Load() == 2 })

	// The third is refused, in ECS's words.
	third := dial(t, addr)
	fmt.Fprintf(third, "POST /body HTTP/1.1\r\nHost: x\r\nX-Amz-Target: AmazonEC2ContainerServiceV20141113.ListClusters\r\nContent-Length: 100000\r\n\r\n{")
	third.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(third), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body) // to its end: the server closes the connection
	var e map[string]string
	json.Unmarshal(body, &e)
	if resp.StatusCode != 400 || resp.Header.Get("X-Amzn-ErrorType") != "ThrottlingException" || e["__type"] != "ThrottlingException" ||
		!strings.Contains(e["message"], "Rate exceeded") || !resp.Close {
		t.Fatalf("over the cap: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if lim.unauthRefused.Load() != 1 || lim.unauth.Load() != 2 {
		t.Fatalf("refused %d, in flight %d", lim.unauthRefused.Load(), lim.unauth.Load())
	}

	// The health check is not refused.
	waitFor(t, "the refused connection to close", func() bool { return lim.conns.Load() == 3 })
	hc := dial(t, addr)
	fmt.Fprintf(hc, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	hc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(hc), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz through the cap: %v %v", resp, err)
	}
	hc.Close()

	// The connection cap: verified, partial, stalled and one more are open;
	// the next is closed before anything is read.
	waitFor(t, "the health connection to close", func() bool { return lim.conns.Load() == 3 })
	dial(t, addr)
	waitFor(t, "four connections", func() bool { return lim.conns.Load() == 4 })
	extra := dial(t, addr)
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a connection over the cap read %d bytes", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection over the cap was left open")
	}
	if lim.connsRefused.Load() != 1 {
		t.Fatalf("connections refused: %d", lim.connsRefused.Load())
	}

	// Closed or ended, requests give their slots back; a kept-alive
	// connection's next request takes one again.
	partial.Close()
	stalled.Close()
	waitFor(t, "the slots to be free", func() bool { return lim.unauth.Load() == 0 && lim.conns.Load() == 2 })
	close(hold)
	r := bufio.NewReader(verified)
	if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("verified request: %v %v", resp, err)
	} else {
		io.ReadAll(resp.Body)
	}
	waitFor(t, "the kept connection idle", func() bool { return lim.unauth.Load() == 0 })
	fmt.Fprintf(verified, "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
	waitFor(t, "the next request on the kept connection to count", func() bool { return lim.unauth.Load() == 1 })
	verified.Write([]byte("cdefghij"))
	if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("second request: %v %v", resp, err)
	}
	waitFor(t, "the answered request to free its slot", func() bool { return lim.unauth.Load() == 0 })
}

func TestLimitsConfig(t *testing.T) {
	base := func() Config { return Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Provisioner: "none"} }
	c := base()
	if err := c.Validate(); err != nil || c.MaxConnections != DefaultMaxConnections() || c.MaxUnauthenticated != DefaultMaxUnauthenticated {
		t.Fatalf("defaults: %v %d %d", err, c.MaxConnections, c.MaxUnauthenticated)
	}
	c = base()
	c.MaxConnections = -1
	if err := c.Validate(); err == nil || err.Error() != "--max-connections must be at least 1, got -1" {
		t.Fatalf("negative connections: %v", err)
	}
	c = base()
	c.MaxUnauthenticated = -5
	if err := c.Validate(); err == nil || err.Error() != "--max-unauthenticated-requests must be at least 1, got -5" {
		t.Fatalf("negative requests: %v", err)
	}
}

// The sim provisioner's in-process agents get no CA bundle: with TLS on
// they would never connect, so the combination is refused at start.
func TestSimProvisionerRefusesTLS(t *testing.T) {
	for _, tc := range []func(*Config){
		func(c *Config) { c.TLSSelfSigned = true },
		func(c *Config) { c.TLSCert, c.TLSKey = "cert.pem", "key.pem" },
	} {
		c := Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Provisioner: "sim"}
		tc(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "--provisioner sim cannot be combined with --tls-cert/--tls-key or --tls-self-signed") {
			t.Fatalf("sim with TLS: %v", err)
		}
	}
}

// Under TLS the limits count the same: the tracker is found under the TLS
// connection, the handshake counts as the request's first bytes, and a
// request over the cap gets its ThrottlingException over TLS.
func TestLimitsUnderTLS(t *testing.T) {
	lim := newLimits(10, 1, slog.New(slog.DiscardHandler))
	hold := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/verified", func(w http.ResponseWriter, r *http.Request) {
		api.Marking(acceptAll{}).Verify(r.Context(), r, nil)
		<-hold
	})
	mux.HandleFunc("/body", func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	ts := httptest.NewUnstartedServer(lim.handler(mux))
	ts.Listener = lim.listener(ts.Listener)
	ts.Config.ConnContext, ts.Config.ConnState = lim.connContext, lim.connState
	ts.StartTLS()
	defer ts.Close()
	defer close(hold)
	client := ts.Client()
	go client.Get(ts.URL + "/verified")
	waitFor(t, "the verified request", func() bool { return lim.conns.Load() == 1 && lim.unauth.Load() == 0 })

	raw, err := tls.Dial("tcp", ts.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	fmt.Fprintf(raw, "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc")
	waitFor(t, "the stalled TLS request to hold the slot", func() bool { return lim.unauth.Load() == 1 })

	resp, err := client.Post(ts.URL+"/body", "application/x-amz-json-1.1", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"__type":"ThrottlingException"`) {
		t.Fatalf("over the cap under TLS: %d %s", resp.StatusCode, body)
	}
	raw.Close()
	waitFor(t, "the slot back", func() bool { return lim.unauth.Load() == 0 })
}

func TestMaxConnectionsFromOpenFileLimit(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{
		{0, 10000},                 // unknown: the fixed default
		{1024, minAutoConnections}, // too low to keep the reserve
		{20000, 20000 - fdReserve},
		{1 << 20, maxAutoConnections},
	} {
		if got := maxConnectionsFor(tc.nofile); got != tc.want {
			t.Errorf("maxConnectionsFor(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
	}
	if n := openFileLimit(); n == 0 || DefaultMaxConnections() != maxConnectionsFor(n) {
		t.Errorf("open-file limit %d, default cap %d", n, DefaultMaxConnections())
	}
}
