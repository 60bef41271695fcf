package images

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// fakeRuntime keeps images in memory. Pulls of refs in block wait until
// the test closes the channel; pulls of refs in fail return that error.
type fakeRuntime struct {
	mu         sync.Mutex
	images     map[string]string // ref → image ID
	containers []runtime.Container
	block      map[string]chan struct{}
	fail       map[string]error
	pulls      map[string]int
	auths      map[string]*runtime.RegistryAuth // last credential per ref
	pulling    int                              // pulls in progress now
	maxPulling int
	removes    []string
	// removeGate, when set, holds every RemoveImage until closed.
	removeGate chan struct{}
	removing   chan string
}

func newFake() *fakeRuntime {
	return &fakeRuntime{
		images: map[string]string{}, block: map[string]chan struct{}{},
		fail: map[string]error{}, pulls: map[string]int{}, auths: map[string]*runtime.RegistryAuth{}, removing: make(chan string, 100),
	}
}

func (f *fakeRuntime) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	f.mu.Lock()
	f.pulls[ref]++
	f.auths[ref] = auth
	f.pulling++
	f.maxPulling = max(f.maxPulling, f.pulling)
	gate := f.block[ref]
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.pulling--
		f.mu.Unlock()
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail[ref]; err != nil {
		return err
	}
	if _, ok := f.images[ref]; !ok {
		f.images[ref] = "sha256:" + ref
	}
	return nil
}

func (f *fakeRuntime) Image(_ context.Context, ref string) (runtime.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.images[ref]
	if !ok {
		return runtime.Image{}, fmt.Errorf("inspect %s: %w", ref, runtime.ErrNotFound)
	}
	var tags []string
	for r, i := range f.images {
		if i == id {
			tags = append(tags, r)
		}
	}
	return runtime.Image{ID: id, RepoTags: tags}, nil
}

func (f *fakeRuntime) RemoveImage(ctx context.Context, id string) error {
	f.mu.Lock()
	gate := f.removeGate
	f.mu.Unlock()
	f.removing <- id
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.ImageID == id {
			return fmt.Errorf("remove image %s: in use by container %s", id, c.ID)
		}
	}
	found := false
	for r, i := range f.images {
		if i == id {
			delete(f.images, r)
			found = true
		}
	}
	if !found {
		return fmt.Errorf("remove %s: %w", id, runtime.ErrNotFound)
	}
	f.removes = append(f.removes, id)
	return nil
}

func (f *fakeRuntime) List(context.Context, map[string]string) ([]runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]runtime.Container(nil), f.containers...), nil
}

func (f *fakeRuntime) pullCount(ref string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pulls[ref]
}

func (f *fakeRuntime) has(ref string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.images[ref]
	return ok
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
