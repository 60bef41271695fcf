package images

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/runtime"
)

func openState(t *testing.T) *state.DB {
	t.Helper()
	db, err := state.Open(filepath.Join(t.TempDir(), state.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (m *Manager) waiters(ref string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.flights[ref]; f != nil {
		return f.waiters
	}
	return -1
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                         "busybox:latest",
		"busybox:1.36":                    "busybox:1.36",
		"docker.io/library/busybox":       "busybox:latest",
		"index.docker.io/library/nginx:1": "nginx:1",
		"docker.io/grafana/agent":         "grafana/agent:latest",
		"127.0.0.1:5000/app":              "127.0.0.1:5000/app:latest",
		"127.0.0.1:5000/app:2":            "127.0.0.1:5000/app:2",
		"ghcr.io/o/app@sha256:abc":        "ghcr.io/o/app@sha256:abc",
		" busybox ":                       "busybox:latest",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBehaviours(t *testing.T) {
	pullErr := errors.New("registry says no")
	tests := []struct {
		behavior     config.PullBehavior
		cached       bool // image present locally
		pulledBefore bool // this agent recorded a successful pull
		pullFails    bool
		wantPull     bool
		wantErr      bool
	}{
		{config.PullDefault, false, false, false, true, false},
		{config.PullDefault, true, false, true, true, false}, // cached fallback
		{config.PullDefault, false, false, true, true, true},
		{config.PullAlways, true, true, false, true, false},
		{config.PullAlways, true, true, true, true, true},
		{config.PullOnce, true, true, true, false, false},
		{config.PullOnce, true, false, false, true, false},
		{config.PullOnce, true, false, true, true, true},
		{config.PullOnce, false, true, false, true, false}, // removed since: pull again
		{config.PullPreferCached, true, false, true, false, false},
		{config.PullPreferCached, false, false, false, true, false},
		{config.PullPreferCached, false, false, true, true, true},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/cached=%v,pulledBefore=%v,pullFails=%v", tt.behavior, tt.cached, tt.pulledBefore, tt.pullFails)
		t.Run(name, func(t *testing.T) {
			rt, db := newFake(), openState(t)
			const ref = "app:1"
			if tt.cached {
				rt.images[ref] = "sha256:cached"
			}
			if tt.pulledBefore {
				if err := db.ImagePulled(ref, "sha256:cached", time.Now().Add(-time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			if tt.pullFails {
				rt.fail[ref] = pullErr
			}
			m := New(rt, db, Options{Behavior: tt.behavior})
			img, err := m.Ensure(context.Background(), "app:1", nil)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, pullErr) {
				t.Errorf("error %v does not carry the pull failure", err)
			}
			if got := rt.pullCount(ref) > 0; got != tt.wantPull {
				t.Errorf("pulled = %v, want %v", got, tt.wantPull)
			}
			if err == nil {
				if img.ID == "" {
					t.Error("no image ID")
				}
				rec, ok, _ := db.Image(ref)
				if !ok || time.Since(rec.LastUsed) > time.Minute {
					t.Errorf("use not recorded: %+v", rec)
				}
			}
			mt := m.Metrics()
			if tt.wantPull && !tt.pullFails && mt.PullsOK != 1 || tt.pullFails && tt.wantPull && mt.PullsFailed != 1 {
				t.Errorf("metrics %+v", mt)
			}
		})
	}
}

func TestOnceRemembersAcrossManagers(t *testing.T) {
	rt, db := newFake(), openState(t)
	m := New(rt, db, Options{Behavior: config.PullOnce})
	if _, err := m.Ensure(context.Background(), "app:1", nil); err != nil {
		t.Fatal(err)
	}
	// A new manager on the same state (the agent restarted) does not pull again.
	rt.fail["app:1"] = errors.New("registry down")
	m2 := New(rt, db, Options{Behavior: config.PullOnce})
	if _, err := m2.Ensure(context.Background(), "app", nil); err != nil {
		t.Fatal(err)
	}
	if n := rt.pullCount("app:1"); n != 1 {
		t.Errorf("pulls = %d, want 1", n)
	}
}

func TestAuthByRegistry(t *testing.T) {
	rt, db := newFake(), openState(t)
	regAuth := runtime.RegistryAuth{Username: "u", Password: "p", ServerAddress: "127.0.0.1:5000"}
	hubAuth := runtime.RegistryAuth{Username: "hub", Password: "h", ServerAddress: "docker.io"}
	m := New(rt, db, Options{Auth: map[string]runtime.RegistryAuth{"127.0.0.1:5000": regAuth, "docker.io": hubAuth}})
	ctx := context.Background()
	explicit := &runtime.RegistryAuth{Username: "task"}
	for _, c := range []struct {
		image string
		auth  *runtime.RegistryAuth
		want  *runtime.RegistryAuth
	}{
		{"127.0.0.1:5000/app:1", nil, &regAuth},
		{"busybox", nil, &hubAuth},
		{"ghcr.io/o/a:1", nil, nil},
		{"127.0.0.1:5000/app:2", explicit, explicit},
	} {
		if _, err := m.Ensure(ctx, c.image, c.auth); err != nil {
			t.Fatal(err)
		}
		got := rt.auths[Normalize(c.image)]
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: auth %+v, want %+v", c.image, got, c.want)
		}
	}
}

func TestConcurrentEnsureSharesOnePull(t *testing.T) {
	rt, db := newFake(), openState(t)
	gate := make(chan struct{})
	rt.block["app:1"] = gate
	m := New(rt, db, Options{Behavior: config.PullAlways})
	const callers = 10
	var wg sync.WaitGroup
	ids := make([]string, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			img, err := m.Ensure(context.Background(), "app:1", nil)
			ids[i], errs[i] = img.ID, err
		})
	}
	waitFor(t, "every caller to join the one pull", func() bool { return m.waiters("app:1") == callers-1 })
	close(gate)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || ids[i] != "sha256:app:1" {
			t.Errorf("caller %d: %q %v", i, ids[i], errs[i])
		}
	}
	if n := rt.pullCount("app:1"); n != 1 {
		t.Errorf("pulls = %d, want 1", n)
	}
}

func TestDifferentImagesPullInParallel(t *testing.T) {
	rt, db := newFake(), openState(t)
	gate := make(chan struct{})
	images := []string{"a:1", "b:1", "c:1"}
	for _, ref := range images {
		rt.block[ref] = gate
	}
	m := New(rt, db, Options{})
	var wg sync.WaitGroup
	for _, ref := range images {
		wg.Go(func() {
			if _, err := m.Ensure(context.Background(), ref, nil); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, "all pulls to be in progress at once", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.pulling == len(images)
	})
	close(gate)
	wg.Wait()
}

func TestLeaderGivingUpDoesNotFailFollowers(t *testing.T) {
	rt, db := newFake(), openState(t)
	gate := make(chan struct{})
	rt.block["app:1"] = gate
	m := New(rt, db, Options{})
	leaderCtx, cancel := context.WithCancel(context.Background())
	leaderErr := make(chan error, 1)
	go func() {
		_, err := m.Ensure(leaderCtx, "app:1", nil)
		leaderErr <- err
	}()
	waitFor(t, "the leader's pull", func() bool { return rt.pullCount("app:1") == 1 })
	follower := make(chan error, 1)
	go func() {
		_, err := m.Ensure(context.Background(), "app:1", nil)
		follower <- err
	}()
	waitFor(t, "the follower to join", func() bool { return m.waiters("app:1") == 1 })
	cancel()
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: %v", err)
	}
	waitFor(t, "the follower's own pull", func() bool { return rt.pullCount("app:1") == 2 })
	close(gate)
	if err := <-follower; err != nil {
		t.Errorf("follower: %v", err)
	}
}

// seed puts an image in the fake runtime and a record last used age ago.
func seed(t *testing.T, rt *fakeRuntime, db *state.DB, now time.Time, ref, id string, age time.Duration) {
	t.Helper()
	rt.images[ref] = id
	if err := db.ImagePulled(ref, id, now.Add(-age)); err != nil {
		t.Fatal(err)
	}
}

func TestCleanupChoosesOldUnusedImages(t *testing.T) {
	rt, db := newFake(), openState(t)
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	now := clk.Now()
	seed(t, rt, db, now, "old:1", "sha256:old", 2*time.Hour)
	seed(t, rt, db, now, "older:1", "sha256:older", 3*time.Hour)
	seed(t, rt, db, now, "oldest:1", "sha256:oldest", 4*time.Hour)
	seed(t, rt, db, now, "young:1", "sha256:young", 10*time.Minute)
	seed(t, rt, db, now, "used:1", "sha256:used", 5*time.Hour)
	seed(t, rt, db, now, "stopped:1", "sha256:stopped", 5*time.Hour)
	seed(t, rt, db, now, "shared:1", "sha256:shared", 5*time.Hour)
	rt.images["someone-elses:1"] = "sha256:shared" // a tag this agent never used
	seed(t, rt, db, now, "vanished:1", "sha256:vanished", 5*time.Hour)
	delete(rt.images, "vanished:1")
	rt.containers = []runtime.Container{
		{ID: "c1", Image: "used:1", ImageID: "sha256:used", State: runtime.StateRunning},
		{ID: "c2", Image: "sha256:stopped", ImageID: "sha256:stopped", State: runtime.StateExited},
	}
	m := New(rt, db, Options{MinimumCleanupAge: time.Hour, DeletePerCycle: 2, Now: clk.Now})

	n, err := m.Cleanup(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("Cleanup = %d, %v", n, err)
	}
	if want := []string{"sha256:oldest", "sha256:older"}; !slices.Equal(rt.removes, want) {
		t.Errorf("removed %v, want %v (oldest first, at most 2)", rt.removes, want)
	}
	n, err = m.Cleanup(context.Background())
	if err != nil || n != 1 || rt.removes[2] != "sha256:old" {
		t.Fatalf("second Cleanup = %d, %v, removed %v", n, err, rt.removes)
	}
	for _, ref := range []string{"young:1", "used:1", "stopped:1", "shared:1", "someone-elses:1"} {
		if !rt.has(ref) {
			t.Errorf("%s was deleted", ref)
		}
	}
	recs, _ := db.Images()
	var refs []string
	for _, r := range recs {
		refs = append(refs, r.Ref)
	}
	if want := []string{"shared:1", "stopped:1", "used:1", "young:1"}; !slices.Equal(refs, want) {
		t.Errorf("records %v, want %v", refs, want)
	}
	// Images in use count as used now, so they age from their last use.
	if rec, _, _ := db.Image("used:1"); !rec.LastUsed.Equal(now) {
		t.Errorf("used image LastUsed = %v", rec.LastUsed)
	}
	if mt := m.Metrics(); mt.ImagesDeleted != 3 || mt.CleanupCycles != 2 {
		t.Errorf("metrics %+v", mt)
	}

	// Once the young image ages past the minimum, it goes too.
	clk.Add(time.Hour)
	if n, _ := m.Cleanup(context.Background()); n != 1 || rt.has("young:1") {
		t.Errorf("aged image not deleted: %d", n)
	}
}

func TestCleanupNeverBlocksPulls(t *testing.T) {
	rt, db := newFake(), openState(t)
	now := time.Now()
	seed(t, rt, db, now, "old:1", "sha256:old", 2*time.Hour)
	rt.removeGate = make(chan struct{})
	m := New(rt, db, Options{Behavior: config.PullAlways, MinimumCleanupAge: time.Hour})

	cleaned := make(chan error, 1)
	go func() {
		_, err := m.Cleanup(context.Background())
		cleaned <- err
	}()
	<-rt.removing // the engine is now deleting old:1, as slowly as it likes

	// Other images pull meanwhile.
	if _, err := m.Ensure(context.Background(), "other:1", nil); err != nil {
		t.Fatal(err)
	}
	// The image being deleted waits for the deletion, then comes back.
	got := make(chan error, 1)
	go func() {
		_, err := m.Ensure(context.Background(), "old:1", nil)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Ensure of the image being deleted returned during the deletion: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(rt.removeGate)
	if err := <-cleaned; err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if !rt.has("old:1") || rt.pullCount("old:1") != 1 {
		t.Errorf("old:1 present=%v pulls=%d", rt.has("old:1"), rt.pullCount("old:1"))
	}
}

func TestCleanupSkipsImageBeingEnsured(t *testing.T) {
	rt, db := newFake(), openState(t)
	seed(t, rt, db, time.Now(), "old:1", "sha256:old", 2*time.Hour)
	gate := make(chan struct{})
	rt.block["old:1"] = gate
	m := New(rt, db, Options{Behavior: config.PullAlways, MinimumCleanupAge: time.Hour})
	done := make(chan error, 1)
	go func() {
		_, err := m.Ensure(context.Background(), "old:1", nil)
		done <- err
	}()
	waitFor(t, "the pull", func() bool { return rt.pullCount("old:1") == 1 })
	if n, err := m.Cleanup(context.Background()); n != 0 || err != nil {
		t.Errorf("Cleanup during Ensure = %d, %v", n, err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !rt.has("old:1") {
		t.Error("image deleted while being ensured")
	}
}

func TestRunOnIntervalAndDiskPressure(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"interval", Options{CleanupInterval: 20 * time.Millisecond}},
		{"pressure", Options{CleanupInterval: time.Hour, DiskPaths: []string{"/data"}, PressureCheckInterval: 10 * time.Millisecond,
			FreeFraction: func(string) (float64, error) { return 0.05, nil }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, db := newFake(), openState(t)
			seed(t, rt, db, time.Now(), "old:1", "sha256:old", 2*time.Hour)
			tc.opts.MinimumCleanupAge = time.Hour
			m := New(rt, db, tc.opts)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			waitFor(t, "the old image to be deleted", func() bool { return !rt.has("old:1") })
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

func TestDiskPressureThreshold(t *testing.T) {
	free := map[string]float64{"/a": 0.5, "/b": 0.09}
	m := New(newFake(), nil, Options{DiskPaths: []string{"/a"}, FreeFraction: func(p string) (float64, error) { return free[p], nil }})
	if _, _, ok := m.underPressure(); ok {
		t.Error("50% free is not pressure")
	}
	m.opts.DiskPaths = []string{"/a", "/b"}
	if p, _, ok := m.underPressure(); !ok || p != "/b" {
		t.Errorf("9%% free on /b: %q %v", p, ok)
	}
	if f, err := statfsFree(t.TempDir()); err != nil || f <= 0 || f > 1 {
		t.Errorf("statfs: %v %v", f, err)
	}
}

func TestRunDisabled(t *testing.T) {
	m := New(newFake(), nil, Options{DisableCleanup: true})
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFromConfig(t *testing.T) {
	env := map[string]string{
		"CAPSTAN_ENDPOINT": "http://x:1", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
		"ECS_IMAGE_PULL_BEHAVIOR": "once", "ECS_NUM_IMAGES_DELETE_PER_CYCLE": "7", "ECS_DATADIR": "/d",
		"ECS_ENGINE_AUTH_TYPE": "docker", "ECS_ENGINE_AUTH_DATA": `{"r.example":{"username":"u","password":"p"}}`,
	}
	c, err := config.Load(nil, func(k string) string { return env[k] }, "")
	if err != nil {
		t.Fatal(err)
	}
	o := FromConfig(c)
	if o.Behavior != config.PullOnce || o.DeletePerCycle != 7 || o.CleanupInterval != 30*time.Minute ||
		o.MinimumCleanupAge != time.Hour || !slices.Equal(o.DiskPaths, []string{"/d"}) || o.Auth["r.example"].Password != "p" {
		t.Errorf("FromConfig = %+v", o)
	}
}

// The task engine's ImageEnsurer, as internal/agent/engine declares it.
var _ interface {
	Ensure(ctx context.Context, image string, auth *runtime.RegistryAuth) (runtime.Image, error)
} = (*Manager)(nil)

var _ Store = (*state.DB)(nil)
