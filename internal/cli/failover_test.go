package cli

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
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
