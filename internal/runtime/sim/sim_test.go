package sim_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/sim"
)

// The agent's daemon networking finds what it needs on the sim runtime.
var _ daemonnet.Runtime = (*sim.Runtime)(nil)

func spec(name string, env ...string) runtime.ContainerSpec {
	return runtime.ContainerSpec{Name: name, Image: "example/app:1", Env: env,
		Labels: map[string]string{"com.capstan.instance": "i-1", "app": name}}
}

// next reads the next event, failing after a deadline.
func next(t *testing.T, evs <-chan runtime.Event) runtime.Event {
	t.Helper()
	select {
	case ev, ok := <-evs:
		if !ok {
			t.Fatal("event stream closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return runtime.Event{}
}

// until reads events until one with action arrives for id.
func until(t *testing.T, evs <-chan runtime.Event, id, action string) runtime.Event {
	t.Helper()
	for {
		if ev := next(t, evs); ev.ContainerID == id && ev.Action == action {
			return ev
		}
	}
}

func TestLifecycle(t *testing.T) {
	ctx := t.Context()
	r := sim.New(sim.Config{})
	evs, _ := r.Events(ctx)
	s := spec("web")
	s.Ports = []runtime.PortBinding{{ContainerPort: 80}}
	id, err := r.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, evs); ev.Action != runtime.EventCreate || ev.Labels["app"] != "web" {
		t.Fatalf("first event %+v, want create with labels", ev)
	}
	if _, err := r.Create(ctx, s); err == nil {
		t.Fatal("a second container with the same name was created")
	}
	c, err := r.Inspect(ctx, "web")
	if err != nil || c.ID != id || c.State != runtime.StateCreated {
		t.Fatalf("inspect by name: %+v %v", c, err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	until(t, evs, id, runtime.EventStart)
	c, _ = r.Inspect(ctx, id)
	if c.State != runtime.StateRunning || c.IPAddress == "" || len(c.Ports) != 1 || c.Ports[0].HostPort == 0 || c.Pid == 0 {
		t.Fatalf("running container: %+v", c)
	}
	if err := r.Stop(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := until(t, evs, id, runtime.EventDie); ev.ExitCode != 143 {
		t.Fatalf("stop exit code %d, want 143", ev.ExitCode)
	}
	c, _ = r.Inspect(ctx, id)
	if c.State != runtime.StateExited || c.ExitCode != 143 || !c.FinishedAt.After(c.StartedAt) {
		t.Fatalf("stopped container: %+v", c)
	}
	if err := r.Stop(ctx, id, time.Second); err != nil {
		t.Fatalf("stopping a stopped container: %v", err)
	}
	if err := r.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	until(t, evs, id, runtime.EventDestroy)
	if _, err := r.Inspect(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("inspect after remove: %v", err)
	}
	if err := r.Start(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("start after remove: %v", err)
	}
}

func TestExitBehaviourFromEnv(t *testing.T) {
	ctx := t.Context()
	r := sim.New(sim.Config{})
	evs, _ := r.Events(ctx)

	at, _ := r.Create(ctx, spec("at-once", "SIM_EXIT_CODE=3", "SIM_OUTPUT=boom"))
	if err := r.Start(ctx, at); err != nil {
		t.Fatal(err)
	}
	if ev := until(t, evs, at, runtime.EventDie); ev.ExitCode != 3 {
		t.Fatalf("exit code %d, want 3", ev.ExitCode)
	}
	rc, _ := r.Logs(ctx, at, 3)
	out, _ := io.ReadAll(rc)
	if !strings.Contains(string(out), "boom") {
		t.Fatalf("logs %q lack the configured output", out)
	}

	later, _ := r.Create(ctx, spec("later", "SIM_EXIT_AFTER=50ms"))
	start := time.Now()
	r.Start(ctx, later)
	if c, _ := r.Inspect(ctx, later); c.State != runtime.StateRunning {
		t.Fatalf("exits at once, want after 50ms: %+v", c)
	}
	if ev := until(t, evs, later, runtime.EventDie); ev.ExitCode != 1 || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("exit %d after %s, want 1 after 50ms", ev.ExitCode, time.Since(start))
	}

	bad, _ := r.Create(ctx, spec("bad", "SIM_START_ERROR=exec: \"/app\": not found"))
	if err := r.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("start error %v", err)
	}
	if c, _ := r.Inspect(ctx, bad); c.State != runtime.StateCreated || c.ExitCode != 128 || c.Error == "" {
		t.Fatalf("failed start: %+v", c)
	}

	if _, err := r.Create(ctx, spec("typo", "SIM_EXIT_AFTER=soon")); err == nil {
		t.Fatal("an unreadable SIM_EXIT_AFTER was accepted")
	}
}

func TestImageBehaviourAndPulls(t *testing.T) {
	ctx := t.Context()
	r := sim.New(sim.Config{PullRequired: true, Images: map[string]sim.Behaviour{
		"example/bad:2":  {Exit: true, ExitCode: 2},
		"example/gone:1": {PullError: "manifest unknown"},
	}})
	s := spec("a")
	s.Image = "example/bad:2"
	if _, err := r.Create(ctx, s); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("create before pull: %v", err)
	}
	if err := r.Pull(ctx, "example/gone:1", nil); err == nil {
		t.Fatal("pull of a failing image succeeded")
	}
	if err := r.Pull(ctx, "example/bad:2", nil); err != nil {
		t.Fatal(err)
	}
	img, err := r.Image(ctx, "example/bad:2")
	if err != nil || !strings.HasPrefix(img.ID, "sha256:") || len(img.RepoDigests) != 1 {
		t.Fatalf("image %+v %v", img, err)
	}
	id, err := r.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	r.Start(ctx, id)
	if c, _ := r.Inspect(ctx, id); c.State != runtime.StateExited || c.ExitCode != 2 {
		t.Fatalf("bad revision container: %+v", c)
	}
	if err := r.RemoveImage(ctx, img.ID); err == nil {
		t.Fatal("removed an image a container uses")
	}
	r.Remove(ctx, id)
	if err := r.RemoveImage(ctx, img.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Image(ctx, "example/bad:2"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("image after removal: %v", err)
	}
}

func TestHealthAndCrash(t *testing.T) {
	ctx := t.Context()
	r := sim.New(sim.Config{})
	evs, _ := r.Events(ctx)
	s := spec("h", "SIM_HEALTH_AFTER=20ms")
	s.Healthcheck = &runtime.Healthcheck{Test: []string{"CMD", "true"}, Interval: time.Hour}
	id, _ := r.Create(ctx, s)
	r.Start(ctx, id)
	if c, _ := r.Inspect(ctx, id); c.Health != runtime.HealthStarting {
		t.Fatalf("health at start %q", c.Health)
	}
	if ev := until(t, evs, id, runtime.EventHealth); ev.Health != runtime.HealthHealthy {
		t.Fatalf("health %q", ev.Health)
	}
	if err := r.SetHealth(id, runtime.HealthUnhealthy); err != nil {
		t.Fatal(err)
	}
	if ev := until(t, evs, id, runtime.EventHealth); ev.Health != runtime.HealthUnhealthy {
		t.Fatalf("health %q", ev.Health)
	}
	if err := r.Crash(id, 137, true); err != nil {
		t.Fatal(err)
	}
	until(t, evs, id, runtime.EventOOM)
	if ev := until(t, evs, id, runtime.EventDie); ev.ExitCode != 137 {
		t.Fatalf("crash exit %d", ev.ExitCode)
	}
	if c, _ := r.Inspect(ctx, id); !c.OOMKilled || c.State != runtime.StateExited {
		t.Fatalf("crashed: %+v", c)
	}
	// A restart is a new run: the old run's timers do nothing.
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.Inspect(ctx, id); c.State != runtime.StateRunning || c.OOMKilled || c.Health != runtime.HealthStarting {
		t.Fatalf("restarted: %+v", c)
	}
}

func TestStopIgnoredWaitsForTimeout(t *testing.T) {
	ctx := t.Context()
	r := sim.New(sim.Config{StopLatency: time.Millisecond})
	id, _ := r.Create(ctx, spec("stubborn", "SIM_IGNORE_STOP=true"))
	r.Start(ctx, id)
	start := time.Now()
	if err := r.Stop(ctx, id, 60*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c, _ := r.Inspect(ctx, id)
	if c.ExitCode != 137 || time.Since(start) < 60*time.Millisecond {
		t.Fatalf("exit %d after %s, want 137 after the timeout", c.ExitCode, time.Since(start))
	}
	// A stop whose context ends first fails and leaves it running.
	id2, _ := r.Create(ctx, spec("stubborn2", "SIM_IGNORE_STOP=true"))
	r.Start(ctx, id2)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := r.Stop(sctx, id2, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop beyond its context: %v", err)
	}
	if c, _ := r.Inspect(ctx, id2); c.State != runtime.StateRunning {
		t.Fatalf("state %s", c.State)
	}
}

func TestListFiltersByLabels(t *testing.T) {
	ctx := t.Context()
	r := sim.New(sim.Config{})
	a, _ := r.Create(ctx, spec("a"))
	b, _ := r.Create(ctx, spec("b"))
	other := spec("c")
	other.Labels = map[string]string{"com.capstan.instance": "i-2"}
	r.Create(ctx, other)
	cs, err := r.List(ctx, map[string]string{"com.capstan.instance": "i-1"})
	if err != nil || len(cs) != 2 || cs[0].ID != a || cs[1].ID != b {
		t.Fatalf("list: %v %v", cs, err)
	}
	cs, _ = r.List(ctx, map[string]string{"com.capstan.instance": "i-1", "app": "b"})
	if len(cs) != 1 || cs[0].ID != b {
		t.Fatalf("list by two labels: %v", cs)
	}
	// The view is a copy.
	cs[0].Labels["app"] = "changed"
	if c, _ := r.Inspect(ctx, b); c.Labels["app"] != "b" {
		t.Fatal("a listed container's labels alias the runtime's")
	}
}

// A reader that does not keep up loses nothing and sees events in order.
func TestEventsSlowReaderInOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	r := sim.New(sim.Config{})
	evs, errc := r.Events(ctx)
	var ids []string
	for i := range 200 {
		id, err := r.Create(ctx, spec("c"+string(rune('a'+i%26))+strings.Repeat("x", i/26)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i, id := range ids {
		if ev := next(t, evs); ev.ContainerID != id {
			t.Fatalf("event %d for %s, want %s", i, ev.ContainerID, id)
		}
	}
	cancel()
	for range evs {
	}
	if err := <-errc; err != nil {
		t.Fatalf("stream end: %v", err)
	}
	// Events after the end go nowhere and block nothing.
	if _, err := r.Create(t.Context(), spec("after")); err != nil {
		t.Fatal(err)
	}
}

func TestCloseEndsStreams(t *testing.T) {
	r := sim.New(sim.Config{})
	evs, errc := r.Events(t.Context())
	r.Create(t.Context(), spec("a"))
	r.Close()
	for range evs {
	}
	if err := <-errc; err == nil {
		t.Fatal("closing the runtime ended the stream without an error")
	}
	if _, err := r.Info(t.Context()); err == nil {
		t.Fatal("a closed runtime answered Info")
	}
}

func TestNetworks(t *testing.T) {
	ctx := t.Context()
	r := sim.New(sim.Config{})
	subnet := netip.MustParsePrefix("169.254.172.0/24")
	nid, err := r.CreateNetwork(ctx, runtime.NetworkSpec{Name: "capstan-i1", Subnet: subnet, Labels: map[string]string{"role": "net"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateNetwork(ctx, runtime.NetworkSpec{Name: "other", Subnet: netip.MustParsePrefix("169.254.172.0/25")}); !errors.Is(err, runtime.ErrAddressInUse) {
		t.Fatalf("overlapping subnet: %v", err)
	}
	holder := spec("holder")
	holder.NetworkMode = "capstan-i1"
	hid, err := r.CreateWithAddress(ctx, holder, netip.MustParseAddr("169.254.172.2"))
	if err != nil {
		t.Fatal(err)
	}
	r.Start(ctx, hid)
	if c, _ := r.Inspect(ctx, hid); c.IPAddress != "169.254.172.2" {
		t.Fatalf("holder address %q", c.IPAddress)
	}
	app := spec("app")
	app.NetworkMode = "capstan-i1"
	aid, _ := r.Create(ctx, app)
	r.Start(ctx, aid)
	if c, _ := r.Inspect(ctx, aid); c.IPAddress == "" || c.IPAddress == "169.254.172.2" || c.IPAddress == "169.254.172.1" {
		t.Fatalf("app address %q", c.IPAddress)
	}
	daemon := spec("daemon")
	daemon.NetworkMode = "container:holder"
	did, _ := r.Create(ctx, daemon)
	if err := r.Start(ctx, did); err != nil {
		t.Fatalf("joining the holder's namespace: %v", err)
	}
	ns, err := r.Networks(ctx, map[string]string{"role": "net"})
	if err != nil || len(ns) != 1 || ns[0].ID != nid || len(ns[0].Containers) != 2 || ns[0].Gateway != netip.MustParseAddr("169.254.172.1") {
		t.Fatalf("networks: %+v %v", ns, err)
	}
	if err := r.RemoveNetwork(ctx, nid); err == nil {
		t.Fatal("removed a network with running containers")
	}
	r.Stop(ctx, hid, time.Second)
	if err := r.Start(ctx, did); err != nil {
		t.Fatalf("already running: %v", err)
	}
	r.Stop(ctx, did, time.Second)
	if err := r.Start(ctx, did); err == nil {
		t.Fatal("joined the namespace of a stopped holder")
	}
	for id := range ns[0].Containers {
		if err := r.DisconnectNetwork(ctx, nid, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.RemoveNetwork(ctx, nid); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Network(ctx, nid); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("network after removal: %v", err)
	}
}

// Thousands of containers with timers cost no goroutine each.
func TestManyContainersAreCheap(t *testing.T) {
	ctx := t.Context()
	r := sim.New(sim.Config{})
	evs, _ := r.Events(ctx)
	go func() {
		for range evs {
		}
	}()
	before := goruntime.NumGoroutine()
	for i := range 3000 {
		s := spec("")
		s.Env = []string{"SIM_EXIT_AFTER=1h"}
		s.Healthcheck = &runtime.Healthcheck{Test: []string{"CMD", "true"}, Interval: time.Hour}
		id, err := r.Create(ctx, s)
		if err != nil {
			t.Fatal(i, err)
		}
		if err := r.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	cs, _ := r.List(ctx, map[string]string{"com.capstan.instance": "i-1"})
	if len(cs) != 3000 {
		t.Fatalf("listed %d", len(cs))
	}
	if n := goruntime.NumGoroutine(); n > before+50 {
		t.Fatalf("%d goroutines for 3000 containers, %d before", n, before)
	}
}
