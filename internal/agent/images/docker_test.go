package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/testenv"
)

func unique() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// untagAtCleanup drops a tag the test's pull added, leaving the image
// (shared with other tests) in place.
func untagAtCleanup(t *testing.T, rt *docker.Runtime, ref string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt.Client().ImageRemove(ctx, ref, client.ImageRemoveOptions{})
	})
}

// importImage creates a small image of its own (a unique file, so a unique
// ID) under ref, removed at cleanup.
func importImage(t *testing.T, rt *docker.Runtime, ref string) runtime.Image {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := []byte(ref + " " + unique())
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "id", Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(0, 0)})
	tw.Write(body)
	tw.Close()
	res, err := rt.Client().ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{`CMD ["/id"]`}})
	if err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
	io.Copy(io.Discard, res)
	res.Close()
	img, err := rt.Image(ctx, ref)
	if err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt.Client().ImageRemove(ctx, img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	return img
}

func TestDockerPull(t *testing.T) {
	rt := testenv.RequireDocker(t)
	ctx := context.Background()
	bb := testenv.BusyboxImage(t)
	want, err := rt.Image(ctx, bb)
	if err != nil {
		t.Fatal(err)
	}
	reg := testenv.StartRegistry(t, "", "")
	ref := reg + "/capstan-test/images-pull:" + unique()
	testenv.PushImage(t, rt, bb, ref)
	untagAtCleanup(t, rt, ref)
	if _, err := rt.Image(ctx, ref); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("%s must not be local before the pull: %v", ref, err)
	}

	db := openState(t)
	m := New(rt, db, Options{})
	img, err := m.Ensure(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.ID != want.ID {
		t.Errorf("pulled %s, want %s", img.ID, want.ID)
	}
	rec, ok, _ := db.Image(ref)
	if !ok || rec.ID != want.ID || rec.PulledAt.IsZero() {
		t.Errorf("pull not recorded: %+v", rec)
	}
	if mt := m.Metrics(); mt.PullsOK != 1 || mt.PullsFailed != 0 {
		t.Errorf("metrics %+v", mt)
	}
}

func TestDockerPullWithAuth(t *testing.T) {
	rt := testenv.RequireDocker(t)
	ctx := context.Background()
	bb := testenv.BusyboxImage(t)
	reg := testenv.StartRegistry(t, "alice", "wonderland")
	ref := reg + "/capstan-test/images-auth:" + unique()
	testenv.PushImage(t, rt, bb, ref)
	untagAtCleanup(t, rt, ref)

	_, err := New(rt, openState(t), Options{}).Ensure(ctx, ref, nil)
	if err == nil {
		t.Fatal("pull without credentials succeeded")
	}
	if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "auth") {
		t.Errorf("error should say authentication failed: %v", err)
	}
	t.Logf("without credentials: %v", err)

	wrong := &runtime.RegistryAuth{Username: "alice", Password: "nope", ServerAddress: reg}
	if _, err := New(rt, openState(t), Options{}).Ensure(ctx, ref, wrong); err == nil {
		t.Error("pull with a wrong password succeeded")
	}

	// Credentials from ECS_ENGINE_AUTH_DATA, picked by registry host.
	env := map[string]string{
		"CAPSTAN_ENDPOINT": "http://x:1", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
		"ECS_ENGINE_AUTH_TYPE": "docker",
		"ECS_ENGINE_AUTH_DATA": `{"http://` + reg + `/v2/":{"username":"alice","password":"wonderland","email":"a@example.com"}}`,
	}
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, "")
	if err != nil {
		t.Fatal(err)
	}
	opts := FromConfig(cfg)
	opts.Behavior = config.PullAlways // no falling back on the cached copy
	m := New(rt, openState(t), opts)
	if _, err := m.Ensure(ctx, ref, nil); err != nil {
		t.Fatalf("pull with configured credentials: %v", err)
	}
	// An explicit credential (the task's) wins over the configured one.
	if _, err := m.Ensure(ctx, ref, wrong); err == nil {
		t.Error("explicit wrong credential was ignored")
	}
}

func TestDockerPullFailureSaysWhy(t *testing.T) {
	rt := testenv.RequireDocker(t)
	reg := testenv.StartRegistry(t, "", "")
	ref := reg + "/capstan-test/images-missing:" + unique()
	m := New(rt, openState(t), Options{Behavior: config.PullAlways})
	_, err := m.Ensure(context.Background(), ref, nil)
	if err == nil {
		t.Fatal("pull of a missing image succeeded")
	}
	msg := strings.ToLower(err.Error())
	if !strings.Contains(msg, ref) || !(strings.Contains(msg, "not found") || strings.Contains(msg, "manifest unknown")) {
		t.Errorf("error should name the image and say it is not found: %v", err)
	}
	if mt := m.Metrics(); mt.PullsFailed != 1 {
		t.Errorf("metrics %+v", mt)
	}
}

func TestDockerRegistryDown(t *testing.T) {
	rt := testenv.RequireDocker(t)
	ctx := context.Background()
	bb := testenv.BusyboxImage(t)
	var ref string
	db := openState(t)
	t.Run("pull while the registry is up", func(t *testing.T) {
		reg := testenv.StartRegistry(t, "", "") // stops when this subtest ends
		ref = reg + "/capstan-test/images-down:" + unique()
		testenv.PushImage(t, rt, bb, ref)
		if _, err := New(rt, db, Options{}).Ensure(ctx, ref, nil); err != nil {
			t.Fatal(err)
		}
	})
	untagAtCleanup(t, rt, ref)

	// default: the pull fails, the cached image does the job.
	m := New(rt, db, Options{Behavior: config.PullDefault})
	if _, err := m.Ensure(ctx, ref, nil); err != nil {
		t.Errorf("default with a cached image: %v", err)
	}
	if mt := m.Metrics(); mt.PullsFailed != 1 || mt.CacheHits != 1 {
		t.Errorf("default metrics %+v", mt)
	}
	// always: the pull failure is the answer.
	if _, err := New(rt, db, Options{Behavior: config.PullAlways}).Ensure(ctx, ref, nil); err == nil {
		t.Error("always succeeded with the registry down")
	} else {
		t.Logf("always: %v", err)
	}
	// prefer-cached and once (pulled before) never ask the registry.
	for _, b := range []config.PullBehavior{config.PullPreferCached, config.PullOnce} {
		m := New(rt, db, Options{Behavior: b})
		if _, err := m.Ensure(ctx, ref, nil); err != nil {
			t.Errorf("%s: %v", b, err)
		}
		if mt := m.Metrics(); mt.PullsOK+mt.PullsFailed != 0 || mt.CacheHits != 1 {
			t.Errorf("%s pulled: %+v", b, mt)
		}
	}
	// once without a record of a pull must pull, and fails.
	if _, err := New(rt, openState(t), Options{Behavior: config.PullOnce}).Ensure(ctx, ref, nil); err == nil {
		t.Error("once without a recorded pull did not try the registry")
	}
}

func TestDockerCleanup(t *testing.T) {
	rt := testenv.RequireDocker(t)
	ctx := context.Background()
	id := unique()
	unused := importImage(t, rt, "capstan-test/images-unused:"+id)
	used := importImage(t, rt, "capstan-test/images-used:"+id)
	young := importImage(t, rt, "capstan-test/images-young:"+id)
	labels := testenv.UniqueLabels(t, rt) // its container goes before the images
	if _, err := rt.Create(ctx, runtime.ContainerSpec{Image: used.RepoTags[0], Cmd: []string{"/id"}, Labels: labels}); err != nil {
		t.Fatal(err)
	}

	db := openState(t)
	now := time.Now()
	for _, img := range []runtime.Image{unused, used} {
		if err := db.ImagePulled(img.RepoTags[0], img.ID, now.Add(-2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.ImagePulled(young.RepoTags[0], young.ID, now); err != nil {
		t.Fatal(err)
	}
	m := New(rt, db, Options{CleanupInterval: 50 * time.Millisecond, MinimumCleanupAge: time.Hour, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	waitFor(t, "the unused image to be deleted", func() bool { return m.Metrics().ImagesDeleted == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Image(ctx, unused.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("the unused image is still there: %v", err)
	}
	for _, img := range []runtime.Image{used, young} {
		if _, err := rt.Image(ctx, img.ID); err != nil {
			t.Errorf("%s should be kept: %v", img.RepoTags[0], err)
		}
	}
	if _, ok, _ := db.Image(unused.RepoTags[0]); ok {
		t.Error("the deleted image is still recorded")
	}
	if mt := m.Metrics(); mt.ImagesDeleted != 1 || mt.DeleteFailed != 0 {
		t.Errorf("metrics %+v", mt)
	}
}
