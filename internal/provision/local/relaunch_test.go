package local_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/capstanhq/capstan/internal/provision"
	"github.com/capstanhq/capstan/internal/provision/local"
)

// A launch retried with the same ID (a server that stopped before noting
// the handle) finds the running agent instead of starting a second one in
// the same data dir, and Find names the instance by that ID.
func TestLaunchAgainAdopts(t *testing.T) {
	p, err := local.New(fakeAgent(t), t.TempDir(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, ok := p.Find("mi-1"); ok {
		t.Fatal("Find names an instance never launched")
	}
	req := provision.Request{ID: "mi-1", CPU: 1024, MemoryMiB: 1024}
	h, err := p.Launch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), h) })
	pidOf := func() string {
		b, err := os.ReadFile(filepath.Join(p.Dir, h, "pid"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	first := pidOf()
	if alive, _ := p.Alive(ctx, h); !alive {
		t.Fatal("the launched agent is not alive")
	}
	h2, err := p.Launch(ctx, req)
	if err != nil || h2 != h {
		t.Fatalf("second launch: %q, %v; want %q", h2, err, h)
	}
	if again := pidOf(); again != first {
		t.Fatalf("second launch started agent %s next to %s", again, first)
	}
	if got, ok := p.Find("mi-1"); !ok || got != h {
		t.Fatalf("Find(mi-1) = %q, %v; want %q", got, ok, h)
	}
	for _, bad := range []string{"", "../x", "a.b"} {
		if _, ok := p.Find(bad); ok {
			t.Errorf("Find(%q) found an instance", bad)
		}
	}
	if err := p.Terminate(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Find("mi-1"); ok {
		t.Fatal("Find names a terminated instance")
	}
}

// A server killed between starting an agent and writing its pid file
// leaves an agent no file names. Another server that reaches the same
// instances through a symlink finds that agent by its data dir: it is
// alive, its pid is noted again, and Terminate stops it rather than
// leaving it running unknown.
func TestFindsAgentWhosePIDWasNotWritten(t *testing.T) {
	bin := fakeAgent(t)
	dirA := t.TempDir()
	a, err := local.New(bin, dirA, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dirB := filepath.Join(t.TempDir(), "instances")
	if err := os.Symlink(dirA, dirB); err != nil {
		t.Fatal(err)
	}
	b, err := local.New(bin, dirB, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := a.Launch(ctx, provision.Request{ID: "mi-2", CPU: 1024, MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dirA, h, "pid")
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(raw))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if err := os.Remove(pidFile); err != nil {
		t.Fatal(err)
	}
	if got, ok := b.Find("mi-2"); !ok || got != h {
		t.Fatalf("Find(mi-2) = %q, %v", got, ok)
	}
	if alive, err := b.Alive(ctx, h); err != nil || !alive {
		t.Fatalf("Alive = %v, %v: the agent without a pid file was not found", alive, err)
	}
	if again, err := os.ReadFile(pidFile); err != nil || string(again) != string(raw) {
		t.Fatalf("pid file after the search: %q, %v; want %q", again, err, raw)
	}
	if err := b.Terminate(ctx, h); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(st), ") Z") {
			t.Fatalf("agent %d still runs after Terminate", pid)
		}
	}

	// A directory whose agent never started: not alive, nothing found.
	if err := os.MkdirAll(filepath.Join(dirA, "mi-3", "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if alive, err := b.Alive(ctx, "mi-3"); err != nil || alive {
		t.Fatalf("Alive(mi-3) = %v, %v for an instance whose agent never started", alive, err)
	}
	if _, err := os.Stat(filepath.Join(dirA, "mi-3", "pid")); err == nil {
		t.Fatal("a pid file was written for an agent that never started")
	}
}

// fakeAgent is a script run as `fake-agent agent` that stays a shell (its
// command line names the agent, as Alive checks) until TERM.
func fakeAgent(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "fake-agent")
	script := "#!/bin/sh\ntrap 'kill $! 2>/dev/null; exit 0' TERM\nsleep 60 &\nwait\n"
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return bin
}
