package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// fakeRuntime is an in-memory runtime. A container's command decides what
// it does once started:
//
//	["exit", "N"]         exits with code N at once
//	["ignore-term"]       runs; a stop kills it (137)
//	anything else         runs; a stop ends it with 143 (SIGTERM)
type fakeRuntime struct {
	mu         sync.Mutex
	images     map[string]runtime.Image
	pullErr    map[string]error
	hangPull   map[string]bool // pulls of these images block until ctx ends
	hangStart  bool
	stopGate   chan struct{} // when set, stops wait for it to close
	containers map[string]*fakeContainer
	names      map[string]string
	next       int
	subs       []chan runtime.Event
	breaks     []chan error // one per open stream: send to break it
	mute       bool         // events are lost
	calls      map[string]int
	now        func() time.Time
}

type fakeContainer struct {
	spec runtime.ContainerSpec
	c    runtime.Container
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		images:     map[string]runtime.Image{},
		pullErr:    map[string]error{},
		hangPull:   map[string]bool{},
		containers: map[string]*fakeContainer{},
		names:      map[string]string{},
		calls:      map[string]int{},
		now:        time.Now,
	}
}

var _ runtime.Runtime = (*fakeRuntime)(nil)

func (f *fakeRuntime) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// emit sends an event to every subscriber; f.mu is held.
func (f *fakeRuntime) emit(id, action string, extra func(*runtime.Event)) {
	fc := f.containers[id]
	ev := runtime.Event{ContainerID: id, Action: action, Time: f.now()}
	if fc != nil {
		ev.Labels = maps.Clone(fc.spec.Labels)
	}
	if extra != nil {
		extra(&ev)
	}
	if f.mute {
		return
	}
	for _, s := range f.subs {
		select {
		case s <- ev:
		default: // a slow subscriber misses events, as with a broken stream
		}
	}
}

func (f *fakeRuntime) Info(context.Context) (runtime.Info, error) {
	return runtime.Info{Name: "fake", CPUs: 4, MemoryBytes: 8 << 30}, nil
}

func (f *fakeRuntime) Pull(ctx context.Context, image string, _ *runtime.RegistryAuth) error {
	f.mu.Lock()
	f.calls["pull"]++
	hang, err := f.hangPull[image], f.pullErr[image]
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[image] = runtime.Image{ID: "sha256:" + image, RepoDigests: []string{image + "@sha256:d1g3st"}}
	return nil
}

func (f *fakeRuntime) Image(_ context.Context, ref string) (runtime.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img, ok := f.images[ref]
	if !ok {
		return runtime.Image{}, fmt.Errorf("image %s: %w", ref, runtime.ErrNotFound)
	}
	return img, nil
}

func (f *fakeRuntime) Images(context.Context) ([]runtime.Image, error) { return nil, nil }
func (f *fakeRuntime) RemoveImage(context.Context, string) error       { return nil }

func (f *fakeRuntime) Create(_ context.Context, spec runtime.ContainerSpec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["create"]++
	if _, ok := f.names[spec.Name]; ok {
		return "", fmt.Errorf("create %s: name already in use", spec.Name)
	}
	if _, ok := f.images[spec.Image]; !ok {
		return "", fmt.Errorf("create %s: no such image %s", spec.Name, spec.Image)
	}
	f.next++
	id := fmt.Sprintf("c%04d", f.next)
	f.containers[id] = &fakeContainer{spec: spec, c: runtime.Container{
		ID: id, Name: spec.Name, Image: spec.Image, ImageID: "sha256:" + spec.Image,
		Labels: maps.Clone(spec.Labels), State: runtime.StateCreated, CreatedAt: f.now(),
	}}
	f.names[spec.Name] = id
	f.emit(id, runtime.EventCreate, nil)
	return id, nil
}

func (f *fakeRuntime) Start(ctx context.Context, id string) error {
	f.mu.Lock()
	f.calls["start"]++
	hang := f.hangStart
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fc, ok := f.containers[id]
	if !ok {
		return fmt.Errorf("start %s: %w", id, runtime.ErrNotFound)
	}
	if fc.c.State == runtime.StateRunning {
		return nil
	}
	fc.c.State, fc.c.StartedAt, fc.c.FinishedAt = runtime.StateRunning, f.now(), time.Time{}
	fc.c.IPAddress = "172.17.0." + strconv.Itoa(10+len(f.containers))
	fc.c.Ports = nil
	for i, p := range fc.spec.Ports {
		hp := p.HostPort
		if hp == 0 {
			hp = 32768 + f.next*10 + i
		}
		fc.c.Ports = append(fc.c.Ports, runtime.PortBinding{ContainerPort: p.ContainerPort, HostPort: hp, HostIP: "0.0.0.0", Protocol: p.Protocol})
	}
	if fc.spec.Healthcheck != nil {
		fc.c.Health = runtime.HealthStarting
	}
	f.emit(id, runtime.EventStart, nil)
	if cmd := fc.spec.Cmd; len(cmd) == 2 && cmd[0] == "exit" {
		code, _ := strconv.Atoi(cmd[1])
		f.exitLocked(id, code)
	}
	return nil
}

// exitLocked ends a running container; f.mu is held.
func (f *fakeRuntime) exitLocked(id string, code int) {
	fc := f.containers[id]
	if fc == nil || fc.c.State != runtime.StateRunning {
		return
	}
	// Let the clock tick so finish comes after start.
	fc.c.State, fc.c.ExitCode, fc.c.FinishedAt = runtime.StateExited, code, f.now().Add(time.Millisecond)
	if fc.c.Health != "" {
		fc.c.Health = runtime.HealthUnhealthy
	}
	f.emit(id, runtime.EventDie, func(ev *runtime.Event) { ev.ExitCode = code })
}

// exit makes a running container exit with code.
func (f *fakeRuntime) exit(id string, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exitLocked(id, code)
}

// setHealth changes a container's health and reports it.
func (f *fakeRuntime) setHealth(id, health string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fc := f.containers[id]; fc != nil {
		fc.c.Health = health
		f.emit(id, runtime.EventHealth, func(ev *runtime.Event) { ev.Health = health })
	}
}

// breakEvents ends every open event stream with an error.
func (f *fakeRuntime) breakEvents() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.breaks {
		select {
		case b <- errors.New("fake: event stream broke"):
		default:
		}
	}
}

// streams counts open event streams.
func (f *fakeRuntime) streams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// removeBehindBack deletes a container without any event, as if events
// were lost.
func (f *fakeRuntime) removeBehindBack(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fc := f.containers[id]; fc != nil {
		delete(f.names, fc.spec.Name)
		delete(f.containers, id)
	}
}

func (f *fakeRuntime) Stop(ctx context.Context, id string, _ time.Duration) error {
	f.mu.Lock()
	gate := f.stopGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["stop"]++
	fc, ok := f.containers[id]
	if !ok {
		return fmt.Errorf("stop %s: %w", id, runtime.ErrNotFound)
	}
	code := 143
	if len(fc.spec.Cmd) == 1 && fc.spec.Cmd[0] == "ignore-term" {
		code = 137
	}
	f.exitLocked(id, code)
	return nil
}

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["remove"]++
	fc, ok := f.containers[id]
	if !ok {
		return fmt.Errorf("remove %s: %w", id, runtime.ErrNotFound)
	}
	f.emit(id, runtime.EventDestroy, nil)
	delete(f.names, fc.spec.Name)
	delete(f.containers, id)
	return nil
}

func (f *fakeRuntime) Inspect(_ context.Context, id string) (runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc, ok := f.containers[id]
	if !ok {
		return runtime.Container{}, fmt.Errorf("inspect %s: %w", id, runtime.ErrNotFound)
	}
	c := fc.c
	c.Labels = maps.Clone(c.Labels)
	c.Ports = slices.Clone(c.Ports)
	return c, nil
}

func (f *fakeRuntime) List(_ context.Context, labels map[string]string) ([]runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["list"]++
	var out []runtime.Container
	for _, fc := range f.containers {
		match := true
		for k, v := range labels {
			if fc.c.Labels[k] != v {
				match = false
			}
		}
		if match {
			c := fc.c
			c.Labels = maps.Clone(c.Labels)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b runtime.Container) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

func (f *fakeRuntime) Events(ctx context.Context) (<-chan runtime.Event, <-chan error) {
	in := make(chan runtime.Event, 1024)
	out := make(chan runtime.Event)
	errc := make(chan error, 1)
	brk := make(chan error, 1)
	f.mu.Lock()
	f.subs = append(f.subs, in)
	f.breaks = append(f.breaks, brk)
	f.mu.Unlock()
	go func() {
		defer close(out)
		defer func() {
			f.mu.Lock()
			f.subs = slices.DeleteFunc(f.subs, func(c chan runtime.Event) bool { return c == in })
			f.breaks = slices.DeleteFunc(f.breaks, func(c chan error) bool { return c == brk })
			f.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				errc <- nil
				return
			case err := <-brk:
				errc <- err
				return
			case ev := <-in:
				select {
				case out <- ev:
				case <-ctx.Done():
					errc <- nil
					return
				}
			}
		}
	}()
	return out, errc
}

func (f *fakeRuntime) Stats(context.Context, string) (runtime.Stats, error) {
	return runtime.Stats{}, errors.New("fake: no stats")
}

func (f *fakeRuntime) Logs(context.Context, string, int) (io.ReadCloser, error) {
	return nil, errors.New("fake: no logs")
}

func (f *fakeRuntime) Exec(context.Context, string, []string) (int, []byte, error) {
	return 0, nil, errors.New("fake: no exec")
}

// byName returns the container whose task container label is name.
func (f *fakeRuntime) byName(arn, name string) (runtime.Container, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fc := range f.containers {
		if fc.c.Labels[LabelTaskArn] == arn && fc.c.Labels[LabelContainerName] == name {
			return fc.c, true
		}
	}
	return runtime.Container{}, false
}

func (f *fakeRuntime) spec(id string) runtime.ContainerSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.containers[id].spec
}

// memStore is a Store in memory.
type memStore struct {
	mu   sync.Mutex
	data map[string][]byte
	n    int // writes
}

func (s *memStore) puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func newMemStore() *memStore { return &memStore{data: map[string][]byte{}} }

func (s *memStore) PutTask(arn string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[arn] = slices.Clone(data)
	s.n++
	return nil
}

func (s *memStore) DeleteTask(arn string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.data, arn)
	return nil
}

func (s *memStore) Tasks() (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.data), nil
}

func (s *memStore) has(arn string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.data[arn]
	return ok
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
