package console

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/store"
)

// livePrefixes are the store's keys a rollout page shows: deployments,
// tasks, instances and the agents' sessions (connected or not).
var livePrefixes = []string{"daemondeployments/", "daemons/", "tasks/", "containerinstances/", "sessions/"}

// hub turns the store's changes under livePrefixes into ticks for the open
// live pages: a page re-renders once per burst of changes, never by polling.
type hub struct {
	mu        sync.Mutex
	listeners map[chan struct{}]struct{}
}

func newHub(ctx context.Context, st *store.Store) *hub {
	h := &hub{listeners: map[chan struct{}]struct{}{}}
	if st == nil {
		return h
	}
	for _, p := range livePrefixes {
		sub := st.Subscribe(p)
		go func() {
			defer sub.Close()
			for {
				select {
				case <-ctx.Done():
					return
				case <-sub.Ready():
					sub.Take()
					h.tick()
				}
			}
		}()
	}
	return h
}

func (h *hub) tick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.listeners {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (h *hub) listen() (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.listeners[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.listeners, ch)
		h.mu.Unlock()
	}
}

// liveDebounce gathers a burst of changes into one render.
const liveDebounce = 300 * time.Millisecond

// daemonLive streams the daemon page's live part as server-sent events:
// an "html" event with the fragment whenever it changed.
func (c *Console) daemonLive(w http.ResponseWriter, r *http.Request, s *session) {
	arn := r.URL.Query().Get("arn")
	if arn == "" {
		http.Error(w, "arn is required", http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	// A stream outlives the server's read timeout.
	rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	ticks, stop := c.live.listen()
	defer stop()
	var last []byte
	send := func() bool {
		c.sessions.mu.Lock()
		_, alive := c.sessions.byID[s.id]
		c.sessions.mu.Unlock()
		if !alive {
			fmt.Fprint(w, "event: end\ndata: signed out\n\n")
			rc.Flush()
			return false
		}
		v, err := c.daemonView(r, s, arn)
		var buf bytes.Buffer
		if err != nil {
			fmt.Fprintf(&buf, `<p class="error">%s</p>`, template.HTMLEscapeString(err.Error()))
		} else if err := c.pages.fragment(&buf, "live", v); err != nil {
			return false
		}
		if bytes.Equal(buf.Bytes(), last) {
			return true
		}
		last = buf.Bytes()
		rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(w, "event: html\n")
		for line := range strings.SplitSeq(buf.String(), "\n") {
			fmt.Fprintf(w, "data: %s\n", line)
		}
		fmt.Fprint(w, "\n")
		return rc.Flush() == nil
	}
	if !send() {
		return
	}
	heartbeat := time.NewTicker(15 * time.Second)
	defer heartbeat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.ctx.Done():
			return
		case <-heartbeat.C:
			rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprint(w, ": keepalive\n\n")
			if rc.Flush() != nil {
				return
			}
		case <-ticks:
			select {
			case <-time.After(liveDebounce):
			case <-r.Context().Done():
				return
			}
			select { // changes during the wait are in this render
			case <-ticks:
			default:
			}
			if !send() {
				return
			}
		}
	}
}
