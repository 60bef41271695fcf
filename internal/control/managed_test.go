package control

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/internal/store"
)

// Waiting passes over tasks on their bytes: the pattern must be how a task
// without an instance is stored, and never match one with an instance.
func TestNoInstancePatternMatchesStoredTasks(t *testing.T) {
	w := store.Task{ID: "t1"}
	w.CapacityProviderName = "cp"
	waiting, _ := json.Marshal(w)
	placed, _ := json.Marshal(store.Task{ID: "t2", InstanceID: "i-1"})
	if !bytes.Contains(waiting, noInstance) {
		t.Fatalf("a task without an instance is stored as %s", waiting)
	}
	if bytes.Contains(placed, noInstance) {
		t.Fatalf("a placed task matches: %s", placed)
	}
}
