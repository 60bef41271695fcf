package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/capstanhq/capstan/internal/events"
)

// eventsClient calls CapstanV1.ListEvents, signed like any SDK request.
type eventsClient struct {
	url   string
	creds aws.Credentials
	hc    *http.Client
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

// list returns every event of cluster after the cursor, oldest first, and
// the cursor to continue from.
func (c *eventsClient) list(ctx context.Context, cluster, after string) ([]events.Event, string, error) {
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

func (c *eventsClient) call(ctx context.Context, op string, in, out any) error {
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

// A state is one recorded status of a task or an instance. At is when the
// server recorded it (the detail's updatedAt); Agent, for task states, is
// the agent's own time of the change where the detail carries one
// (startedAt for RUNNING, stoppingAt, stoppedAt).
type state struct {
	At     time.Time
	Agent  time.Time
	Status string
	Reason string
}

// taskLine is a task's recorded history.
type taskLine struct {
	Arn      string
	Instance string
	Group    string
	States   []state
}

func (t *taskLine) daemon() (string, bool) { return strings.CutPrefix(t.Group, "daemon:") }

// instLine is a container instance's recorded history.
type instLine struct {
	Arn    string
	CP     string
	States []state
}

// history is what a cluster's events say happened.
type history struct {
	cursor string
	seen   map[string]bool
	tasks  map[string]*taskLine
	insts  map[string]*instLine
	// since is when each daemon (by ARN) started to exist: its first
	// deployment's PENDING event is dated when it was created.
	since map[string]time.Time
	// impaired counts DAEMON_TASK_START_IMPAIRED events.
	impaired []events.ServiceActionDetail
	count    int
	// raw keeps every event read, for -events.
	raw []events.Event
}

func newHistory() *history {
	return &history{seen: map[string]bool{}, tasks: map[string]*taskLine{}, insts: map[string]*instLine{}, since: map[string]time.Time{}}
}

// fetch reads the cluster's events recorded since the last fetch.
func (h *history) fetch(ctx context.Context, c *eventsClient, cluster string) error {
	evs, cursor, err := c.list(ctx, cluster, h.cursor)
	if err != nil {
		return err
	}
	h.cursor = cursor
	return h.add(evs)
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

// add folds events into the history; an event seen before is skipped.
func (h *history) add(evs []events.Event) error {
	for _, ev := range evs {
		if h.seen[ev.ID] {
			continue
		}
		h.seen[ev.ID] = true
		h.count++
		h.raw = append(h.raw, ev)
		switch ev.DetailType {
		case events.TaskStateChange:
			var d events.TaskDetail
			if err := json.Unmarshal(ev.Detail, &d); err != nil {
				return fmt.Errorf("event %s: %w", ev.ID, err)
			}
			t := h.tasks[d.TaskArn]
			if t == nil {
				t = &taskLine{Arn: d.TaskArn, Group: d.Group}
				h.tasks[d.TaskArn] = t
			}
			if d.ContainerInstanceArn != "" {
				t.Instance = d.ContainerInstanceArn
			}
			s := state{At: parseTime(d.UpdatedAt), Status: d.LastStatus, Reason: d.StoppedReason}
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
				in = &instLine{Arn: d.ContainerInstanceArn}
				h.insts[d.ContainerInstanceArn] = in
			}
			if d.CapacityProviderName != "" {
				in.CP = d.CapacityProviderName
			}
			in.States = insertState(in.States, state{At: parseTime(d.UpdatedAt), Status: d.Status, Reason: d.StatusReason})
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
func insertState(ss []state, s state) []state {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].At.After(s.At) })
	return slices.Insert(ss, i, s)
}

// firstStatus is the first recorded time a task reached status.
func (t *taskLine) firstStatus(status string) (state, bool) {
	for _, s := range t.States {
		if s.Status == status {
			return s, true
		}
	}
	return state{}, false
}

// daemonSpec is a daemon as the benchmark created it.
type daemonSpec struct {
	Name     string
	Arn      string
	Critical bool
	CPs      []string // capacity provider names
	Created  time.Time
}

// gapOptions choose how the record is read.
type gapOptions struct {
	// agentClock dates task changes by the agent's own timestamps where
	// the event carries them, rather than when the server recorded them.
	agentClock bool
	// inferRepair takes an instance out of service when its critical
	// daemon's STOPPED is recorded, if the instance's record later names
	// auto-repair as its status reason: the server drains it in the same
	// write but records no instance event for that.
	inferRepair bool
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
func timesOf(t *taskLine, agentClock bool) []timed {
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
func (h *history) repairAt(in *instLine) time.Time {
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
		if s, ok := t.firstStatus("STOPPED"); ok && (at.IsZero() || s.At.Before(at)) {
			at = s.At
		}
	}
	return at
}

// gaps reads the record for [from, to): every interval in which an
// instance was in service (REGISTERING or ACTIVE: the server records no
// event when it activates an instance, and an application task running on
// a REGISTERING instance would be a gap too) and ran an application task
// RUNNING, while a critical daemon targeting its capacity provider (since
// the daemon was created) had no task RUNNING on it.
func (h *history) gaps(daemons []daemonSpec, from, to time.Time, o gapOptions) []Gap {
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
		if o.inferRepair {
			repair = h.repairAt(in)
		}
		var critical []daemonSpec
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
			ts := timesOf(t, o.agentClock)
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

func totalSeconds(gs []Gap) float64 {
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
