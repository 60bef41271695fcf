package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
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

// liveDebounce gathers a burst of changes into one render on a page
// rendered for its session alone.
const liveDebounce = 300 * time.Millisecond

// daemonLive streams the daemon page's live part as server-sent events:
// an "html" event with the whole part, then "patch" events with the parts
// and cells that changed. Sessions the shared checks allow follow the
// daemon's shared render; any other renders for itself through the API.
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
	cluster, name, ok := daemonOf(arn)
	if c.cfg.Fleet != nil && ok && c.sharedDenied(r, s, arn, cluster, nil) == "" {
		c.sharedLive(w, rc, r, s, arn, cluster, name)
		return
	}
	c.ownLive(w, rc, r, s, arn, cluster, name)
}

// sendEvent writes one server-sent event; id, when not 0, is the render
// it comes from.
func sendEvent(w http.ResponseWriter, rc *http.ResponseController, event string, id int64, data []byte) bool {
	rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	var buf bytes.Buffer
	buf.Grow(len(data) + 64)
	fmt.Fprintf(&buf, "event: %s\n", event)
	if id != 0 {
		fmt.Fprintf(&buf, "id: %d\n", id)
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		buf.WriteString("data: ")
		buf.Write(line)
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
	if _, err := w.Write(buf.Bytes()); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// signedIn reports whether the session still exists; when it does not,
// the stream is told so.
func (c *Console) signedIn(w http.ResponseWriter, rc *http.ResponseController, s *session) bool {
	c.sessions.mu.Lock()
	_, alive := c.sessions.byID[s.id]
	c.sessions.mu.Unlock()
	if !alive {
		sendEvent(w, rc, "end", 0, []byte("signed out"))
	}
	return alive
}

// ownLive is the page rendered for this session alone, through the API
// as it: for sessions the shared checks refuse something, so each call
// is authorized as it always is.
func (c *Console) ownLive(w http.ResponseWriter, rc *http.ResponseController, r *http.Request, s *session, arn, cluster, name string) {
	ticks, stop := c.live.listen(cluster, name)
	defer stop()
	var last []byte
	send := func() bool {
		if !c.signedIn(w, rc, s) {
			return false
		}
		v, err := c.daemonView(r, s, arn)
		var buf bytes.Buffer
		if err != nil {
			fmt.Fprintf(&buf, `<p class="error">%s</p>`, template.HTMLEscapeString(err.Error()))
		} else {
			p, err := c.liveParts(v)
			if err != nil {
				return false
			}
			buf.Write(p.frame())
		}
		if bytes.Equal(buf.Bytes(), last) {
			return true
		}
		last = buf.Bytes()
		return sendEvent(w, rc, "html", 0, last)
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
			if !keepalive(w, rc) {
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

func keepalive(w http.ResponseWriter, rc *http.ResponseController) bool {
	rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(w, ": keepalive\n\n")
	return rc.Flush() == nil
}

// sharedLive follows the daemon's shared render: each of its snapshots is
// checked against this session's policies, given this session's stop
// form, and sent whole or as the patch from the snapshot sent before.
func (c *Console) sharedLive(w http.ResponseWriter, rc *http.ResponseController, r *http.Request, s *session, arn, cluster, name string) {
	sub := &liveSub{r: r, s: s, ch: make(chan struct{}, 1)}
	v := c.joinView(arn, cluster, name, sub)
	defer c.leaveView(v, sub)
	var sent int64 // seq of the snapshot the page shows; 0: none
	var stopShown []byte
	heartbeat := time.NewTicker(15 * time.Second)
	defer heartbeat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.ctx.Done():
			return
		case <-heartbeat.C:
			if !keepalive(w, rc) {
				return
			}
		case <-sub.ch:
			snap := v.current()
			if snap == nil || snap.seq == sent {
				continue
			}
			if !c.signedIn(w, rc, s) {
				return
			}
			if why := c.sharedDenied(r, s, arn, cluster, snap.revs); why != "" {
				// Policies changed since the page opened: nothing more of
				// the shared render reaches it.
				if sent != -1 && !sendEvent(w, rc, "html", 0, []byte(`<p class="error">`+template.HTMLEscapeString(why)+`</p>`)) {
					return
				}
				sent = -1
				continue
			}
			stop, err := c.stopForm(r, s, snap)
			if err != nil {
				return
			}
			var ok bool
			if sent > 0 && snap.prev == sent && !snap.full {
				ok = sendEvent(w, rc, "patch", snap.seq, snap.patch(stop, !bytes.Equal(stop, stopShown)))
			} else {
				ok = sendEvent(w, rc, "html", snap.seq, snap.frame(stop))
			}
			if !ok {
				return
			}
			sent, stopShown = snap.seq, stop
		}
	}
}

// sharedDenied is why the session may not follow the daemon's shared
// render ("" when it may): every call the page is made of, asked of the
// API's authorizer, as the page's own calls would be. revs are the
// revisions the render names (nil before there is one).
func (c *Console) sharedDenied(r *http.Request, s *session, arn, cluster string, revs []string) string {
	daemon, _ := json.Marshal(map[string]string{"daemonArn": arn})
	for _, op := range []string{"DescribeDaemon", "ListDaemonDeployments", "DescribeDaemonRollout"} {
		if why := c.allowed(r, s, op, json.RawMessage(daemon)); why != "" {
			return why
		}
	}
	if len(revs) > 0 {
		req, _ := json.Marshal(map[string]any{"daemonRevisionArns": revs})
		if why := c.allowed(r, s, "DescribeDaemonRevisions", json.RawMessage(req)); why != "" {
			return why
		}
	}
	return c.cellsDenied(r, s, cluster)
}

// stopForm is the session's stop form for the snapshot's rollout.
func (c *Console) stopForm(r *http.Request, s *session, snap *liveSnap) ([]byte, error) {
	if snap.view == nil || snap.view.Rollout == nil {
		return nil, nil
	}
	v := *snap.view
	v.CSRF, v.StopDenied = s.csrf, c.stopDenied(r, s, &v)
	var buf bytes.Buffer
	err := c.pages.fragment(&buf, "live-stop", &v)
	return buf.Bytes(), err
}

// liveSub is one open page following a shared render.
type liveSub struct {
	r  *http.Request
	s  *session
	ch chan struct{} // ticked when a new snapshot is out
}

func (l *liveSub) tick() {
	select {
	case l.ch <- struct{}{}:
	default:
	}
}

// liveView is the shared render of one daemon's live part: rendered once
// per burst of changes (with a subscriber's session, which the API
// authorizes), and handed to every open page of the daemon.
type liveView struct {
	c                  *Console
	arn, cluster, name string
	wake               chan struct{}
	done               chan struct{} // closed when the last page leaves
	mu                 sync.Mutex
	subs               map[*liveSub]struct{}
	snap               *liveSnap
}

// liveMinGap is the least time between two renders of a view: the first
// change after a quiet spell is rendered at once, a burst at most this
// often.
const liveMinGap = 300 * time.Millisecond

func (c *Console) joinView(arn, cluster, name string, sub *liveSub) *liveView {
	c.viewsMu.Lock()
	defer c.viewsMu.Unlock()
	v := c.views[arn]
	if v == nil {
		v = &liveView{c: c, arn: arn, cluster: cluster, name: name, wake: make(chan struct{}, 1), done: make(chan struct{}), subs: map[*liveSub]struct{}{}}
		c.views[arn] = v
		go v.run()
	}
	v.mu.Lock()
	v.subs[sub] = struct{}{}
	if v.snap != nil {
		sub.tick()
	} else {
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}
	v.mu.Unlock()
	return v
}

func (c *Console) leaveView(v *liveView, sub *liveSub) {
	c.viewsMu.Lock()
	defer c.viewsMu.Unlock()
	v.mu.Lock()
	delete(v.subs, sub)
	last := len(v.subs) == 0
	v.mu.Unlock()
	if last {
		delete(c.views, v.arn)
		close(v.done)
	}
}

func (v *liveView) current() *liveSnap {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.snap
}

func (v *liveView) run() {
	ticks, stop := v.c.live.listen(v.cluster, v.name)
	defer stop()
	var last time.Time
	for {
		select {
		case <-ticks:
		case <-v.wake:
		case <-v.done:
			return
		case <-v.c.ctx.Done():
			return
		}
		if wait := time.Until(last.Add(liveMinGap)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-v.done:
				t.Stop()
				return
			}
		}
		select { // changes until now are in this render
		case <-ticks:
		default:
		}
		last = time.Now()
		if !v.render() {
			// The subscriber rendering went away mid-render: again with another.
			select {
			case v.wake <- struct{}{}:
			default:
			}
		}
	}
}

// render makes a snapshot with an open page's session and hands it out;
// false when it must be tried again.
func (v *liveView) render() bool {
	v.mu.Lock()
	var by *liveSub
	for sub := range v.subs {
		if sub.r.Context().Err() == nil {
			by = sub
			break
		}
	}
	prev := v.snap
	v.mu.Unlock()
	if by == nil {
		return true // every page is closing
	}
	c := v.c
	seq := c.renders.Add(1)
	snap := &liveSnap{seq: seq}
	dv, err := c.daemonView(by.r, by.s, v.arn)
	if err != nil {
		if by.r.Context().Err() != nil {
			return false
		}
		snap.full = true
		snap.head = []byte(`<p class="error">` + template.HTMLEscapeString(err.Error()) + `</p>`)
	} else {
		dv.CSRF, dv.StopDenied, dv.StopSlot = "", "", stopMarker
		p, err := c.livePartsAfter(dv, prev)
		if err != nil {
			c.cfg.Log.Error("console live render", "daemon", v.arn, "err", err)
			return true
		}
		snap.liveParts, snap.view = *p, dv
		for arn := range dv.RevLabel {
			snap.revs = append(snap.revs, arn)
		}
		slices.Sort(snap.revs)
	}
	if prev != nil && !snap.diff(prev) {
		return true // nothing shown changed
	}
	v.mu.Lock()
	v.snap = snap
	for sub := range v.subs {
		sub.tick()
	}
	v.mu.Unlock()
	return true
}

// stopMarker stands in a shared render where each session's stop form
// goes; the templates escape '<' in anything the API returns, so no value
// can forge it.
const stopMarker template.HTML = "<!--capstan:stop-->"

// liveParts are the live part of the daemon page, rendered apart so that
// a change sends only what changed.
type liveParts struct {
	head, legend, deps []byte
	ids                []string
	cells              [][]byte
	vals               []cell // what each cell shows
}

func (c *Console) liveParts(v *daemonView) (*liveParts, error) { return c.livePartsAfter(v, nil) }

// livePartsAfter renders v's parts, taking each cell that shows what it
// did in prev from there: in a rollout most cells stay as they were.
func (c *Console) livePartsAfter(v *daemonView, prev *liveSnap) (*liveParts, error) {
	p := &liveParts{ids: make([]string, len(v.Cells)), cells: make([][]byte, len(v.Cells)), vals: v.Cells}
	var was map[string]int
	if prev != nil {
		was = make(map[string]int, len(prev.ids))
		for i, id := range prev.ids {
			was[id] = i
		}
	}
	var buf bytes.Buffer
	for _, part := range []struct {
		name string
		out  *[]byte
	}{{"live-head", &p.head}, {"live-legend", &p.legend}, {"live-deps", &p.deps}} {
		buf.Reset()
		if err := c.pages.fragment(&buf, part.name, v); err != nil {
			return nil, err
		}
		*part.out = bytes.Clone(buf.Bytes())
	}
	for i := range v.Cells {
		if j, ok := was[v.Cells[i].ID]; ok && prev.vals[j] == v.Cells[i] {
			p.ids[i], p.cells[i] = v.Cells[i].ID, prev.cells[j]
			continue
		}
		buf.Reset()
		if err := c.pages.fragment(&buf, "cell", &v.Cells[i]); err != nil {
			return nil, err
		}
		p.ids[i], p.cells[i] = v.Cells[i].ID, bytes.Clone(buf.Bytes())
	}
	return p, nil
}

// frame is the whole live part (the daemon page holds it in #live).
func (p *liveParts) frame() []byte {
	n := len(p.head) + len(p.legend) + len(p.deps) + 300
	for _, c := range p.cells {
		n += len(c)
	}
	b := make([]byte, 0, n)
	b = append(b, `<div id="live-head">`...)
	b = append(b, p.head...)
	b = append(b, "</div>\n<section aria-labelledby=\"cells-h\">\n<h2 id=\"cells-h\">Instances</h2>\n<div id=\"live-legend\">"...)
	b = append(b, p.legend...)
	b = append(b, "</div>\n<ol class=\"cells\" id=\"cells\" aria-label=\"One cell per instance\">\n"...)
	for _, c := range p.cells {
		b = append(b, c...)
	}
	b = append(b, "</ol>\n</section>\n<div id=\"live-deps\">"...)
	b = append(b, p.deps...)
	return append(b, "</div>"...)
}

// liveSnap is one render of a view and what changed from the one before.
type liveSnap struct {
	seq, prev int64 // this render's number; the one it is a patch from
	liveParts
	view *daemonView // read only once out
	revs []string    // the revision ARNs it names
	// full: only a whole frame describes the change (the instances
	// changed, or the render failed); else the parts changed and the
	// indexes of the cells that did.
	full                                    bool
	headChanged, legendChanged, depsChanged bool
	changed                                 []int
	restOnce                                sync.Once
	rest                                    []byte // the patch but its head
}

// diff notes what changed from prev; false when nothing did.
func (s *liveSnap) diff(prev *liveSnap) bool {
	s.prev = prev.seq
	if s.view == nil && prev.view == nil {
		s.full = true
		return !bytes.Equal(s.head, prev.head)
	}
	if s.full || prev.full || !slices.Equal(s.ids, prev.ids) {
		s.full = true
		return true
	}
	s.headChanged = !bytes.Equal(s.head, prev.head)
	s.legendChanged = !bytes.Equal(s.legend, prev.legend)
	s.depsChanged = !bytes.Equal(s.deps, prev.deps)
	for i := range s.cells {
		if !bytes.Equal(s.cells[i], prev.cells[i]) {
			s.changed = append(s.changed, i)
		}
	}
	return s.headChanged || s.legendChanged || s.depsChanged || len(s.changed) > 0
}

// frame is the whole live part with a session's stop form.
func (s *liveSnap) frame(stop []byte) []byte {
	p := s.liveParts
	p.head = bytes.Replace(p.head, []byte(stopMarker), stop, 1)
	if s.view == nil {
		return p.head // the render's error alone
	}
	return p.frame()
}

// patch is the change from the snapshot before as JSON: the parts that
// changed (head also when the session's stop form did) and the changed
// cells as [instance ID, HTML] pairs.
func (s *liveSnap) patch(stop []byte, stopChanged bool) []byte {
	// All but the head is the same for every page: encoded once.
	s.restOnce.Do(func() {
		var p struct {
			Legend *string     `json:"legend,omitempty"`
			Deps   *string     `json:"deps,omitempty"`
			Cells  [][2]string `json:"cells,omitempty"`
		}
		str := func(b []byte) *string { x := string(b); return &x }
		if s.legendChanged {
			p.Legend = str(s.legend)
		}
		if s.depsChanged {
			p.Deps = str(s.deps)
		}
		for _, i := range s.changed {
			p.Cells = append(p.Cells, [2]string{s.ids[i], string(s.cells[i])})
		}
		s.rest = encodeJSON(p)
	})
	if !s.headChanged && !stopChanged {
		return s.rest
	}
	head := encodeJSON(string(bytes.Replace(s.head, []byte(stopMarker), stop, 1)))
	b := make([]byte, 0, len(head)+len(s.rest)+10)
	b = append(append(append(b, `{"head":`...), head...), ',')
	if len(s.rest) > 2 {
		return append(b, s.rest[1:]...)
	}
	return append(b[:len(b)-1], '}')
}

// encodeJSON is v as JSON, '<' and '&' left as they are: an event's data
// is never read as part of a page.
func encodeJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
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
