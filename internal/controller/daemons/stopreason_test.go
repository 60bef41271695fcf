package daemons

import (
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

// TestStopReason: a container's reason is added to the task's only when it
// says something the task's does not; the agent gives a container that
// fails its task the same reason as the task.
func TestStopReason(t *testing.T) {
	pull := "CannotPullContainerError: pull access denied for nope"
	task := func(reason string, cs ...shapes.Container) store.Task {
		return store.Task{Task: shapes.Task{StoppedReason: reason, Containers: cs}}
	}
	for _, c := range []struct {
		task store.Task
		want string
	}{
		{task(pull, shapes.Container{Name: "telemetry", Reason: pull}), pull},
		{task(pull, shapes.Container{Name: "telemetry", Reason: pull}, shapes.Container{Name: "sidecar"}), pull},
		{task("Essential container in task exited", shapes.Container{Name: "app", Reason: "OutOfMemoryError: container killed"}),
			"Essential container in task exited (app: OutOfMemoryError: container killed)"},
	} {
		if got := stopReason(c.task); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
