package docker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

func readLines(t *testing.T, rt runtime.LogReader, id string, opts runtime.LogOptions) []runtime.LogLine {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out []runtime.LogLine
	if err := rt.LogLines(ctx, id, opts, func(l runtime.LogLine) error { out = append(out, l); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func texts(ls []runtime.LogLine) string {
	var b []string
	for _, l := range ls {
		b = append(b, l.Stream+":"+l.Text)
	}
	return strings.Join(b, ",")
}

// TestLogLines reads a container's output line by line with the engine's
// times: both streams, a last line without its newline, since, tail, a
// callback's error, following, a TTY container's raw output and an
// unknown container.
func TestLogLines(t *testing.T) {
	f := newFixture(t)
	id := f.run(f.spec("sh", "-c", "echo one; sleep 0.3; echo two >&2; sleep 0.3; printf partial"))
	f.waitState(id, func(c runtime.Container) bool { return c.State == runtime.StateExited }, "exited")

	all := readLines(t, f.rt, id, runtime.LogOptions{})
	if texts(all) != "stdout:one,stderr:two,stdout:partial" {
		t.Fatalf("lines %q", texts(all))
	}
	for i, l := range all {
		if l.Time.IsZero() || (i > 0 && l.Time.Before(all[i-1].Time)) {
			t.Fatalf("line %d's time %v after %v", i, l.Time, all[max(i-1, 0)].Time)
		}
	}
	if got := texts(readLines(t, f.rt, id, runtime.LogOptions{Since: all[1].Time})); got != "stderr:two,stdout:partial" {
		t.Errorf("since the second line: %q", got)
	}
	if got := texts(readLines(t, f.rt, id, runtime.LogOptions{Since: all[1].Time.Add(time.Nanosecond)})); got != "stdout:partial" {
		t.Errorf("just after the second line: %q", got)
	}
	if got := texts(readLines(t, f.rt, id, runtime.LogOptions{Tail: 1})); got != "stdout:partial" {
		t.Errorf("tail 1: %q", got)
	}
	stop := errors.New("enough")
	n := 0
	err := f.rt.LogLines(t.Context(), id, runtime.LogOptions{}, func(runtime.LogLine) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("callback's error: %v after %d lines", err, n)
	}

	// Following ends with its context, having read what came meanwhile.
	ticker := f.run(f.spec("sh", "-c", "trap 'exit 0' TERM; while true; do echo tick; sleep 0.1; done"))
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	var ticks int
	start := time.Now()
	err = f.rt.LogLines(ctx, ticker, runtime.LogOptions{Follow: true, Since: start}, func(l runtime.LogLine) error {
		if l.Text == "tick" {
			ticks++
		}
		return nil
	})
	if err != nil || ticks < 3 {
		t.Errorf("follow: %v after %d ticks", err, ticks)
	}

	// A TTY container's output is one raw stream.
	res, err := f.rt.Client().ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Config: &container.Config{Image: f.image, Cmd: []string{"sh", "-c", "echo tty-line; echo second"}, Tty: true, Labels: f.labels}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rt.Start(t.Context(), res.ID); err != nil {
		t.Fatal(err)
	}
	f.waitState(res.ID, func(c runtime.Container) bool { return c.State == runtime.StateExited }, "exited")
	if got := texts(readLines(t, f.rt, res.ID, runtime.LogOptions{})); got != "stdout:tty-line,stdout:second" {
		t.Errorf("tty container: %q", got)
	}

	if err := f.rt.LogLines(t.Context(), "capstan-no-such-container", runtime.LogOptions{}, func(runtime.LogLine) error { return nil }); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("unknown container: %v", err)
	}
}
