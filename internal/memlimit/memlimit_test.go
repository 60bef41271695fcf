package memlimit

import (
	"context"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for v, want := range map[string]Setting{
		"auto": {Mode: Auto}, "": {Mode: Auto}, "off": {Mode: Off}, "480": {Mode: Fixed, MiB: 480}, "64MiB": {Mode: Fixed, MiB: 64},
	} {
		if got, err := Parse(v); err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", v, got, err, want)
		}
	}
	for _, v := range []string{"63", "-1", "0", "1.5", "1GiB", "on", "480 MiB"} {
		if _, err := Parse(v); err == nil || !strings.Contains(err.Error(), "auto, off, or a limit in MiB from 64") {
			t.Errorf("Parse(%q): %v", v, err)
		}
	}
}

func TestLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		instances         int
		live, other, want uint64
	}{
		{0, 0, 0, 160 * mib},
		{0, 30 * mib, 10 * mib, 160 * mib},     // a small heap: the base
		{5000, 200 * mib, 30 * mib, 394 * mib}, // the fleet's budget (160 + 48 KiB × 5,000, rounded down)
		{5000, 300 * mib, 40 * mib, 415 * mib}, // a heavier heap than the budget: a quarter more
		{1000, 100 * mib, 20 * mib, 206 * mib}, // the budget
		{0, 100 * mib, 20 * mib, 160 * mib},    // no fleet yet: the base
		{-1, 100 * mib, 20 * mib, 160 * mib},   // a count below zero is none
		{0, 900 * mib, 60 * mib, 1185 * mib},   // a quarter
	} {
		if got := Limit(c.instances, c.live, c.other); got/mib != c.want/mib {
			t.Errorf("Limit(%d, %d MiB, %d MiB) = %d MiB, want %d", c.instances, c.live/mib, c.other/mib, got/mib, c.want/mib)
		}
	}
}

// TestFollows: the limit rises with the fleet and with a live heap
// beyond its budget, and falls when they do, as read from the runtime.
func TestFollows(t *testing.T) {
	defer debug.SetMemoryLimit(math.MaxInt64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var instances atomic.Int64
	go follow(ctx, 20*time.Millisecond, slog.New(slog.DiscardHandler), func() int { return int(instances.Load()) })

	limitAbove := func(min int64) func() bool {
		return func() bool { return debug.SetMemoryLimit(-1) >= min }
	}
	waitFor(t, "the base", func() bool { return debug.SetMemoryLimit(-1) == Base })
	instances.Store(10000)
	waitFor(t, "the budget of 10,000 instances", limitAbove(Base+10000*PerInstance))
	instances.Store(0)
	live := make([][]byte, 0, 256)
	for range 256 {
		live = append(live, make([]byte, 1<<20))
	}
	runtime.GC()
	// 256 MiB live, over the budget: the limit is at least it and a
	// quarter more.
	waitFor(t, "the limit to follow 256 MiB live", limitAbove(256<<20+256<<20/4))
	runtime.KeepAlive(live)
	live = nil
	runtime.GC()
	waitFor(t, "the limit to fall to the base", func() bool { return debug.SetMemoryLimit(-1) == Base })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s; limit %d MiB", what, debug.SetMemoryLimit(-1)>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSettings: a fixed limit and off are put in place; GOMEMLIMIT wins
// over any setting. Each case runs in a process of its own, since the
// limit is the process's.
func TestSettings(t *testing.T) {
	if mode := os.Getenv("MEMLIMIT_TEST_CHILD"); mode != "" {
		s, err := Parse(mode)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		Apply(ctx, s, slog.New(slog.NewTextHandler(os.Stdout, nil)), func() int { return 1000 })
		time.Sleep(3 * Every)
		os.Stdout.WriteString("LIMIT " + formatMiB(debug.SetMemoryLimit(-1)) + "\n")
		return
	}
	for _, c := range []struct{ setting, env, limit, logs string }{
		{"300", "", "300", "memory limit fixed"},
		{"off", "", "none", "memory limit off"},
		{"auto", "", "206", `msg="memory limit set" limit_mib=206 instances=1000`},
		{"auto", "200MiB", "200", "memory limit from GOMEMLIMIT"},
		{"300", "200MiB", "200", "memory limit from GOMEMLIMIT"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSettings$")
		cmd.Env = append(os.Environ(), "MEMLIMIT_TEST_CHILD="+c.setting, "GOMEMLIMIT="+c.env)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%+v: %v\n%s", c, err, out)
		}
		got := string(out)
		if !strings.Contains(got, c.logs) {
			t.Errorf("%+v: log lacks %q:\n%s", c, c.logs, got)
		}
		if !strings.Contains(got, "LIMIT "+c.limit+"\n") {
			t.Errorf("%+v: want limit %s:\n%s", c, c.limit, got)
		}
	}
}

func formatMiB(b int64) string {
	if b == math.MaxInt64 {
		return "none"
	}
	return strconv.FormatInt(b>>20, 10)
}
