package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
)

// heldRuntime is a fakeRuntime whose listings and stops can be held, to
// order a listing around a removal: a held List has taken its snapshot and
// waits to return it.
type heldRuntime struct {
	*fakeRuntime
	mu      sync.Mutex
	list    *hold
	stop    *hold
	removes map[string]int
}

// hold catches the next call: taken closes when it arrives, and it returns
// once release is closed.
type hold struct {
	taken   chan struct{}
	release chan struct{}
}

func newHeldRuntime() *heldRuntime {
	return &heldRuntime{fakeRuntime: newFakeRuntime(), removes: map[string]int{}}
}

// holdList holds the next listing after its snapshot.
func (r *heldRuntime) holdList() *hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = &hold{taken: make(chan struct{}), release: make(chan struct{})}
	return r.list
}

// holdStop holds the next stop before it acts.
func (r *heldRuntime) holdStop() *hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stop = &hold{taken: make(chan struct{}), release: make(chan struct{})}
	return r.stop
}

// take returns the armed hold in *p, disarming it.
func (r *heldRuntime) take(p **hold) *hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := *p
	*p = nil
	return h
}

func (h *hold) wait(ctx context.Context) {
	close(h.taken)
	select {
	case <-h.release:
	case <-ctx.Done():
	}
}

func (r *heldRuntime) List(ctx context.Context, labels map[string]string) ([]runtime.Container, error) {
	cs, err := r.fakeRuntime.List(ctx, labels)
	if h := r.take(&r.list); h != nil {
		h.wait(ctx)
	}
	return cs, err
}

func (r *heldRuntime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	if h := r.take(&r.stop); h != nil {
		h.wait(ctx)
	}
	return r.fakeRuntime.Stop(ctx, id, timeout)
}

func (r *heldRuntime) Remove(ctx context.Context, id string) error {
	r.mu.Lock()
	r.removes[id]++
	r.mu.Unlock()
	return r.fakeRuntime.Remove(ctx, id)
}

func (r *heldRuntime) removed(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removes[id]
}

// arrived waits until h has caught its call.
func arrived(t *testing.T, h *hold, what string) {
	t.Helper()
	select {
	case <-h.taken:
	case <-time.After(wait):
		t.Fatalf("timed out after %s waiting for %s", wait, what)
	}
}

// applyHeld lets the held listing g return and waits until the engine has
// applied it: the next listing is held so it cannot replace g's result,
// and the one after starts only once the loop pass that started the next
// one, and so applied g's, is over.
func applyHeld(t *testing.T, rt *heldRuntime, g *hold) {
	t.Helper()
	next := rt.holdList()
	close(g.release)
	arrived(t, next, "the listing after the held one")
	after := rt.holdList()
	close(next.release)
	arrived(t, after, "a second listing after the held one")
	close(after.release)
}

// waitDesiredApplied waits until the engine has applied a desired set, so
// unknown containers are orphans rather than tasks to adopt.
func waitDesiredApplied(t *testing.T, e *Engine) {
	t.Helper()
	waitFor(t, "desired set applied", wait, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.gotDesired
	})
}

// TestOrphanListedDuringRemoval: a listing taken while an orphan is being
// removed, and applied after the removal ends, does not remove it again:
// it is removed and counted once.
func TestOrphanListedDuringRemoval(t *testing.T) {
	rt := newHeldRuntime()
	if err := rt.Pull(t.Context(), "busybox", nil); err != nil {
		t.Fatal(err)
	}
	h := startEngine(t, Config{Runtime: rt, ReconcileInterval: 10 * time.Millisecond})
	h.e.SetDesired(nil)
	waitDesiredApplied(t, h.e)

	stop := rt.holdStop()
	orphan := newTestTask("stale", ctrDef("app", "busybox"))
	cfg := Config{Cluster: "c", ContainerInstanceArn: testInstance}
	id, err := rt.Create(t.Context(), buildSpec(specInput{cfg: &cfg, task: &orphan, def: &orphan.Definition, networkMode: "bridge"}))
	if err != nil {
		t.Fatal(err)
	}
	arrived(t, stop, "the orphan's stop")
	// The removal is under way; this listing still shows the container.
	list := rt.holdList()
	arrived(t, list, "a listing during the removal")
	close(stop.release)
	waitFor(t, "removal finished", wait, func() bool {
		if _, there := rt.byName(orphan.Arn, "app"); there {
			return false
		}
		h.e.mu.Lock()
		defer h.e.mu.Unlock()
		return !h.e.removing[id]
	})
	applyHeld(t, rt, list)
	h.stop() // waits for any removal the stale listing started

	if n := rt.removed(id); n != 1 {
		t.Errorf("orphan removed %d times, want 1", n)
	}
	if n := h.e.Stats().OrphansRemoved; n != 1 {
		t.Errorf("OrphansRemoved = %d, want 1", n)
	}
}

// TestOrphanListedBeforeCleanup: a listing taken before a task's cleanup
// removed its containers, and applied after the task is forgotten, does not
// take them for orphans.
func TestOrphanListedBeforeCleanup(t *testing.T) {
	rt := newHeldRuntime()
	h := startEngine(t, Config{Runtime: rt, ReconcileInterval: 10 * time.Millisecond, CleanupWait: time.Nanosecond})
	task := newTestTask("cleaned", ctrDef("app", "busybox"))
	h.e.SetDesired([]protocol.Task{task})
	id := containerOf(h.waitStatus(task.Arn, StatusRunning, wait), "app").RuntimeID

	list := rt.holdList()
	arrived(t, list, "a listing while the task runs")
	h.e.SetDesired(nil)
	h.waitStatus(task.Arn, StatusStopped, wait)
	waitFor(t, "task cleaned up", wait, func() bool {
		_, known := h.e.Task(task.Arn)
		return !known
	})
	applyHeld(t, rt, list)
	h.stop()

	if n := rt.removed(id); n != 1 {
		t.Errorf("container removed %d times, want 1 (by the cleanup)", n)
	}
	if n := h.e.Stats().OrphansRemoved; n != 0 {
		t.Errorf("OrphansRemoved = %d, want 0", n)
	}
}
