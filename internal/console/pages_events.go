package console

import (
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// eventFilter is the events tab's query: every given part must match.
type eventFilter struct {
	Type, Source              string
	Daemon, Service, Instance string
	Since, Until              time.Time
	SinceText, UntilText      string
	resources                 []string // ARNs the event must mention
	cluster                   cluster
}

// maxShownEvents bounds the tab's table: the newest are kept.
const maxShownEvents = 500

// timeForms are the accepted times: RFC 3339, or what a datetime-local
// input sends (read as UTC).
var timeForms = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"}

func parseWhen(field, v string) (time.Time, error) {
	for _, f := range timeForms {
		if t, err := time.Parse(f, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, invalid(field, "must be a time as 2026-01-02T15:04 (UTC) or RFC 3339 (got %q)", clip(v))
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// parseEventFilter reads the filter from q for cluster cl.
func parseEventFilter(q url.Values, cl cluster) (*eventFilter, error) {
	f := &eventFilter{Type: q.Get("type"), Source: q.Get("source"), Daemon: q.Get("daemon"), Service: q.Get("service"),
		Instance: q.Get("instance"), SinceText: q.Get("since"), UntilText: q.Get("until"), cluster: cl}
	if f.Type != "" && !slices.Contains(events.DetailTypes, f.Type) {
		return nil, invalid("type", "must be one of %s (got %q)", strings.Join(events.DetailTypes, ", "), clip(f.Type))
	}
	if len(f.Source) > 256 {
		return nil, invalid("source", "must be at most 256 characters")
	}
	// Names become ARNs in the cluster; an ARN is taken as it is.
	base := strings.TrimSuffix(cl.ClusterArn, "cluster/"+cl.ClusterName)
	for _, p := range []struct{ field, v, kind string }{{"daemon", f.Daemon, "daemon/"}, {"service", f.Service, "service/"}, {"instance", f.Instance, "container-instance/"}} {
		if p.v == "" {
			continue
		}
		if len(p.v) > 2048 || strings.ContainsAny(p.v, " \t\n") {
			return nil, invalid(p.field, "must be a name, ID or ARN without spaces, at most 2048 characters")
		}
		arn := p.v
		if !strings.HasPrefix(arn, "arn:") {
			arn = base + p.kind + cl.ClusterName + "/" + p.v
		}
		f.resources = append(f.resources, arn)
	}
	var err error
	if f.SinceText != "" {
		if f.Since, err = parseWhen("since", f.SinceText); err != nil {
			return nil, err
		}
	}
	if f.UntilText != "" {
		if f.Until, err = parseWhen("until", f.UntilText); err != nil {
			return nil, err
		}
		if !f.Since.IsZero() && f.Until.Before(f.Since) {
			return nil, invalid("until", "must not be before since")
		}
	}
	return f, nil
}

// request is ListEvents' filter; the first resource goes to the API, the
// others are matched here.
func (f *eventFilter) request(after string) map[string]any {
	in := map[string]any{"cluster": f.cluster.ClusterArn, "maxResults": 1000}
	if f.Type != "" {
		in["detailType"] = f.Type
	}
	if len(f.resources) > 0 {
		in["resource"] = f.resources[0]
	}
	if after != "" {
		in["after"] = after
	}
	return in
}

func (f *eventFilter) match(ev events.Event) bool {
	if f.Source != "" && ev.Source != f.Source {
		return false
	}
	for _, r := range f.resources {
		if !ev.Mentions(r) {
			return false
		}
	}
	if !f.Since.IsZero() || !f.Until.IsZero() {
		at, err := time.Parse(time.RFC3339, ev.Time)
		if err != nil || !f.Since.IsZero() && at.Before(f.Since) || !f.Until.IsZero() && at.After(f.Until) {
			return false
		}
	}
	return true
}

// filterQuery is the filter's own parameters, each followed by '&'.
func (f *eventFilter) filterQuery() string {
	q := url.Values{}
	for k, v := range map[string]string{"type": f.Type, "source": f.Source, "daemon": f.Daemon, "service": f.Service, "instance": f.Instance, "since": f.SinceText, "until": f.UntilText} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if len(q) == 0 {
		return ""
	}
	return q.Encode() + "&"
}

// query is the filter as URL parameters, for the live stream.
func (f *eventFilter) query() string {
	q := url.Values{"cluster": {f.cluster.ClusterName}}
	for k, v := range map[string]string{"type": f.Type, "source": f.Source, "daemon": f.Daemon, "service": f.Service, "instance": f.Instance, "since": f.SinceText, "until": f.UntilText} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

// eventRow is an event as shown, also sent as JSON to live pages.
type eventRow struct {
	ID        string     `json:"id"`
	Time      string     `json:"time"`
	Type      string     `json:"type"`
	Source    string     `json:"source"`
	Summary   string     `json:"summary"`
	Resources []resource `json:"resources"`
}

type resource struct {
	Name string `json:"name"`
	Href string `json:"href,omitempty"`
}

func rowOf(ev events.Event) eventRow {
	row := eventRow{ID: ev.ID, Time: ev.Time, Type: ev.DetailType, Source: ev.Source, Summary: ev.Summary(), Resources: []resource{}}
	for _, r := range ev.Resources {
		res := resource{Name: lastPart(r), Href: taskLink(r)}
		if strings.Contains(r, ":daemon/") {
			res.Href = Prefix + "daemon?arn=" + urlQuery(r)
		}
		row.Resources = append(row.Resources, res)
	}
	return row
}

// matching pages through the cluster's events after cursor and returns
// those f keeps with an ID below before ("" for no bound; at most the
// newest maxShownEvents) and the cursor after them.
func (c *Console) matching(r *http.Request, s *session, f *eventFilter, after, before string) ([]events.Event, string, error) {
	var kept []events.Event
	for range 1000 {
		var out struct {
			Events []events.Event `json:"events"`
			Cursor string         `json:"cursor"`
		}
		if err := c.call(r, s, "CapstanV1.ListEvents", f.request(after), &out); err != nil {
			return nil, "", err
		}
		past := false
		for _, ev := range out.Events {
			if before != "" && ev.ID >= before {
				past = true
				continue
			}
			if f.match(ev) {
				kept = append(kept, ev)
			}
		}
		if len(kept) > maxShownEvents {
			kept = slices.Delete(kept, 0, len(kept)-maxShownEvents)
		}
		if out.Cursor != "" {
			after = out.Cursor
		}
		if past || len(out.Events) < 1000 {
			break
		}
	}
	return kept, after, nil
}

// eventFloor is an event ID below every ID made at or after t: as a
// listing's cursor, it leaves the events before t unread.
func eventFloor(t time.Time) string { return fleet.EventIDFloor(t) + "-7000-8000-000000000000" }

// newest reads the newest maxShownEvents events f keeps before the event
// before ("" for now): it lists a window back from there, widened until it
// holds enough, instead of the cluster's whole history. more says older
// ones may remain; cursor follows on after the newest (the live feed's).
func (c *Console) newest(r *http.Request, s *session, f *eventFilter, before string) (evs []events.Event, cursor string, more bool, err error) {
	end := c.cfg.Now()
	if before != "" {
		end = fleet.EventIDTime(before)
	}
	for window := 15 * time.Minute; ; window *= 4 {
		after, whole := eventFloor(end.Add(-window)), window > 200*24*time.Hour
		if whole {
			after = ""
		}
		evs, cursor, err = c.matching(r, s, f, after, before)
		if err != nil || len(evs) >= maxShownEvents || whole {
			return evs, cursor, len(evs) >= maxShownEvents, err
		}
	}
}

func (c *Console) eventsTab(w http.ResponseWriter, r *http.Request, s *session) {
	cl, err := c.describeCluster(r, s, r.URL.Query().Get("name"))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	f, err := parseEventFilter(r.URL.Query(), cl)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	before := r.URL.Query().Get("before")
	if before != "" && !fleet.EventIDPattern.MatchString(before) {
		c.fail(w, r, s, invalid("before", "must be an event ID from an older-events link (got %q)", clip(before)))
		return
	}
	evs, cursor, more, err := c.newest(r, s, f, before)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	older := ""
	if more && len(evs) > 0 {
		older = Prefix + "cluster?name=" + url.QueryEscape(cl.ClusterName) + "&tab=events&" + f.filterQuery() + "before=" + url.QueryEscape(evs[0].ID)
	}
	rows := make([]eventRow, 0, len(evs))
	for i := len(evs) - 1; i >= 0; i-- { // newest first
		rows = append(rows, rowOf(evs[i]))
	}
	c.render(w, r, http.StatusOK, "cluster", s, map[string]any{"Cluster": cl, "Tab": "events", "Tabs": tabs,
		"Events": rows, "Filter": f, "Types": events.DetailTypes, "Live": f.UntilText == "" && before == "", "Older": template.URL(older), "Before": before,
		"LiveSrc": template.URL(Prefix + "events/live?" + f.query() + "&after=" + url.QueryEscape(cursor))})
}

// eventsLive streams the events that match the tab's filter, after its
// cursor, as "event" messages: it follows the store's event keys of the
// cluster and lists through the API (as the user) when they change.
func (c *Console) eventsLive(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	cl, err := c.describeCluster(r, s, q.Get("cluster"))
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	f, err := parseEventFilter(q, cl)
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	after := q.Get("after")
	if len(after) > 256 {
		http.Error(w, "after: a cursor is at most 256 characters", http.StatusBadRequest)
		return
	}
	var ready <-chan struct{}
	take := func() {}
	if c.cfg.Store != nil {
		// Subscribed before the first listing: nothing falls in between.
		sub := c.cfg.Store.Subscribe(store.EventPrefix(cl.ClusterName))
		defer sub.Close()
		ready, take = sub.Ready(), func() { sub.Take() }
	}
	// The first listing answers bad input (a bad cursor) with its status.
	evs, next, err := c.matching(r, s, f, after, "")
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	st := startStream(w)
	send := func(evs []events.Event) bool {
		for _, ev := range evs {
			b, _ := json.Marshal(rowOf(ev))
			if !st.send("event", string(b)) {
				return false
			}
		}
		return true
	}
	if !send(evs) || !st.keepalive() {
		return
	}
	after = next
	heartbeat := time.NewTicker(15 * time.Second)
	defer heartbeat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.ctx.Done():
			return
		case <-heartbeat.C:
			if !st.keepalive() {
				return
			}
		case <-ready:
			take()
			if !c.alive(s) {
				st.send("end", "signed out")
				return
			}
			evs, next, err := c.matching(r, s, f, after, "")
			if err != nil {
				st.send("failure", err.Error())
				return
			}
			after = next
			if !send(evs) {
				return
			}
		}
	}
}

func statusOf(err error) int {
	if ae, ok := err.(*apiError); ok {
		if denied(err) {
			return http.StatusForbidden
		}
		return ae.Status
	}
	return http.StatusInternalServerError
}
