package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/docker"
)

// TestLabel is the label key UniqueLabels sets; its value is unique to one
// test, so a test finds (and cleans up) only its own containers.
const TestLabel = "capstan.test"

// RequireDocker returns a runtime for the local engine, closed at cleanup.
// Without a reachable engine the test fails when CI is set (CI must never
// pass by skipping) and is skipped otherwise.
func RequireDocker(t testing.TB) *docker.Runtime {
	t.Helper()
	rt, err := docker.New(docker.Options{})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = rt.Ping(ctx)
		cancel()
		if err != nil {
			rt.Close()
		}
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Docker Engine is required in CI: %v", err)
		}
		t.Skipf("Docker Engine not reachable, skipping (set DOCKER_HOST or start dockerd): %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// UniqueLabels returns labels unique to this test; at cleanup every
// container carrying them is removed, whatever its state.
func UniqueLabels(t testing.TB, rt *docker.Runtime) map[string]string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	labels := map[string]string{TestLabel: t.Name() + "-" + hex.EncodeToString(b)}
	t.Cleanup(func() { RemoveLabeled(t, rt, labels) })
	return labels
}

// RemoveLabeled force-removes every container carrying all labels.
func RemoveLabeled(t testing.TB, rt *docker.Runtime, labels map[string]string) {
	t.Helper()
	// Not the test's context: cleanup runs after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := rt.List(ctx, labels)
	if err != nil {
		t.Errorf("cleanup: list test containers: %v", err)
		return
	}
	for _, c := range cs {
		if err := rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("cleanup: %v", err)
		}
	}
}
