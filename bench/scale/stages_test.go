package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/events"
)

func ciEvent(t *testing.T, arn, status string, registered, updated time.Time) events.Event {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"containerInstanceArn": arn, "status": status,
		"registeredAt": registered.UTC().Format("2006-01-02T15:04:05.000Z"), "updatedAt": updated.UTC().Format("2006-01-02T15:04:05.000Z")})
	return events.Event{DetailType: events.ContainerInstanceStateChange, Detail: b}
}

func taskEvent(t *testing.T, arn, group, desired string, created, updated time.Time) events.Event {
	return startedEvent(t, arn, group, desired, created, time.Time{}, updated)
}

func startedEvent(t *testing.T, arn, group, desired string, created, started, updated time.Time) events.Event {
	t.Helper()
	iso := func(v time.Time) string {
		if v.IsZero() {
			return ""
		}
		return v.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	b, _ := json.Marshal(map[string]string{"containerInstanceArn": arn, "group": group, "desiredStatus": desired,
		"createdAt": iso(created), "startedAt": iso(started), "updatedAt": iso(updated)})
	return events.Event{DetailType: events.TaskStateChange, Detail: b}
}

// Each step of a replacement is timed from the events of the two
// instances: the first of each status, the daemon's placement and start,
// its first application task's placement and start, the first
// application task told to stop.
func TestReplacementStages(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	x, r := "arn:ci/x", "arn:ci/r"
	evs := []events.Event{
		ciEvent(t, x, "ACTIVE", at(-100), at(-99)),
		ciEvent(t, x, "DRAINING", at(-100), at(0)),
		ciEvent(t, x, "DRAINING", at(-100), at(3)), // a later change keeps the first
		ciEvent(t, r, "REGISTERING", at(1.5), at(1.5)),
		taskEvent(t, r, "daemon:agent", "RUNNING", at(2), at(2.5)),
		startedEvent(t, r, "daemon:agent", "RUNNING", at(2), at(3), at(3.2)),
		ciEvent(t, r, "ACTIVE", at(1.5), at(4)),
		startedEvent(t, r, "service:web", "RUNNING", at(0.5), time.Time{}, at(4.25)), // created unplaced
		startedEvent(t, r, "service:web", "RUNNING", at(0.5), at(4.5), at(4.5)),
		taskEvent(t, x, "service:web", "RUNNING", at(-90), at(-80)),
		taskEvent(t, x, "service:web", "STOPPED", at(-90), at(5)),
		taskEvent(t, x, "service:web", "STOPPED", at(-90), at(5.5)),
		ciEvent(t, x, "INACTIVE", at(-100), at(6)),
	}
	times := eventTimes(evs)
	times[r].connected = at(1.75) // from R's session record
	stages := stagesOf([]replacementPair{{x: *times[x], r: *times[r], launched: at(1)}})
	want := map[string]float64{stageLaunched: 1, stageRegistered: 0.5, stageConnected: 0.25, stageConnStart: 1.25, stagePlaced: 0.5, stageActive: 2, stageStarted: 1, stageSteady: 1, stageTasksMoved: 1, stageAppPlaced: 0.25, stageAppStarted: 0.25, stageAppMoved: 0.5, stageGone: 1, stageTotal: 6}
	if len(stages) != len(want) {
		t.Fatalf("stages %+v", stages)
	}
	for _, s := range stages {
		if s.N != 1 || s.P50 != want[s.Name] || s.Max != want[s.Name] {
			t.Errorf("%s: %+v, want %.1f s", s.Name, s, want[s.Name])
		}
	}
}
