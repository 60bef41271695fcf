package main

import (
	"math"
	"testing"
	"time"
)

func TestGaps(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	st := func(s float64, status string) state { return state{At: at(s), Status: status} }
	const inst = "arn:inst/1"
	guard := daemonSpec{Name: "guard", Arn: "arn:daemon/guard", Critical: true, CPs: []string{"cp"}, Created: at(-100)}
	logs := daemonSpec{Name: "logs", Arn: "arn:daemon/logs", Critical: true, CPs: []string{"cp"}, Created: at(20)}
	other := daemonSpec{Name: "other", Arn: "arn:daemon/other", Critical: true, CPs: []string{"elsewhere"}, Created: at(-100)}
	type task struct {
		group  string
		states []state
	}
	cases := []struct {
		name     string
		inst     []state
		tasks    []task
		daemons  []daemonSpec
		to       float64
		opts     gapOptions
		want     float64
		wantGaps int
	}{
		{"daemon first, then the app", []state{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []state{st(1, "PENDING"), st(2, "RUNNING")}}, {"service:web", []state{st(2.5, "PENDING"), st(3, "RUNNING")}}},
			[]daemonSpec{guard, other}, 60, gapOptions{inferRepair: true}, 0, 0},
		{"app before its daemon", []state{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []state{st(2, "RUNNING")}}, {"service:web", []state{st(1, "RUNNING")}}},
			[]daemonSpec{guard}, 60, gapOptions{inferRepair: true}, 1, 1},
		{"auto-repair, inferred from the record", []state{st(0, "REGISTERING"), {At: at(30), Status: "INACTIVE", Reason: "auto-repair: critical daemon guard stopped: Essential container in task exited"}},
			[]task{{"daemon:guard", []state{st(1, "RUNNING"), {At: at(10), Agent: at(9.5), Status: "STOPPED"}}}, {"service:web", []state{st(2, "RUNNING"), st(25, "STOPPED")}}},
			[]daemonSpec{guard}, 60, gapOptions{inferRepair: true}, 0, 0},
		{"auto-repair read naively", []state{st(0, "REGISTERING"), {At: at(30), Status: "INACTIVE", Reason: "auto-repair: critical daemon guard stopped: x"}},
			[]task{{"daemon:guard", []state{st(1, "RUNNING"), st(10, "STOPPED")}}, {"service:web", []state{st(2, "RUNNING"), st(25, "STOPPED")}}},
			[]daemonSpec{guard}, 60, gapOptions{}, 15, 1},
		{"auto-repair on the agent's clock", []state{st(0, "REGISTERING"), {At: at(30), Status: "INACTIVE", Reason: "auto-repair: critical daemon guard stopped: x"}},
			[]task{{"daemon:guard", []state{st(1, "RUNNING"), {At: at(10), Agent: at(9.5), Status: "STOPPED"}}}, {"service:web", []state{st(2, "RUNNING"), st(25, "STOPPED")}}},
			[]daemonSpec{guard}, 60, gapOptions{inferRepair: true, agentClock: true}, 0.5, 1},
		{"user drain, daemon leaves last", []state{st(0, "REGISTERING"), st(10, "DRAINING"), st(14, "INACTIVE")},
			[]task{{"daemon:guard", []state{st(1, "RUNNING"), st(12, "STOPPED")}}, {"service:web", []state{st(2, "RUNNING"), st(11, "STOPPED")}}},
			[]daemonSpec{guard}, 60, gapOptions{inferRepair: true}, 0, 0},
		{"a critical daemon added to a busy instance", []state{st(0, "REGISTERING"), st(5, "ACTIVE")},
			[]task{{"daemon:guard", []state{st(1, "RUNNING")}}, {"daemon:logs", []state{st(20.5, "PENDING"), st(21, "RUNNING")}}, {"service:web", []state{st(2, "RUNNING")}}},
			[]daemonSpec{guard, logs}, 60, gapOptions{inferRepair: true}, 1, 1},
		{"window ends inside the gap", []state{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []state{st(1, "RUNNING")}}, {"daemon:logs", []state{st(21, "RUNNING")}}, {"service:web", []state{st(2, "RUNNING")}}},
			[]daemonSpec{guard, logs}, 20.25, gapOptions{inferRepair: true}, 0.25, 1},
		{"agent clock keeps a late PENDING before RUNNING", []state{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []state{st(1, "RUNNING")}}, {"service:web", []state{st(3, "PENDING"), {At: at(3.1), Agent: at(2.9), Status: "RUNNING"}}}},
			[]daemonSpec{guard}, 60, gapOptions{inferRepair: true, agentClock: true}, 0, 0},
		{"no app, no gap", []state{st(0, "REGISTERING")},
			[]task{{"daemon:guard", []state{st(1, "STOPPED")}}},
			[]daemonSpec{guard}, 60, gapOptions{inferRepair: true}, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHistory()
			h.insts[inst] = &instLine{Arn: inst, CP: "cp", States: c.inst}
			for i, tk := range c.tasks {
				arn := "arn:task/" + string(rune('a'+i))
				h.tasks[arn] = &taskLine{Arn: arn, Instance: inst, Group: tk.group, States: tk.states}
			}
			gs := h.gaps(c.daemons, at(-10), at(c.to), c.opts)
			if got := totalSeconds(gs); math.Abs(got-c.want) > 1e-9 || len(gs) != c.wantGaps {
				t.Fatalf("gap %.3f s in %d intervals, want %.3f s in %d: %+v", got, len(gs), c.want, c.wantGaps, gs)
			}
		})
	}
}
