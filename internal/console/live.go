package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/store"
)

// livePrefixes are the store's keys a rollout page shows: deployments,
// tasks, instances and the agents' sessions (connected or not).
var livePrefixes = []string{"daemondeployments/", "daemons/", "tasks/", "containerinstances/", "sessions/"}

// hub turns the store's changes under livePrefixes into ticks for the open
// live pages: a page re-renders once per burst of changes that touch what
// it shows, never by polling. A page follows one daemon: its deployments,
// its tasks, and the instances and agent sessions of its cluster.
type hub struct {
	mu sync.Mutex
	// byCluster: the open pages of each cluster (by its name).
	byCluster map[string]map[*listener]struct{}
}

type listener struct {
	ch              chan struct{}
	cluster, daemon string
}

func newHub(ctx context.Context, st *store.Store) *hub {
	h := &hub{byCluster: map[string]map[*listener]struct{}{}}
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
					changes, resync := sub.Take()
					h.changed(changes, resync)
				}
			}
		}()
	}
	return h
}

// touch is what a change is about: a cluster, and the daemon when it is
// one daemon's (its record, deployments or tasks); "" for any daemon of
// the cluster (instances, sessions, a deleted task).
type touch struct{ cluster, daemon string }

// changed ticks the pages a burst of changes touches; a resync (the store
// lost track) ticks them all.
func (h *hub) changed(changes []store.Change, resync bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if resync {
		for _, ls := range h.byCluster {
			for l := range ls {
				l.tick()
			}
		}
		return
	}
	seen := map[touch]bool{}
	for _, ch := range changes {
		kind, rest, _ := strings.Cut(ch.Key, "/")
		cluster, rest, _ := strings.Cut(rest, "/")
		if len(h.byCluster[cluster]) == 0 {
			continue // nobody looks at this cluster: not even decoded
		}
		t := touch{cluster: cluster}
		switch kind {
		case "daemons", "daemondeployments":
			t.daemon, _, _ = strings.Cut(rest, "/")
		case "tasks":
			if ch.Deleted {
				break
			}
			var g struct {
				Group string `json:"group"`
			}
			if codec.Unmarshal(ch.Value, &g) != nil {
				break
			}
			d, ok := strings.CutPrefix(g.Group, "daemon:")
			if !ok {
				continue // a service's or a standalone task: no rollout page shows it
			}
			t.daemon = d
		}
		if seen[t] {
			continue
		}
		seen[t] = true
		for l := range h.byCluster[cluster] {
			if t.daemon == "" || t.daemon == l.daemon {
				l.tick()
			}
		}
	}
}

func (l *listener) tick() {
	select {
	case l.ch <- struct{}{}:
	default:
	}
}

// listen follows the changes that touch daemon in cluster.
func (h *hub) listen(cluster, daemon string) (chan struct{}, func()) {
	l := &listener{ch: make(chan struct{}, 1), cluster: cluster, daemon: daemon}
	h.mu.Lock()
	if h.byCluster[cluster] == nil {
		h.byCluster[cluster] = map[*listener]struct{}{}
	}
	h.byCluster[cluster][l] = struct{}{}
	h.mu.Unlock()
	return l.ch, func() {
		h.mu.Lock()
		delete(h.byCluster[cluster], l)
		if len(h.byCluster[cluster]) == 0 {
			delete(h.byCluster, cluster)
		}
		h.mu.Unlock()
	}
}

// daemonOf splits a daemon ARN (…:daemon/CLUSTER/NAME) into the names the
// store's keys use; ok is false for anything else, which then follows
// nothing (the page shows the API's error).
func daemonOf(arn string) (cluster, name string, ok bool) {
	_, path, found := strings.Cut(arn, ":daemon/")
	if !found {
		return "", "", false
	}
	cluster, name, found = strings.Cut(path, "/")
	return cluster, name, found && cluster != "" && name != "" && !strings.Contains(name, "/")
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
	cluster, name, _ := daemonOf(arn)
	ticks, stop := c.live.listen(cluster, name)
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

// stopDenied is why the rollout shown cannot be stopped now ("" when it
// can): its status, else the API's authorizer.
func (c *Console) stopDenied(r *http.Request, s *session, v *daemonView) string {
	ro := v.Rollout
	if ro == nil {
		return "the daemon has no deployment"
	}
	if ro.Status != "PENDING" && ro.Status != "IN_PROGRESS" {
		return "the deployment is " + ro.Status + "; only a PENDING or IN_PROGRESS one can be stopped"
	}
	req, _ := json.Marshal(map[string]string{"daemonArn": v.Daemon.DaemonArn, "daemonDeploymentArn": ro.DaemonDeploymentArn})
	return c.allowed(r, s, "StopDaemonDeployment", json.RawMessage(req))
}

// daemonStop stops the daemon's latest deployment: it rolls back.
func (c *Console) daemonStop(w http.ResponseWriter, r *http.Request, s *session) {
	arn, dep := r.PostFormValue("arn"), r.PostFormValue("deployment")
	if arn == "" {
		c.fail(w, r, s, &apiError{Status: 400, Type: "InvalidParameterException", Message: "arn: the daemon ARN is required"})
		return
	}
	in := map[string]any{"daemonArn": arn}
	if dep != "" {
		in["daemonDeploymentArn"] = dep
	}
	if err := c.call(r, s, "CapstanV1.StopDaemonDeployment", in, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"daemon?arn="+urlQuery(arn), http.StatusSeeOther)
}
