package runtime_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/sim"
	"github.com/capstanhq/capstan/internal/testenv"
)

// The Runtime contract, held against both implementations: the simulated
// one stands in for Docker under the agent in fault and scale tests, so
// where the two differ on what the interface promises, those tests say
// nothing about the real agent.

// subject is an implementation under test and how to make, on it, a
// container that exits on its own with a code, and one that runs until it
// is stopped.
type subject struct {
	rt     runtime.Runtime
	labels map[string]string // unique to the test
	exits  func(code int) runtime.ContainerSpec
	serves func() runtime.ContainerSpec
}

func TestContractSim(t *testing.T) {
	rt := sim.New(sim.Config{})
	t.Cleanup(rt.Close)
	s := subject{rt: rt, labels: map[string]string{"test": t.Name()}}
	s.exits = func(code int) runtime.ContainerSpec {
		return runtime.ContainerSpec{Image: "busybox", Env: []string{"SIM_EXIT_CODE=" + strconv.Itoa(code)}}
	}
	s.serves = func() runtime.ContainerSpec { return runtime.ContainerSpec{Image: "busybox"} }
	contract(t, s)
}

func TestContractDocker(t *testing.T) {
	rt := testenv.RequireDocker(t) // fails when CI is set and Docker is missing
	image := testenv.BusyboxImage(t)
	s := subject{rt: rt, labels: testenv.UniqueLabels(t, rt)}
	s.exits = func(code int) runtime.ContainerSpec {
		return runtime.ContainerSpec{Image: image, Cmd: []string{"sh", "-c", "exit " + strconv.Itoa(code)}}
	}
	s.serves = func() runtime.ContainerSpec {
		return runtime.ContainerSpec{Image: image, Cmd: []string{"sh", "-c", "trap 'exit 143' TERM; while true; do sleep 1; done"}}
	}
	contract(t, s)
}

func contract(t *testing.T, s subject) {
	ctx := t.Context()
	rt := s.rt
	evs, errc := rt.Events(ctx)
	labelled := func(spec runtime.ContainerSpec, role string) runtime.ContainerSpec {
		spec.Labels = maps.Clone(s.labels)
		spec.Labels["role"] = role
		return spec
	}
	with := func(role string) map[string]string {
		l := maps.Clone(s.labels)
		l["role"] = role
		return l
	}
	create := func(spec runtime.ContainerSpec) string {
		t.Helper()
		id, err := rt.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	inspect := func(id string) runtime.Container {
		t.Helper()
		c, err := rt.Inspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// event returns id's next event of one of the actions, passing over
	// its others; other containers' events wait for their turn.
	byID := map[string][]runtime.Event{}
	event := func(id string, actions ...string) runtime.Event {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			for len(byID[id]) > 0 {
				ev := byID[id][0]
				byID[id] = byID[id][1:]
				if slices.Contains(actions, ev.Action) {
					return ev
				}
			}
			select {
			case ev := <-evs:
				byID[ev.ContainerID] = append(byID[ev.ContainerID], ev)
			case err := <-errc:
				t.Fatalf("event stream ended: %v", err)
			case <-deadline:
				t.Fatalf("no %v event for %s", actions, id)
			}
		}
	}

	serving := create(labelled(s.serves(), "serve"))
	exiting := create(labelled(s.exits(3), "exit"))
	if ev := event(serving, runtime.EventCreate); ev.Labels["role"] != "serve" {
		t.Errorf("create event labels %v", ev.Labels)
	}
	if c := inspect(serving); c.State != runtime.StateCreated || c.Labels["role"] != "serve" || !c.StartedAt.IsZero() {
		t.Errorf("created container %+v", c)
	}

	// List: every container carrying all the labels, running or not.
	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{s.labels, []string{serving, exiting}},
		{with("serve"), []string{serving}},
		{with("nobody"), nil},
	} {
		cs, err := rt.List(ctx, tc.labels)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, c := range cs {
			got[c.ID] = true
		}
		if len(got) != len(tc.want) {
			t.Errorf("List(%v) = %d containers, want %v", tc.labels, len(cs), tc.want)
		}
		for _, id := range tc.want {
			if !got[id] {
				t.Errorf("List(%v) lacks %s", tc.labels, id)
			}
		}
	}

	// A container exiting on its own: start, then die with its code.
	for _, id := range []string{serving, exiting} {
		if err := rt.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	event(exiting, runtime.EventStart)
	if ev := event(exiting, runtime.EventDie); ev.ExitCode != 3 || ev.Labels["role"] != "exit" {
		t.Errorf("die event %+v, want exit code 3 and the labels", ev)
	}
	// Docker stamps StartedAt after the start call returns, so a process
	// that exits at once can finish a few milliseconds "before" it started.
	if c := inspect(exiting); c.State != runtime.StateExited || c.ExitCode != 3 || c.StartedAt.IsZero() || c.FinishedAt.Before(c.StartedAt.Add(-time.Second)) {
		t.Errorf("exited container %+v", c)
	}

	// Stop returns once the container no longer runs; stopping it again
	// is no error.
	event(serving, runtime.EventStart)
	if c := inspect(serving); c.State != runtime.StateRunning || c.StartedAt.IsZero() {
		t.Errorf("running container %+v", c)
	}
	if err := rt.Stop(ctx, serving, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if c := inspect(serving); c.State != runtime.StateExited {
		t.Errorf("after Stop: %s", c.State)
	}
	if ev := event(serving, runtime.EventDie); ev.ExitCode != 143 {
		t.Errorf("stopped with exit code %d, want 143 (it ends on TERM)", ev.ExitCode)
	}
	if err := rt.Stop(ctx, serving, 10*time.Second); err != nil {
		t.Errorf("stopping a stopped container: %v", err)
	}

	// Remove forces a running container out.
	running := create(labelled(s.serves(), "remove"))
	if err := rt.Start(ctx, running); err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(ctx, running); err != nil {
		t.Fatalf("remove a running container: %v", err)
	}
	event(running, runtime.EventDestroy)
	if cs, _ := rt.List(ctx, with("remove")); len(cs) != 0 {
		t.Errorf("removed container still listed: %+v", cs)
	}

	// What is gone, or never was, is ErrNotFound.
	for _, id := range []string{running, "capstan-contract-no-such-container"} {
		_, inspectErr := rt.Inspect(ctx, id)
		for op, err := range map[string]error{"inspect": inspectErr, "start": rt.Start(ctx, id),
			"stop": rt.Stop(ctx, id, time.Second), "remove": rt.Remove(ctx, id)} {
			if !errors.Is(err, runtime.ErrNotFound) {
				t.Errorf("%s %s: %v, want ErrNotFound", op, id, err)
			}
		}
	}

	// The stream ends when its context does, with a nil error.
	sctx, cancel := context.WithCancel(ctx)
	evs2, errc2 := rt.Events(sctx)
	cancel()
	deadline := time.After(time.Minute)
	for {
		select {
		case <-evs2:
			continue
		case err := <-errc2:
			if err != nil {
				t.Errorf("stream ended by its context: %v, want nil", err)
			}
		case <-deadline:
			t.Error("stream did not end with its context")
		}
		return
	}
}
