package link

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/protocol"
)

// pair dials a websocket server whose end runs peer; the dialling end is
// returned wrapped in a Link with the given timing.
func pair(t testing.TB, silence, heartbeat, writeMax time.Duration, peer func(ctx context.Context, c *websocket.Conn)) (*Link, context.CancelFunc) {
	t.Helper()
	return pairWith(t, silence, heartbeat, writeMax, Options{}, peer)
}

// pairWith is pair for a link with opts.
func pairWith(t testing.TB, silence, heartbeat, writeMax time.Duration, opts Options, peer func(ctx context.Context, c *websocket.Conn)) (*Link, context.CancelFunc) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		peer(r.Context(), c)
	}))
	t.Cleanup(srv.Close)
	conn, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	ctx, cancel := context.WithCancel(context.Background())
	l := newLink(ctx, conn, "peer", silence, heartbeat, writeMax, opts)
	t.Cleanup(l.Close)
	t.Cleanup(cancel)
	return l, cancel
}

func idle(ctx context.Context, _ *websocket.Conn) { <-ctx.Done() }

func TestSilenceEndsTheRead(t *testing.T) {
	l, _ := pair(t, 300*time.Millisecond, time.Hour, time.Second, idle)
	start := time.Now()
	_, err := l.Read()
	if !errors.Is(err, ErrSilent) {
		t.Fatalf("read from a silent peer: %v, want ErrSilent", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("silence noticed after %s, limit 300ms", d)
	}
	if !strings.Contains(err.Error(), "peer silent for 300ms") {
		t.Fatalf("error %q does not name the peer and the limit", err)
	}
}

// The tests of what keeps a link alive space messages a twentieth of the
// limit apart, for three limits: a scheduling stall would have to last
// most of a second to make a gap look like silence or idleness.
const (
	limit = time.Second
	gap   = limit / 20
	busy  = 3 * int(limit/gap)
)

func TestMessagesKeepTheLinkAlive(t *testing.T) {
	l, _ := pair(t, limit, time.Hour, time.Second, func(ctx context.Context, c *websocket.Conn) {
		for i := 0; i < busy; i++ {
			if c.Write(ctx, websocket.MessageText, []byte("m")) != nil {
				return
			}
			time.Sleep(gap)
		}
		<-ctx.Done()
	})
	for i := 0; i < busy; i++ {
		b, err := l.Read()
		if err != nil {
			t.Fatalf("message %d over a link kept busy: %v", i, err)
		}
		if string(b) != "m" {
			t.Fatalf("message %d: %q", i, b)
		}
	}
	// Three silence limits have passed; then silence ends it.
	if _, err := l.Read(); !errors.Is(err, ErrSilent) {
		t.Fatalf("after the peer went quiet: %v, want ErrSilent", err)
	}
}

func TestHeartbeatOnlyWhenIdle(t *testing.T) {
	got := make(chan string, busy)
	l, _ := pair(t, time.Hour, limit, time.Second, func(ctx context.Context, c *websocket.Conn) {
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			got <- string(b)
		}
	})
	// Writing every gap for three intervals: no heartbeat is due.
	var last time.Time
	for i := 0; i < busy; i++ {
		select {
		case <-l.Heartbeat():
			t.Fatalf("heartbeat due after %d writes %s apart, interval %s", i, gap, limit)
		default:
		}
		last = time.Now()
		if err := l.Write([]byte("m")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(gap)
	}
	select {
	case <-l.Heartbeat():
		// Never early: the last write pushed it a whole interval back.
		if d := time.Since(last); d < limit {
			t.Fatalf("heartbeat %s after the last write, interval %s", d, limit)
		}
	case <-time.After(10 * limit):
		t.Fatal("no heartbeat once idle")
	}
	for i := 0; i < busy; i++ {
		if m := <-got; m != "m" {
			t.Fatalf("peer got %q", m)
		}
	}
}

// A link given Options.Beat calls it where another's Heartbeat fires:
// not while writes keep coming, and again an interval after each beat's
// heartbeat is written.
func TestBeatOnlyWhenIdle(t *testing.T) {
	beats := make(chan time.Time, 100)
	var l *Link
	ready := make(chan struct{})
	l, _ = pairWith(t, time.Hour, limit, time.Second, Options{Beat: func() {
		<-ready
		beats <- time.Now()
		l.SendHeartbeat(time.Now())
	}}, func(ctx context.Context, c *websocket.Conn) {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
		}
	})
	close(ready)
	if l.Heartbeat() != nil {
		t.Fatal("a beating link's Heartbeat channel is not nil")
	}
	for i := 0; i < busy; i++ {
		if err := l.Write([]byte("m")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(gap)
	}
	select {
	case at := <-beats:
		t.Fatalf("beat at %s while writes came %s apart, interval %s", at, gap, limit)
	default:
	}
	var last time.Time
	for i := 0; i < 3; i++ {
		select {
		case at := <-beats:
			if i > 0 && at.Sub(last) < limit {
				t.Fatalf("beat %d came %s after the last heartbeat, interval %s", i, at.Sub(last), limit)
			}
			last = at
		case <-time.After(10 * limit):
			t.Fatalf("no beat %d once idle", i)
		}
	}
}

func TestContextEndClosesTheLink(t *testing.T) {
	l, cancel := pair(t, time.Hour, time.Hour, time.Second, idle)
	errs := make(chan error, 1)
	go func() { _, err := l.Read(); errs <- err }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-errs:
		if err == nil || errors.Is(err, ErrSilent) {
			t.Fatalf("read after the context ended: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read still blocked after the context ended")
	}
}

func TestBlockedWriteGivesUp(t *testing.T) {
	// The peer reads nothing: the socket buffers fill and a write blocks.
	l, _ := pair(t, time.Hour, time.Hour, 300*time.Millisecond, idle)
	msg := make([]byte, 1<<20)
	var err error
	start := time.Now()
	for i := 0; i < 512 && err == nil; i++ {
		err = l.Write(msg)
	}
	if err == nil || !strings.Contains(err.Error(), "write to peer blocked for 300ms") {
		t.Fatalf("writes to a peer that reads nothing: %v (after %s)", err, time.Since(start))
	}
}

// A hand-built heartbeat must read back as the message json.Marshal
// makes, byte for byte, whatever the clock's zone and precision.
func TestHeartbeatEncodesAsMarshal(t *testing.T) {
	got := make(chan []byte, 8)
	l, _ := pair(t, time.Hour, time.Hour, time.Second, func(ctx context.Context, c *websocket.Conn) {
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			got <- b
		}
	})
	zone := time.FixedZone("", -(3*3600 + 30*60))
	for _, at := range []time.Time{
		time.Date(2026, 12, 4, 3, 4, 5, 123456789, time.UTC),
		time.Date(2026, 12, 4, 3, 4, 5, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 120000000, zone),
		time.Now(), // with a monotonic reading, which the encoding drops
	} {
		if err := l.SendHeartbeat(at); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{Time: at}})
		if err != nil {
			t.Fatal(err)
		}
		if b := <-got; string(b) != string(want) {
			t.Errorf("heartbeat at %v sent as %s, json.Marshal makes %s", at, b, want)
		}
	}
}
