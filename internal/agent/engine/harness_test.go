package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
)

const testInstance = "arn:aws:ecs:us-east-1:123456789012:container-instance/test/0123456789abcdef"

// harness runs one engine and records what it reports.
type harness struct {
	t      testing.TB
	e      *Engine
	store  *memStore
	cancel context.CancelFunc
	done   chan error

	mu     sync.Mutex
	states []protocol.TaskState
	cond   chan struct{}
}

// startEngine runs an engine on cfg, filling in a store, the instance ARN,
// a logger and short intervals.
func startEngine(t testing.TB, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, cond: make(chan struct{}, 1)}
	if cfg.Store == nil {
		cfg.Store = newMemStore()
	}
	h.store, _ = cfg.Store.(*memStore)
	if cfg.ContainerInstanceArn == "" {
		cfg.ContainerInstanceArn = testInstance
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "arn:aws:ecs:us-east-1:123456789012:cluster/test"
	}
	if cfg.Log == nil {
		level := slog.LevelWarn
		if os.Getenv("CAPSTAN_TEST_LOG") != "" {
			level = slog.LevelDebug
		}
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = 200 * time.Millisecond
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 2 * time.Second
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- e.Run(ctx) }()
	var collected sync.WaitGroup
	collected.Go(func() { h.collect() })
	t.Cleanup(func() {
		h.stop()
		collected.Wait()
	})
	return h
}

// collect reads Changes, checking the contract as it goes: Seq rises per
// task, and the record was saved before the state came out.
func (h *harness) collect() {
	last := map[string]uint64{}
	for st := range h.e.Changes() {
		if st.Seq <= last[st.Arn] {
			h.t.Errorf("task %s: seq %d after %d", st.Arn, st.Seq, last[st.Arn])
		}
		last[st.Arn] = st.Seq
		if h.store != nil {
			h.store.mu.Lock()
			data, ok := h.store.data[st.Arn]
			h.store.mu.Unlock()
			if ok {
				var rec record
				if err := json.Unmarshal(data, &rec); err == nil && rec.State.Seq < st.Seq {
					h.t.Errorf("task %s: state %d emitted before it was saved (record has %d)", st.Arn, st.Seq, rec.State.Seq)
				}
			}
		}
		h.mu.Lock()
		h.states = append(h.states, st)
		h.mu.Unlock()
		select {
		case h.cond <- struct{}{}:
		default:
		}
	}
}

// stop ends Run and waits for it; it never stops containers.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		h.t.Errorf("Run did not return")
	}
	h.cancel = nil
}

// of returns the states reported for arn, in order.
func (h *harness) of(arn string) []protocol.TaskState {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []protocol.TaskState
	for _, s := range h.states {
		if s.Arn == arn {
			out = append(out, s)
		}
	}
	return out
}

// wait returns the first state of arn, from the start, for which cond holds.
func (h *harness) wait(arn, what string, timeout time.Duration, cond func(protocol.TaskState) bool) protocol.TaskState {
	h.t.Helper()
	deadline := time.After(timeout)
	for {
		for _, s := range h.of(arn) {
			if cond(s) {
				return s
			}
		}
		select {
		case <-h.cond:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			h.t.Fatalf("timed out after %s waiting for %s of %s; states:\n%s", timeout, what, arn, h.dump(arn))
		}
	}
}

func (h *harness) dump(arn string) string {
	var b []byte
	for _, s := range h.of(arn) {
		j, _ := json.Marshal(s)
		b = append(b, j...)
		b = append(b, '\n')
	}
	return string(b)
}

// waitStatus waits until arn reports status.
func (h *harness) waitStatus(arn, status string, timeout time.Duration) protocol.TaskState {
	h.t.Helper()
	return h.wait(arn, status, timeout, func(s protocol.TaskState) bool { return s.LastStatus == status })
}

// probe is a task for a desired set that exists in no other: once it
// reports, the engine has applied that set, every other entry in it
// included. Desired STOPPED it makes no runtime call; RUNNING it is
// admitted, created and started as any new task.
func probe(id, desired string) protocol.Task {
	p := newTestTask(id, ctrDef("probe", "busybox"))
	p.DesiredStatus = desired
	return p
}

// applied sets tasks and the probe p as the desired set and waits until p
// reports status.
func (h *harness) applied(tasks []protocol.Task, p protocol.Task, status string) {
	h.t.Helper()
	h.e.SetDesired(append(slices.Clone(tasks), p))
	h.waitStatus(p.Arn, status, wait)
}

// taken waits until the task's published view satisfies cond, which names
// its latest desired entry: the task's goroutine has then handled every
// message posted to it before that entry, and published what it made of
// them.
func (h *harness) taken(arn, what string, cond func(protocol.Task) bool) TaskInfo {
	h.t.Helper()
	var info TaskInfo
	waitFor(h.t, what, wait, func() bool {
		var ok bool
		info, ok = h.e.Task(arn)
		return ok && cond(info.Task)
	})
	return info
}

// listed waits until a listing of the runtime begun after the call has
// been applied (handed to the tasks): the engine starts one at a time, and
// applies each result before it starts the one after next.
func (h *harness) listed(rt *fakeRuntime) {
	h.t.Helper()
	n := rt.count("list")
	waitFor(h.t, "listings", wait, func() bool { return rt.count("list") >= n+3 })
}

// lastStatuses lists the distinct lastStatus values arn went through.
func (h *harness) lastStatuses(arn string) []string {
	var out []string
	for _, s := range h.of(arn) {
		if len(out) == 0 || out[len(out)-1] != s.LastStatus {
			out = append(out, s.LastStatus)
		}
	}
	return out
}

func containerOf(s protocol.TaskState, name string) protocol.ContainerState {
	for _, c := range s.Containers {
		if c.Name == name {
			return c
		}
	}
	return protocol.ContainerState{}
}

// Task builders.

func taskArn(id string) string {
	return "arn:aws:ecs:us-east-1:123456789012:task/test/" + id
}

func newTestTask(id string, cs ...shapes.ContainerDefinition) protocol.Task {
	return protocol.Task{
		Arn:           taskArn(id),
		ClusterArn:    "arn:aws:ecs:us-east-1:123456789012:cluster/test",
		Kind:          protocol.KindStandalone,
		DesiredStatus: StatusRunning,
		Definition: shapes.TaskDefinition{
			Family:               "fam",
			Revision:             new(int32(3)),
			NetworkMode:          "bridge",
			ContainerDefinitions: cs,
		},
		// As the server sends a task of an authorized call; the host
		// access tests take the grant away.
		HostAccess: true,
		CreatedAt:  time.Now(),
		Version:    1,
	}
}

func ctrDef(name, image string, cmd ...string) shapes.ContainerDefinition {
	return shapes.ContainerDefinition{
		Name:      name,
		Image:     image,
		Command:   cmd,
		Essential: new(true),
		Memory:    new(int32(64)),
	}
}

func nonEssential(c shapes.ContainerDefinition) shapes.ContainerDefinition {
	c.Essential = new(false)
	return c
}

func dependsOn(c shapes.ContainerDefinition, name, cond string) shapes.ContainerDefinition {
	c.DependsOn = append(c.DependsOn, shapes.ContainerDependency{ContainerName: name, Condition: cond})
	return c
}
