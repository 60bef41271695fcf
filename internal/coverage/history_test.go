package coverage

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestGaps(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	st := func(s float64, status string) State { return State{At: at(s), Status: status} }
	const inst = "arn:inst/1"
	guard := Daemon{Name: "guard", Arn: "arn:daemon/guard", Critical: true, CPs: []string{"cp"}, Created: at(-100)}
	logs := Daemon{Name: "logs", Arn: "arn:daemon/logs", Critical: true, CPs: []string{"cp"}, Created: at(20)}
	other := Daemon{Name: "other", Arn: "arn:daemon/other", Critical: true, CPs: []string{"elsewhere"}, Created: at(-100)}
	type task struct {
		group  string
		states []State
	}
	cases := []struct {
		name     string
		inst     []State
		tasks    []task
		daemons  []Daemon
		to       float64
		opts     Options
		want     float64
		wantGaps int
	}{
		{"daemon first, then the app", []State{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []State{st(1, "PENDING"), st(2, "RUNNING")}}, {"service:web", []State{st(2.5, "PENDING"), st(3, "RUNNING")}}},
			[]Daemon{guard, other}, 60, Options{InferRepair: true}, 0, 0},
		{"app before its daemon", []State{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []State{st(2, "RUNNING")}}, {"service:web", []State{st(1, "RUNNING")}}},
			[]Daemon{guard}, 60, Options{InferRepair: true}, 1, 1},
		{"auto-repair, inferred from the record", []State{st(0, "REGISTERING"), {At: at(30), Status: "INACTIVE", Reason: "auto-repair: critical daemon guard stopped: Essential container in task exited"}},
			[]task{{"daemon:guard", []State{st(1, "RUNNING"), {At: at(10), Agent: at(9.5), Status: "STOPPED"}}}, {"service:web", []State{st(2, "RUNNING"), st(25, "STOPPED")}}},
			[]Daemon{guard}, 60, Options{InferRepair: true}, 0, 0},
		{"auto-repair read naively", []State{st(0, "REGISTERING"), {At: at(30), Status: "INACTIVE", Reason: "auto-repair: critical daemon guard stopped: x"}},
			[]task{{"daemon:guard", []State{st(1, "RUNNING"), st(10, "STOPPED")}}, {"service:web", []State{st(2, "RUNNING"), st(25, "STOPPED")}}},
			[]Daemon{guard}, 60, Options{}, 15, 1},
		{"auto-repair on the agent's clock", []State{st(0, "REGISTERING"), {At: at(30), Status: "INACTIVE", Reason: "auto-repair: critical daemon guard stopped: x"}},
			[]task{{"daemon:guard", []State{st(1, "RUNNING"), {At: at(10), Agent: at(9.5), Status: "STOPPED"}}}, {"service:web", []State{st(2, "RUNNING"), st(25, "STOPPED")}}},
			[]Daemon{guard}, 60, Options{InferRepair: true, AgentClock: true}, 0.5, 1},
		{"user drain, daemon leaves last", []State{st(0, "REGISTERING"), st(10, "DRAINING"), st(14, "INACTIVE")},
			[]task{{"daemon:guard", []State{st(1, "RUNNING"), st(12, "STOPPED")}}, {"service:web", []State{st(2, "RUNNING"), st(11, "STOPPED")}}},
			[]Daemon{guard}, 60, Options{InferRepair: true}, 0, 0},
		{"a critical daemon added to a busy instance", []State{st(0, "REGISTERING"), st(5, "ACTIVE")},
			[]task{{"daemon:guard", []State{st(1, "RUNNING")}}, {"daemon:logs", []State{st(20.5, "PENDING"), st(21, "RUNNING")}}, {"service:web", []State{st(2, "RUNNING")}}},
			[]Daemon{guard, logs}, 60, Options{InferRepair: true}, 1, 1},
		{"window ends inside the gap", []State{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []State{st(1, "RUNNING")}}, {"daemon:logs", []State{st(21, "RUNNING")}}, {"service:web", []State{st(2, "RUNNING")}}},
			[]Daemon{guard, logs}, 20.25, Options{InferRepair: true}, 0.25, 1},
		{"agent clock keeps a late PENDING before RUNNING", []State{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []State{st(1, "RUNNING")}}, {"service:web", []State{st(3, "PENDING"), {At: at(3.1), Agent: at(2.9), Status: "RUNNING"}}}},
			[]Daemon{guard}, 60, Options{InferRepair: true, AgentClock: true}, 0, 0},
		{"no app, no gap", []State{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []State{st(1, "STOPPED")}}},
			[]Daemon{guard}, 60, Options{InferRepair: true}, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := NewHistory()
			h.insts[inst] = &Instance{Arn: inst, CP: "cp", States: c.inst}
			for i, tk := range c.tasks {
				arn := "arn:task/" + string(rune('a'+i))
				h.tasks[arn] = &Task{Arn: arn, Instance: inst, Group: tk.group, States: tk.states}
			}
			gs := h.Gaps(c.daemons, at(-10), at(c.to), c.opts)
			if got := TotalSeconds(gs); math.Abs(got-c.want) > 1e-9 || len(gs) != c.wantGaps {
				t.Fatalf("gap %.3f s in %d intervals, want %.3f s in %d: %+v", got, len(gs), c.want, c.wantGaps, gs)
			}
		})
	}
}

// Two writers' events of one record may be recorded out of commit order
// (the later write's event first): states follow the record's version.
func TestStatesFollowVersion(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ss []State
	ss = insertState(ss, State{At: t0, Status: "ACTIVE", Version: 6})
	ss = insertState(ss, State{At: t0.Add(time.Second), Status: "INACTIVE", Version: 8})
	ss = insertState(ss, State{At: t0.Add(2 * time.Second), Status: "DRAINING", Version: 7})
	var got []string
	for _, s := range ss {
		got = append(got, s.Status)
	}
	if strings.Join(got, ",") != "ACTIVE,DRAINING,INACTIVE" {
		t.Fatalf("states %v, want ACTIVE,DRAINING,INACTIVE", got)
	}
}
