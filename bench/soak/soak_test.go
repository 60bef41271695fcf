package main

import (
	"bytes"
	"context"
	"flag"
	"testing"
	"time"
)

var (
	soakN        = flag.Int("soak.instances", 50, "hollow instances in TestSoak")
	soakDuration = flag.Duration("soak.duration", 5*time.Minute, "how long TestSoak keeps the fleet busy")
)

// TestSoak is the soak's CI size: a small fleet kept busy (rollouts,
// kills, scaling, events read, API calls) for five minutes, at a pace
// that fits as many of each into them as the hour-long run has. It fails
// when a series grows without bound or the fleet no longer converges
// afterwards; it asserts no speed.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	o := options{instances: *soakN, duration: *soakDuration, sample: 10 * time.Second, rolloutEvery: time.Minute,
		killEvery: 30 * time.Second, scaleEvery: 45 * time.Second, setupTimeout: 4 * time.Minute,
		retention: time.Minute, eventsKept: time.Minute, auditKept: time.Minute, eventLimit: 2000, warmup: 0.2, work: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), o.duration+2*o.setupTimeout+time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, o, &out)
	if rep != nil {
		rep.print(&out)
	}
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Growing) > 0 {
		t.Errorf("grew without bound: %v", rep.Growing)
	}
	for _, a := range []string{"rollouts", "instances killed", "scalings", "events read"} {
		if rep.Actions[a] == 0 {
			t.Errorf("no %s in the soak: %v", a, rep.Actions)
		}
	}
}

// TestParse checks the flags' rules.
func TestParse(t *testing.T) {
	if _, err := parse([]string{"-instances", "1"}); err == nil {
		t.Error("-instances 1 accepted")
	}
	if _, err := parse([]string{"-duration", "1m", "-sample", "30s"}); err == nil {
		t.Error("a duration of two samples accepted")
	}
	if _, err := parse([]string{"-warmup", "0.5"}); err == nil {
		t.Error("-warmup 0.5 accepted")
	}
	o, err := parse(nil)
	if err != nil || o.instances != 1000 || o.duration != time.Hour {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}

// TestAnalyse checks the verdict on made-up series: flat and noisy,
// filling then flat (a cache), and a steady climb (a leak).
func TestAnalyse(t *testing.T) {
	mk := func(f func(i int) float64) []Sample {
		var s []Sample
		for i := range 60 {
			s = append(s, Sample{At: float64(i * 60), RSSMiB: f(i), Goroutines: 1000, OpenFiles: 50, EtcdDBMiB: 10, EtcdInUseMiB: 8})
		}
		return s
	}
	grows := func(s []Sample) bool { return analyse(s, 0.2, false)[0].Grows }
	if grows(mk(func(i int) float64 { return 300 + float64(i%7)*5 })) {
		t.Error("flat noisy RSS judged growing")
	}
	if grows(mk(func(i int) float64 { return 200 + 200*min(float64(i), 35)/35 })) {
		t.Error("RSS that fills then stays judged growing")
	}
	if !grows(mk(func(i int) float64 { return 300 + 5*float64(i) })) {
		t.Error("RSS climbing 5 MiB a minute judged bounded")
	}
	// A window without calls has no p99: left out, not read as 0.
	s := mk(func(int) float64 { return 300 })
	for i := range s {
		s[i].APIp99Ms, s[i].Calls = 100, 50
		if i < 30 && i%2 == 0 {
			s[i].APIp99Ms, s[i].Calls = 0, 0
		}
	}
	if p99 := analyse(s, 0.2, false)[4]; p99.Grows || p99.MedianFirst != 100 {
		t.Errorf("p99 with empty windows: %+v", p99)
	}

	// Under the race detector RSS is shown, not judged; the live heap is
	// judged either way.
	leak := mk(func(i int) float64 { return 300 + 5*float64(i) })
	for i := range leak {
		leak[i].HeapLiveMiB = 100 + 2*float64(i)
	}
	for _, race := range []bool{false, true} {
		ss := analyse(leak, 0.2, race)
		if ss[0].Grows == race || (ss[0].NotJudged != "") != race || !ss[5].Grows || ss[5].Name != "live heap MiB" {
			t.Errorf("race %v: rss %+v, live heap %+v", race, ss[0], ss[5])
		}
	}
}
