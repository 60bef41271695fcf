package local_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/provision/local"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/testenv"
)

// Terminating an instance removes its containers, and again one that a
// killed agent's late create leaves after it.
func TestTerminateRemovesLateContainers(t *testing.T) {
	rt := testenv.RequireDocker(t)
	img := testenv.BusyboxImage(t)
	ctx := context.Background()
	p, err := local.New("/bin/true", t.TempDir(), rt, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// An instance that registered (its state names its ARN) and whose agent
	// is gone.
	arn := fmt.Sprintf("arn:aws:ecs:us-east-1:123456789012:container-instance/sweep/%d", time.Now().UnixNano())
	data := filepath.Join(p.Dir, "i-1", "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := state.Open(filepath.Join(data, state.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetInstanceARN(arn); err != nil {
		t.Fatal(err)
	}
	db.Close()
	labels := map[string]string{"com.capstan.instance": arn}
	t.Cleanup(func() {
		cs, _ := rt.List(context.Background(), labels)
		for _, c := range cs {
			rt.Remove(context.Background(), c.ID)
		}
	})
	left := func() int {
		cs, err := rt.List(ctx, labels)
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}
	create := func() {
		if _, err := rt.Create(ctx, runtime.ContainerSpec{Image: img, Cmd: []string{"sleep", "60"}, Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	create()
	if err := p.Terminate(ctx, "i-1"); err != nil {
		t.Fatal(err)
	}
	if n := left(); n != 0 {
		t.Fatalf("%d containers left after Terminate", n)
	}
	create() // a create the dead agent sent, finishing now
	deadline := time.Now().Add(30 * time.Second)
	for left() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a container created after Terminate was never removed")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
