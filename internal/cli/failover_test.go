package cli

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/failover"
)

// refusedURL is an address nobody listens on.
func refusedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return "http://" + l.Addr().String()
}

// droppingURL accepts connections and closes them unanswered, as a server
// that dies with a request in hand; it counts the connections.
func droppingURL(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			buf := make([]byte, 1)
			c.Read(buf) // the request has arrived
			c.Close()
		}
	}()
	return "http://" + l.Addr().String(), &n
}

// TestSeveralEndpoints: with several servers, reads and writes skip one
// that refuses connections; a read also skips one that takes the request
// and dies, but a write does not (it may have been applied) and fails.
func TestSeveralEndpoints(t *testing.T) {
	h := newHarness(t)
	live := h.srv.URL
	refused := refusedURL(t)
	dropping, drops := droppingURL(t)

	h.env["CAPSTAN_ENDPOINT"] = refused + "," + live
	h.ok("cluster", "create", "first")
	if out := h.ok("cluster", "list"); !strings.Contains(out, "first") {
		t.Fatalf("cluster list through a refused endpoint first:\n%s", out)
	}

	h.env["CAPSTAN_ENDPOINT"] = dropping + "," + live
	if out := h.ok("cluster", "list"); !strings.Contains(out, "first") {
		t.Fatalf("cluster list through a dropping endpoint first:\n%s", out)
	}
	if drops.Load() == 0 {
		t.Fatal("the read never tried the first endpoint")
	}
	r := h.run("cluster", "create", "second")
	if r.code == 0 {
		t.Fatalf("a write whose server dropped it was sent to another server:\n%s", r.stdout)
	}
	delete(h.env, "CAPSTAN_ENDPOINT")
	h.env["CAPSTAN_ENDPOINT"] = live
	if out := h.ok("cluster", "list"); strings.Contains(out, "second") {
		t.Fatalf("the dropped write reached the live server:\n%s", out)
	}

	// A list with a malformed URL is refused, naming it.
	h.env["CAPSTAN_ENDPOINT"] = live + ",nope"
	h.fails(2, `endpoint "nope": want an http:// or https:// URL`, "cluster", "list")
}

// answeringURL is a server that answers every request with status (and the
// untried mark when untried), as a server cut off from etcd does; it
// counts the requests.
func answeringURL(t *testing.T, untried bool) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if untried {
			w.Header().Set(failover.StoreUnreachableHeader, "true")
		}
		api.WriteUnavailable(w, "cut off")
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// TestEndpointCutOffFromEtcd: a server that refuses a request untried (503
// with the mark) sends reads and writes on to the next server; one that
// fails with a plain server error sends on reads only, since a write may
// have been applied.
func TestEndpointCutOffFromEtcd(t *testing.T) {
	h := newHarness(t)
	live := h.srv.URL
	cut, cutCalls := answeringURL(t, true)
	h.env["CAPSTAN_ENDPOINT"] = cut + "," + live
	h.ok("cluster", "create", "through-cut")
	if out := h.ok("cluster", "list"); !strings.Contains(out, "through-cut") {
		t.Fatalf("cluster list past a cut-off server:\n%s", out)
	}
	if cutCalls.Load() == 0 {
		t.Fatal("the cut-off server was never tried")
	}

	failing, failCalls := answeringURL(t, false)
	h.env["CAPSTAN_ENDPOINT"] = failing + "," + live
	if out := h.ok("cluster", "list"); !strings.Contains(out, "through-cut") {
		t.Fatalf("cluster list past a failing server:\n%s", out)
	}
	before := failCalls.Load()
	if r := h.run("cluster", "create", "not-resent"); r.code == 0 {
		t.Fatalf("a write that failed with a plain server error was sent to another server:\n%s", r.stdout)
	}
	if failCalls.Load() == before {
		t.Fatal("the write never reached the failing server")
	}
	h.env["CAPSTAN_ENDPOINT"] = live
	if out := h.ok("cluster", "list"); strings.Contains(out, "not-resent") {
		t.Fatalf("the failed write reached the live server:\n%s", out)
	}
}
