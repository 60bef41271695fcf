package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// Stage is how long one step of replacing an instance took, over the
// instances the kept events cover: which step a rolling window waits on.
type Stage struct {
	Name string  `json:"name"`
	N    int     `json:"n"`
	P10  float64 `json:"p10"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	Max  float64 `json:"max"`
}

// Replacement steps, in order. A replaced instance X drains, its
// replacement R is launched, registers, gets its daemon, turns ACTIVE once
// the daemon has run a second; X's application tasks are told to stop
// once their replacements run (on R or another new instance), then X's
// daemon stops and X is deregistered.
const (
	stageLaunched   = "1 X draining → R launched"
	stageRegistered = "2 R launched → registered"
	stageConnected  = "2a R registered → its agent connected"
	stagePlaced     = "3 R registered → daemon placed"
	stageActive     = "4 R daemon placed → ACTIVE"
	stageStarted    = "4a R daemon placed → started"
	stageSteady     = "4b R daemon started → ACTIVE"
	stageConnStart  = "4c R's agent connected → daemon started"
	stageTasksMoved = "5 R ACTIVE → X's tasks told to stop"
	stageAppPlaced  = "5a R ACTIVE → an application task placed on R"
	stageAppStarted = "5b R's application task placed → started"
	stageAppMoved   = "5c R's application task started → X's told to stop"
	stageGone       = "6 X's tasks told to stop → X deregistered"
	stageTotal      = "X draining → X deregistered"
)

// instanceTimes are the moments of one instance the events tell.
type instanceTimes struct {
	registered, draining, active, gone time.Time
	daemonPlaced, tasksStopping        time.Time
	daemonStarted                      time.Time
	appPlaced, appStarted              time.Time // its first application task's
	connected                          time.Time // its agent's session began
}

// replacementStages reads the cluster's events (the newest the event limit
// kept) and the managed instances' records, and times each step of the
// replacements that began after since.
func replacementStages(ctx context.Context, st *store.Store, cluster string, since time.Time) ([]Stage, error) {
	pages, _, err := store.List[eventPage](ctx, st, store.EventPrefix(cluster), "", 0)
	if err != nil {
		return nil, err
	}
	var evs []events.Event
	for _, p := range pages {
		evs = append(evs, p.Value.Events...)
	}
	times := eventTimes(evs)
	ms, _, err := store.List[fleet.ManagedInstance](ctx, st, fleet.ManagedInstancePrefix(cluster), "", 0)
	if err != nil {
		return nil, err
	}
	cis, _, err := store.List[store.ContainerInstance](ctx, st, store.ContainerInstancePrefix(cluster), "", 0)
	if err != nil {
		return nil, err
	}
	arnByKey, arnByID := map[string]string{}, map[string]string{}
	for _, c := range cis {
		arnByKey[c.Value.AccessKeyID] = c.Value.ContainerInstanceArn
		arnByID[c.Value.ID] = c.Value.ContainerInstanceArn
	}
	// The sessions of the instances still registered: the replacements'.
	sessions, _, err := store.List[store.Session](ctx, st, "sessions/"+cluster+"/", "", 0)
	if err != nil {
		return nil, err
	}
	for _, s := range sessions {
		id := s.Key[strings.LastIndex(s.Key, "/")+1:]
		if in := times[arnByID[id]]; in != nil {
			in.connected = s.Value.ConnectedAt
		}
	}
	var pairs []replacementPair
	for _, m := range ms {
		if m.Value.Replaces == "" {
			continue
		}
		x, r := times[arnByID[m.Value.Replaces]], times[arnByKey[m.Value.AccessKeyID]]
		if x == nil || r == nil || x.draining.Before(since) {
			continue
		}
		pairs = append(pairs, replacementPair{x: *x, r: *r, launched: m.Value.LaunchedAt})
	}
	return stagesOf(pairs), nil
}

// eventPage is a stored page of events.
type eventPage struct {
	Events []events.Event `json:"events"`
}

type replacementPair struct {
	x, r     instanceTimes
	launched time.Time
}

func stagesOf(pairs []replacementPair) []Stage {
	d := map[string][]float64{}
	add := func(name string, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			d[name] = append(d[name], to.Sub(from).Seconds())
		}
	}
	for _, p := range pairs {
		add(stageLaunched, p.x.draining, p.launched)
		add(stageRegistered, p.launched, p.r.registered)
		add(stageConnected, p.r.registered, p.r.connected)
		add(stagePlaced, p.r.registered, p.r.daemonPlaced)
		add(stageActive, p.r.daemonPlaced, p.r.active)
		add(stageStarted, p.r.daemonPlaced, p.r.daemonStarted)
		add(stageSteady, p.r.daemonStarted, p.r.active)
		add(stageConnStart, p.r.connected, p.r.daemonStarted)
		add(stageTasksMoved, p.r.active, p.x.tasksStopping)
		add(stageAppPlaced, p.r.active, p.r.appPlaced)
		add(stageAppStarted, p.r.appPlaced, p.r.appStarted)
		add(stageAppMoved, p.r.appStarted, p.x.tasksStopping)
		add(stageGone, p.x.tasksStopping, p.x.gone)
		add(stageTotal, p.x.draining, p.x.gone)
	}
	var out []Stage
	for _, name := range []string{stageLaunched, stageRegistered, stageConnected, stagePlaced, stageActive, stageStarted, stageSteady, stageConnStart, stageTasksMoved, stageAppPlaced, stageAppStarted, stageAppMoved, stageGone, stageTotal} {
		v := d[name]
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		q := func(f float64) float64 { return v[int(f*float64(len(v)-1))] }
		out = append(out, Stage{Name: name, N: len(v), P10: q(0.1), P50: q(0.5), P90: q(0.9), Max: v[len(v)-1]})
	}
	return out
}

// eventTimes gathers, by container instance ARN, the moments its events
// tell: the first of each status, its daemon task's creation and start,
// its first application task's, the first application task told to stop.
func eventTimes(evs []events.Event) map[string]*instanceTimes {
	out := map[string]*instanceTimes{}
	at := func(arn string) *instanceTimes {
		if out[arn] == nil {
			out[arn] = &instanceTimes{}
		}
		return out[arn]
	}
	for _, ev := range evs {
		switch ev.DetailType {
		case events.ContainerInstanceStateChange:
			var d struct {
				Arn          string `json:"containerInstanceArn"`
				Status       string `json:"status"`
				RegisteredAt string `json:"registeredAt"`
				UpdatedAt    string `json:"updatedAt"`
			}
			if json.Unmarshal(ev.Detail, &d) != nil {
				continue
			}
			in, u := at(d.Arn), isoTime(d.UpdatedAt)
			earliest(&in.registered, isoTime(d.RegisteredAt))
			switch d.Status {
			case "DRAINING":
				earliest(&in.draining, u)
			case "ACTIVE":
				earliest(&in.active, u)
			case "DEREGISTERING", "INACTIVE":
				earliest(&in.gone, u)
			}
		case events.TaskStateChange:
			var d struct {
				Arn           string `json:"containerInstanceArn"`
				Group         string `json:"group"`
				DesiredStatus string `json:"desiredStatus"`
				CreatedAt     string `json:"createdAt"`
				StartedAt     string `json:"startedAt"`
				UpdatedAt     string `json:"updatedAt"`
			}
			if json.Unmarshal(ev.Detail, &d) != nil || d.Arn == "" {
				continue
			}
			in := at(d.Arn)
			if fleet.IsDaemonGroup(d.Group) {
				earliest(&in.daemonPlaced, isoTime(d.CreatedAt))
				earliest(&in.daemonStarted, isoTime(d.StartedAt))
			} else {
				// Its first event naming R: a service's replacement is
				// created before R exists, and bound to R once R is ACTIVE.
				earliest(&in.appPlaced, isoTime(d.UpdatedAt))
				earliest(&in.appStarted, isoTime(d.StartedAt))
				if d.DesiredStatus == "STOPPED" {
					earliest(&in.tasksStopping, isoTime(d.UpdatedAt))
				}
			}
		}
	}
	return out
}

func earliest(t *time.Time, v time.Time) {
	if !v.IsZero() && (t.IsZero() || v.Before(*t)) {
		*t = v
	}
}

// isoTime reads an event's timestamp ("" or malformed: zero).
func isoTime(s string) time.Time {
	t, _ := time.Parse("2006-01-02T15:04:05.000Z", s)
	return t
}

func printStages(w io.Writer, stages []Stage) {
	for _, s := range stages {
		fmt.Fprintf(w, "  %s (%d)\tp50 %.2f s\tp10 %.2f / p90 %.2f / max %.2f s\n", s.Name, s.N, s.P50, s.P10, s.P90, s.Max)
	}
}
