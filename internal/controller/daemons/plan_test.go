package daemons

import (
	"slices"
	"testing"
	"time"
)

func kinds(acts []Action) []string {
	var out []string
	for _, a := range acts {
		out = append(out, a.Kind+":"+a.Daemon)
	}
	return out
}

func TestPlan(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	run := Daemon{Name: "m", Critical: true, RevisionArn: "r2", Wanted: true, Placed: true, PlacedRev: "r1", TaskID: "t", TaskLast: "RUNNING", TaskDesired: "RUNNING",
		TaskStartedAt: now.Add(-time.Minute)}
	cases := []struct {
		name string
		in   Input
		want []string
	}{
		{"new instance starts its daemon at the current revision", Input{Status: "REGISTERING", Daemons: []Daemon{{Name: "m", Critical: true, RevisionArn: "r2", Wanted: true}}},
			[]string{"start:m"}},
		{"running critical daemon activates", Input{Status: "REGISTERING", Now: now, Daemons: []Daemon{run}}, []string{"activate:"}},
		{"a daemon just started must run a moment first", Input{Status: "REGISTERING", Now: now, Daemons: []Daemon{func() Daemon { d := run; d.TaskStartedAt = now; return d }()}},
			[]string{"wait:m"}},
		{"pending critical daemon holds registration", Input{Status: "REGISTERING", Daemons: []Daemon{func() Daemon { d := run; d.TaskLast = "PENDING"; return d }()}}, nil},
		{"health check must be HEALTHY", Input{Status: "REGISTERING", Daemons: []Daemon{func() Daemon { d := run; d.HealthCheck, d.TaskHealth = true, "UNKNOWN"; return d }()}}, nil},
		{"non-critical pending daemon does not hold registration", Input{Status: "REGISTERING", Now: now, Daemons: []Daemon{func() Daemon { d := run; d.Critical, d.TaskLast = false, "PENDING"; return d }()}},
			[]string{"activate:"}},
		{"steady instance does nothing", Input{Status: "ACTIVE", Daemons: []Daemon{run}}, nil},
		{"stopped non-critical daemon is restarted at the instance's revision", Input{Status: "ACTIVE", Now: now, Daemons: []Daemon{func() Daemon { d := run; d.Critical, d.TaskLast = false, "STOPPED"; return d }()}},
			[]string{"failed:m", "wait:m"}},
		{"stopped critical daemon repairs the instance", Input{Status: "ACTIVE", AutoRepair: true, Now: now, Daemons: []Daemon{func() Daemon { d := run; d.TaskLast = "STOPPED"; return d }()}},
			[]string{"failed:m", "drain:m"}},
		{"without auto-repair a critical daemon is restarted", Input{Status: "ACTIVE", Now: now, Daemons: []Daemon{func() Daemon { d := run; d.TaskLast = "STOPPED"; return d }()}},
			[]string{"failed:m", "wait:m"}},
		{"back-off over: restart", Input{Status: "ACTIVE", Now: now, Daemons: []Daemon{{Name: "m", Wanted: true, Placed: true, PlacedRev: "r1", Attempts: 1, LastFailure: now.Add(-6 * time.Second)}}},
			[]string{"start:m"}},
		{"unhealthy critical daemon repairs", Input{Status: "ACTIVE", AutoRepair: true, Daemons: []Daemon{func() Daemon { d := run; d.HealthCheck, d.TaskHealth = true, "UNHEALTHY"; return d }()}},
			[]string{"drain:m"}},
		{"draining keeps daemons while apps run", Input{Status: "DRAINING", Managed: true, OtherLiveTasks: 1, LiveDaemonTasks: 1, Daemons: []Daemon{run}}, nil},
		{"draining stops standalone tasks first", Input{Status: "DRAINING", Managed: true, OtherLiveTasks: 1, LiveDaemonTasks: 1, Standalone: []string{"s1"}, Daemons: []Daemon{run}},
			[]string{"stop:"}},
		{"drained apps: daemons stop", Input{Status: "DRAINING", Managed: true, LiveDaemonTasks: 1, Daemons: []Daemon{run}}, []string{"stop:m"}},
		{"all stopped: deregister", Input{Status: "DRAINING", Managed: true, Daemons: []Daemon{func() Daemon { d := run; d.TaskLast = "STOPPED"; return d }()}},
			[]string{"forget:m", "deregister:"}},
		{"joined machine drained by an operator: standalone tasks and daemons stay", Input{Status: "DRAINING", OtherLiveTasks: 1, LiveDaemonTasks: 1, Standalone: []string{"s1"}, Daemons: []Daemon{run}}, nil},
		{"joined machine drained of everything: still registered, daemon kept", Input{Status: "DRAINING", LiveDaemonTasks: 1, Now: now, Daemons: []Daemon{run}}, nil},
		{"joined machine drained: a failed daemon restarts, nothing deregisters", Input{Status: "DRAINING", AutoRepair: true, Now: now, Daemons: []Daemon{func() Daemon { d := run; d.TaskLast = "STOPPED"; return d }()}},
			[]string{"failed:m", "wait:m"}},
		{"daemon no longer wanted stops", Input{Status: "ACTIVE", Daemons: []Daemon{func() Daemon { d := run; d.Wanted = false; return d }()}}, []string{"stop:m"}},
		{"unwanted and stopped is forgotten", Input{Status: "ACTIVE", Daemons: []Daemon{func() Daemon { d := run; d.Wanted, d.TaskLast = false, "STOPPED"; return d }()}}, []string{"forget:m"}},
		{"managed instance keeps a daemon no longer wanted until replaced", Input{Status: "ACTIVE", Managed: true, Daemons: []Daemon{func() Daemon { d := run; d.Wanted = false; return d }()}}, nil},
		{"managed instance gets no daemon added while it serves", Input{Status: "ACTIVE", Managed: true, Daemons: []Daemon{{Name: "m", Critical: true, RevisionArn: "r2", Wanted: true}}}, nil},
		{"managed instance still registering gets it", Input{Status: "REGISTERING", Managed: true, Daemons: []Daemon{{Name: "m", Critical: true, RevisionArn: "r2", Wanted: true}}}, []string{"start:m"}},
		{"managed draining instance stops an unwanted daemon last", Input{Status: "DRAINING", Managed: true, LiveDaemonTasks: 1, Daemons: []Daemon{func() Daemon { d := run; d.Wanted = false; return d }()}}, []string{"stop:m"}},
		{"in-place retarget stops the old revision's task", Input{Status: "ACTIVE", Now: now, Daemons: []Daemon{func() Daemon { d := run; d.TaskRev, d.PlacedRev = "r1", "r2"; return d }()}}, []string{"stop:m"}},
		{"in-place retarget starts the new revision, no failure counted", Input{Status: "ACTIVE", Now: now, Daemons: []Daemon{func() Daemon { d := run; d.TaskRev, d.PlacedRev, d.TaskLast = "r1", "r2", "STOPPED"; return d }()}}, []string{"start:m"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := kinds(Plan(tc.in))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// The instance keeps the revision it started with.
	acts := Plan(Input{Status: "ACTIVE", Now: now, Daemons: []Daemon{{Name: "m", Wanted: true, RevisionArn: "r2", Placed: true, PlacedRev: "r1"}}})
	if len(acts) != 1 || acts[0].Revision != "r1" {
		t.Fatalf("revision: %+v", acts)
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{0: 0, 1: 5 * time.Second, 2: 10 * time.Second, 4: 40 * time.Second, 7: 5 * time.Minute, 50: 5 * time.Minute} {
		if got := Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}
