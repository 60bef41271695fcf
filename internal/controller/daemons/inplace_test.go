package daemons

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// An instance drained for an in-place change (a rollout, or auto-repair of
// a machine that joined): app tasks leave first, then the daemon is
// replaced, then the instance is activated; it is never deregistered.
func TestPlanInPlace(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	old := Daemon{Name: "m", Critical: true, RevisionArn: "r2", Wanted: true, Placed: true, PlacedRev: "r2", TaskRev: "r1",
		TaskID: "t", TaskLast: "RUNNING", TaskDesired: "RUNNING", TaskStartedAt: now.Add(-time.Minute)}
	with := func(f func(*Daemon)) Daemon { d := old; f(&d); return d }
	newRunning := with(func(d *Daemon) { d.TaskRev, d.TaskID = "r2", "t2" })
	cases := []struct {
		name string
		in   Input
		want []string
	}{
		{"app tasks still there: the old daemon keeps running", Input{Status: "DRAINING", InPlace: true, Now: now, OtherLiveTasks: 2, LiveDaemonTasks: 1, Daemons: []Daemon{old}}, nil},
		{"standalone tasks are stopped (they cannot move)", Input{Status: "DRAINING", InPlace: true, Now: now, OtherLiveTasks: 1, Standalone: []string{"s"}, LiveDaemonTasks: 1, Daemons: []Daemon{old}},
			[]string{"stop:"}},
		{"apps gone: the old daemon task stops", Input{Status: "DRAINING", InPlace: true, Now: now, LiveDaemonTasks: 1, Daemons: []Daemon{old}}, []string{"stop:m"}},
		{"old stopped: the target starts, nothing deregisters", Input{Status: "DRAINING", InPlace: true, Now: now, Daemons: []Daemon{with(func(d *Daemon) { d.TaskLast = "STOPPED" })}},
			[]string{"start:m"}},
		{"target just started: wait, not active yet", Input{Status: "DRAINING", InPlace: true, Now: now, LiveDaemonTasks: 1, Daemons: []Daemon{with(func(d *Daemon) { d.TaskRev, d.TaskStartedAt = "r2", now })}},
			[]string{"wait:m"}},
		{"target running steadily: activate", Input{Status: "DRAINING", InPlace: true, Now: now, LiveDaemonTasks: 1, Daemons: []Daemon{newRunning}}, []string{"activate:"}},
		{"target running but an app task still there: not yet", Input{Status: "DRAINING", InPlace: true, Now: now, OtherLiveTasks: 1, LiveDaemonTasks: 1, Daemons: []Daemon{newRunning}}, nil},
		{"repair: a failed critical daemon restarts after back-off", Input{Status: "DRAINING", InPlace: true, Now: now,
			Daemons: []Daemon{with(func(d *Daemon) { d.TaskRev, d.TaskLast = "r2", "STOPPED" })}}, []string{"failed:m", "wait:m"}},
		{"repair gives up after repeated failures", Input{Status: "DRAINING", InPlace: true, Now: now,
			Daemons: []Daemon{with(func(d *Daemon) { d.TaskRev, d.TaskLast, d.Attempts = "r2", "STOPPED", MaxRepairs-1 })}}, []string{"failed:m", "hold:m"}},
		{"a rollout's in-place target failing again and again: retried after back-off, never held (the breaker judges it)", Input{Status: "DRAINING", InPlace: true, Rollout: true, Now: now,
			Daemons: []Daemon{with(func(d *Daemon) { d.TaskRev, d.TaskLast, d.Attempts = "r2", "STOPPED", MaxRepairs+2 })}}, []string{"failed:m", "wait:m"}},
		{"held: nothing restarts, nothing deregisters", Input{Status: "DRAINING", InPlace: true, Held: true, Now: now,
			Daemons: []Daemon{with(func(d *Daemon) { d.TaskRev, d.TaskLast, d.Attempts = "r2", "STOPPED", MaxRepairs })}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := kinds(Plan(tc.in)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// A joined machine's auto-repair drains it in place; a provisioned one
	// is drained to be replaced.
	stopped := with(func(d *Daemon) { d.TaskRev, d.TaskLast = "r2", "STOPPED" })
	for _, managed := range []bool{false, true} {
		acts := Plan(Input{Status: "ACTIVE", AutoRepair: true, Managed: managed, Now: now, Daemons: []Daemon{stopped}})
		if len(acts) != 2 || acts[1].Kind != Drain {
			t.Fatalf("managed=%v: %+v", managed, acts)
		}
		if inPlace := strings.HasPrefix(acts[1].Reason, "Daemons change in place"); inPlace == managed {
			t.Errorf("managed=%v: drain reason %q", managed, acts[1].Reason)
		}
	}
	acts := Plan(Input{Status: "DRAINING", InPlace: true, Now: now, Daemons: []Daemon{with(func(d *Daemon) { d.TaskRev, d.TaskLast, d.Attempts = "r2", "STOPPED", MaxRepairs-1 })}})
	if !strings.HasPrefix(acts[1].Reason, RepairFailed) || !strings.Contains(acts[1].Reason, "until an operator activates it") {
		t.Errorf("hold reason %q", acts[1].Reason)
	}
}
