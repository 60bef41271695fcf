// Package coverage reads a cluster's recorded events (CapstanV1.ListEvents)
// back into per-task and per-instance histories, and measures from them what
// the API's current state cannot show: how long an instance ran application
// tasks without its critical daemons (the coverage gap), how low a service
// dipped during a rollout, how many instances drained at once.
//
// Times are the server's record (a detail's updatedAt) unless said
// otherwise: that is the one clock every event carries. A History is not
// safe for concurrent use.
package coverage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/capstanhq/capstan/internal/events"
)

// Client calls CapstanV1.ListEvents, signed like any SDK request.
type Client struct {
	url   string
	creds aws.Credentials
	hc    *http.Client
}

// NewClient returns a client for the server at endpoint (e.g.
// "http://127.0.0.1:8080"); a nil hc means http.DefaultClient.
func NewClient(endpoint string, creds aws.Credentials, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{url: strings.TrimSuffix(endpoint, "/"), creds: creds, hc: hc}
}

type listEventsInput struct {
	Cluster    string `json:"cluster"`
	After      string `json:"after,omitempty"`
	MaxResults int    `json:"maxResults,omitempty"`
}

type listEventsOutput struct {
	Events []events.Event `json:"events"`
	Cursor string         `json:"cursor"`
}

const eventsPage = 1000

// List returns every event of cluster after the cursor, oldest first, and
// the cursor to continue from.
func (c *Client) List(ctx context.Context, cluster, after string) ([]events.Event, string, error) {
	var all []events.Event
	for {
		in := listEventsInput{Cluster: cluster, After: after, MaxResults: eventsPage}
		var out listEventsOutput
		if err := c.call(ctx, "ListEvents", in, &out); err != nil {
			return all, after, err
		}
		all = append(all, out.Events...)
		after = out.Cursor
		if len(out.Events) < eventsPage {
			return all, after, nil
		}
	}
}

func (c *Client) call(ctx context.Context, op string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "CapstanV1."+op)
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, c.creds, req, hex.EncodeToString(sum[:]), "ecs", "us-east-1", time.Now()); err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CapstanV1.%s: HTTP %d: %s", op, resp.StatusCode, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, out)
}

// A State is one recorded status of a task or an instance. At is when the
// server recorded it (the detail's updatedAt); Agent, for task states, is
// the agent's own time of the change where the detail carries one
// (startedAt for RUNNING, stoppingAt, stoppedAt).
type State struct {
	At     time.Time
	Agent  time.Time
	Status string
	Reason string
	// Version is the record's version the event reports: events of one
	// record are ordered by it, as ECS consumers order them, since two
	// writers' events need not be recorded in the order they committed.
	Version int64
}

// Task is a task's recorded history, states in recorded order.
type Task struct {
	Arn       string
	Instance  string
	Group     string // "service:web", "daemon:guard", "family:x"
	StartedBy string
	States    []State
}

func (t *Task) daemon() (string, bool) { return strings.CutPrefix(t.Group, "daemon:") }

// First is the first recorded state of the task with status.
func (t *Task) First(status string) (State, bool) {
	for _, s := range t.States {
		if s.Status == status {
			return s, true
		}
	}
	return State{}, false
}

// Instance is a container instance's recorded history, states in recorded
// order.
type Instance struct {
	Arn    string
	CP     string // capacity provider name
	States []State
}

// History is what a cluster's events say happened. The tasks and instances
// it hands out are its own: read them, do not change them.
type History struct {
	cursor string
	seen   map[string]bool
	tasks  map[string]*Task
	insts  map[string]*Instance
	// since is when each daemon (by ARN) started to exist: its first
	// deployment's PENDING event is dated when it was created.
	since map[string]time.Time
	// impaired keeps DAEMON_TASK_START_IMPAIRED events.
	impaired []events.ServiceActionDetail
	// raw keeps every event read, in the order read.
	raw []events.Event
}

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{seen: map[string]bool{}, tasks: map[string]*Task{}, insts: map[string]*Instance{}, since: map[string]time.Time{}}
}

// Fetch adds the cluster's events recorded since the last Fetch.
func (h *History) Fetch(ctx context.Context, c *Client, cluster string) error {
	evs, cursor, err := c.List(ctx, cluster, h.cursor)
	if err != nil {
		return err
	}
	h.cursor = cursor
	return h.Add(evs)
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Add folds events into the history. An event seen before is skipped: the
// cursor looks back for events committed late, so listings overlap.
func (h *History) Add(evs []events.Event) error {
	for _, ev := range evs {
		if ev.ID != "" {
			if h.seen[ev.ID] {
				continue
			}
			h.seen[ev.ID] = true
		}
		h.raw = append(h.raw, ev)
		switch ev.DetailType {
		case events.TaskStateChange:
			var d events.TaskDetail
			if err := json.Unmarshal(ev.Detail, &d); err != nil {
				return fmt.Errorf("event %s: %w", ev.ID, err)
			}
			t := h.tasks[d.TaskArn]
			if t == nil {
				t = &Task{Arn: d.TaskArn}
				h.tasks[d.TaskArn] = t
			}
			if d.ContainerInstanceArn != "" {
				t.Instance = d.ContainerInstanceArn
			}
			if d.Group != "" {
				t.Group = d.Group
			}
			if d.StartedBy != "" {
				t.StartedBy = d.StartedBy
			}
			s := State{At: parseTime(d.UpdatedAt), Status: d.LastStatus, Reason: d.StoppedReason, Version: d.Version}
			switch d.LastStatus {
			case "RUNNING":
				s.Agent = parseTime(d.StartedAt)
			case "STOPPING", "DEACTIVATING":
				s.Agent = parseTime(d.StoppingAt)
			case "STOPPED":
				s.Agent = parseTime(d.StoppedAt)
			}
			t.States = insertState(t.States, s)
		case events.ContainerInstanceStateChange:
			var d events.ContainerInstanceDetail
			if err := json.Unmarshal(ev.Detail, &d); err != nil {
				return fmt.Errorf("event %s: %w", ev.ID, err)
			}
			in := h.insts[d.ContainerInstanceArn]
			if in == nil {
				in = &Instance{Arn: d.ContainerInstanceArn}
				h.insts[d.ContainerInstanceArn] = in
			}
			if d.CapacityProviderName != "" {
				in.CP = d.CapacityProviderName
			}
			in.States = insertState(in.States, State{At: parseTime(d.UpdatedAt), Status: d.Status, Reason: d.StatusReason, Version: d.Version})
		case events.DaemonDeploymentStateChange:
			var d events.DeploymentDetail
			if err := json.Unmarshal(ev.Detail, &d); err != nil {
				return fmt.Errorf("event %s: %w", ev.ID, err)
			}
			at := parseTime(d.UpdatedAt)
			if s, ok := h.since[d.DaemonArn]; !at.IsZero() && (!ok || at.Before(s)) {
				h.since[d.DaemonArn] = at
			}
		case events.DaemonServiceAction:
			var d events.ServiceActionDetail
			if err := json.Unmarshal(ev.Detail, &d); err == nil {
				h.impaired = append(h.impaired, d)
			}
		}
	}
	return nil
}

// insertState keeps states in recorded order; an event committed late
// (the cursor returns those too) lands where its time puts it.
func insertState(ss []State, s State) []State {
	i := sort.Search(len(ss), func(i int) bool {
		if ss[i].Version > 0 && s.Version > 0 && ss[i].Version != s.Version {
			return ss[i].Version > s.Version
		}
		return ss[i].At.After(s.At)
	})
	return slices.Insert(ss, i, s)
}

// Events returns every event added, in the order added.
func (h *History) Events() []events.Event { return h.raw }

// Task returns a task's history, nil if no event named it.
func (h *History) Task(arn string) *Task { return h.tasks[arn] }

// Tasks returns every task's history, by ARN.
func (h *History) Tasks() []*Task { return sortedValues(h.tasks) }

// Instance returns a container instance's history, nil if no event named
// it.
func (h *History) Instance(arn string) *Instance { return h.insts[arn] }

// Instances returns every container instance's history, by ARN.
func (h *History) Instances() []*Instance { return sortedValues(h.insts) }

// StartImpaired returns the DAEMON_TASK_START_IMPAIRED events, in the order
// added.
func (h *History) StartImpaired() []events.ServiceActionDetail { return h.impaired }

func sortedValues[T any](m map[string]*T) []*T {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]*T, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// Daemon is a daemon whose coverage is measured.
type Daemon struct {
	Name     string
	Arn      string
	Critical bool
	CPs      []string // capacity provider names
	// Created is when the daemon began; a deployment event of the daemon
	// in the record dates it instead.
	Created time.Time
}

// Options choose how the record is read.
type Options struct {
	// AgentClock dates task changes by the agent's own timestamps where
	// the event carries them, rather than when the server recorded them.
	AgentClock bool
	// InferRepair takes an instance out of service when its critical
	// daemon's STOPPED is recorded, if the instance's record later names
	// auto-repair as its status reason: the server drains it in the same
	// write but records no instance event for that.
	InferRepair bool
}

// Gap is an interval in which an instance in service ran an application
// task while a critical daemon targeting it did not run there.
type Gap struct {
	Instance string    `json:"containerInstanceArn"`
	Missing  []string  `json:"criticalDaemonsNotRunning"`
	Apps     int       `json:"appTasksRunning"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Seconds  float64   `json:"seconds"`
}

// timed is a status from a time on, in the chosen clock.
type timed struct {
	at     time.Time
	status string
}

// timesOf dates a task's states. With the agent clock, a state keeps its
// recorded order: it is moved no later than the state after it, so a
// PENDING recorded after the RUNNING it preceded is not read as a stop.
func timesOf(t *Task, agentClock bool) []timed {
	out := make([]timed, len(t.States))
	for i, s := range t.States {
		at := s.At
		if agentClock && !s.Agent.IsZero() {
			at = s.Agent
		}
		out[i] = timed{at, s.Status}
	}
	for i := len(out) - 2; i >= 0; i-- {
		if out[i+1].at.Before(out[i].at) {
			out[i].at = out[i+1].at
		}
	}
	return out
}

// statusAt is the status in force at t ("" before the first).
func statusAt(ts []timed, t time.Time) string {
	s := ""
	for _, x := range ts {
		if x.at.After(t) {
			break
		}
		s = x.status
	}
	return s
}

// repairAt is when auto-repair took the instance out of service, read from
// the record: the first recorded STOPPED of the critical daemon its status
// reason names (the server drains in that same write). Zero when the record
// names no auto-repair.
func (h *History) repairAt(in *Instance) time.Time {
	name := ""
	for _, s := range in.States {
		if rest, ok := strings.CutPrefix(s.Reason, "auto-repair: critical daemon "); ok {
			name, _, _ = strings.Cut(rest, " ")
		}
	}
	if name == "" {
		return time.Time{}
	}
	var at time.Time
	for _, t := range h.tasks {
		if d, ok := t.daemon(); !ok || d != name || t.Instance != in.Arn {
			continue
		}
		if s, ok := t.First("STOPPED"); ok && (at.IsZero() || s.At.Before(at)) {
			at = s.At
		}
	}
	return at
}

// Gaps reads the record for [from, to): every interval in which an
// instance was in service (REGISTERING or ACTIVE: the server records no
// event when it activates an instance, and an application task running on
// a REGISTERING instance would be a gap too) and ran an application task
// RUNNING, while a critical daemon targeting its capacity provider (since
// the daemon was created) had no task RUNNING on it.
func (h *History) Gaps(daemons []Daemon, from, to time.Time, o Options) []Gap {
	var out []Gap
	arns := make([]string, 0, len(h.insts))
	for arn := range h.insts {
		arns = append(arns, arn)
	}
	sort.Strings(arns)
	for _, arn := range arns {
		in := h.insts[arn]
		status := make([]timed, len(in.States))
		for i, s := range in.States {
			status[i] = timed{s.At, s.Status}
		}
		var repair time.Time
		if o.InferRepair {
			repair = h.repairAt(in)
		}
		var critical []Daemon
		for _, d := range daemons {
			if d.Critical && slices.Contains(d.CPs, in.CP) {
				if s, ok := h.since[d.Arn]; ok {
					d.Created = s
				}
				critical = append(critical, d)
			}
		}
		type line struct {
			daemon string // "" for an application task
			ts     []timed
		}
		var lines []line
		cuts := []time.Time{from, to}
		for _, s := range status {
			cuts = append(cuts, s.at)
		}
		if !repair.IsZero() {
			cuts = append(cuts, repair)
		}
		for _, d := range critical {
			cuts = append(cuts, d.Created)
		}
		for _, t := range h.tasks {
			if t.Instance != arn {
				continue
			}
			d, ok := t.daemon()
			if !ok {
				d = ""
			}
			ts := timesOf(t, o.AgentClock)
			lines = append(lines, line{d, ts})
			for _, x := range ts {
				cuts = append(cuts, x.at)
			}
		}
		sort.Slice(cuts, func(i, j int) bool { return cuts[i].Before(cuts[j]) })
		cur := -1 // index in out of the gap being extended
		for i := 0; i+1 < len(cuts); i++ {
			a, b := cuts[i], cuts[i+1]
			if !b.After(a) || !a.Before(to) || !b.After(from) {
				continue
			}
			a, b = maxTime(a, from), minTime(b, to)
			var missing []string
			apps := 0
			s := statusAt(status, a)
			if (s == "REGISTERING" || s == "ACTIVE") && (repair.IsZero() || a.Before(repair)) {
				running := map[string]bool{}
				for _, l := range lines {
					if statusAt(l.ts, a) != "RUNNING" {
						continue
					}
					if l.daemon == "" {
						apps++
					} else {
						running[l.daemon] = true
					}
				}
				if apps > 0 {
					for _, d := range critical {
						if !a.Before(d.Created) && !running[d.Name] {
							missing = append(missing, d.Name)
						}
					}
				}
			}
			if len(missing) == 0 {
				cur = -1
				continue
			}
			if cur >= 0 && out[cur].To.Equal(a) && slices.Equal(out[cur].Missing, missing) {
				out[cur].To = b
				out[cur].Apps = max(out[cur].Apps, apps)
			} else {
				out = append(out, Gap{Instance: arn, Missing: missing, Apps: apps, From: a, To: b})
				cur = len(out) - 1
			}
		}
	}
	for i := range out {
		out[i].Seconds = out[i].To.Sub(out[i].From).Seconds()
	}
	return out
}

// MinRunning is the smallest number of tasks of group (e.g. "service:web")
// RUNNING at any moment in [from, to), read from the record; 0 when the
// interval is empty. A task counts from its recorded RUNNING until its next
// recorded status: the record lags the agent, but by the same path for
// starts and stops, so a dip the record shows is one the tasks had.
func (h *History) MinRunning(group string, from, to time.Time) int {
	var lines [][]timed
	for _, t := range h.tasks {
		if t.Group == group {
			lines = append(lines, timesOf(t, false))
		}
	}
	return extreme(lines, from, to, func(s string) bool { return s == "RUNNING" }, true)
}

// MaxConcurrent is the largest number of instances of capacity provider cp
// (name) that were at the same moment in one of statuses (e.g. "DRAINING",
// "DEREGISTERING") in [from, to); 0 when the interval is empty.
func (h *History) MaxConcurrent(cp string, statuses []string, from, to time.Time) int {
	var lines [][]timed
	for _, in := range h.insts {
		if in.CP != cp {
			continue
		}
		ts := make([]timed, len(in.States))
		for i, s := range in.States {
			ts[i] = timed{s.At, s.Status}
		}
		lines = append(lines, ts)
	}
	return extreme(lines, from, to, func(s string) bool { return slices.Contains(statuses, s) }, false)
}

// extreme is the lowest (or highest) number of lines whose status
// satisfies in, over every moment of [from, to). The count changes only where some line
// does, so those moments and from are the ones to look at.
func extreme(lines [][]timed, from, to time.Time, in func(string) bool, lowest bool) int {
	if !from.Before(to) {
		return 0
	}
	cuts := []time.Time{from}
	for _, ts := range lines {
		for _, x := range ts {
			if x.at.After(from) && x.at.Before(to) {
				cuts = append(cuts, x.at)
			}
		}
	}
	best := -1
	for _, c := range cuts {
		n := 0
		for _, ts := range lines {
			if in(statusAt(ts, c)) {
				n++
			}
		}
		if best < 0 || lowest && n < best || !lowest && n > best {
			best = n
		}
	}
	return best
}

// TotalSeconds is the gaps' length, in seconds.
func TotalSeconds(gs []Gap) float64 {
	s := 0.0
	for _, g := range gs {
		s += g.Seconds
	}
	return s
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
