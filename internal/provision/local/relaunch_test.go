package local_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/provision"
	"github.com/capstanhq/capstan/internal/provision/local"
)

// A launch retried with the same ID (a server that stopped before noting
// the handle) finds the running agent instead of starting a second one in
// the same data dir, and Find names the instance by that ID.
func TestLaunchAgainAdopts(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fake-agent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 60\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	p, err := local.New(bin, t.TempDir(), nil, slog.New(slog.DiscardHandler))
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
