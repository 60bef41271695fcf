package gateway

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
)

// The gateway reuses a message's buffer once it is handled: what decode
// makes of a message must not share its bytes.
func TestDecodedMessageOwnsItsBytes(t *testing.T) {
	m := protocol.Message{Type: protocol.TypeStateChange, StateChange: &protocol.StateChange{ID: 7, Tasks: []protocol.TaskState{{
		Arn: "arn:aws:ecs:us-east-1:123456789012:task/c/0123456789abcdef", LastStatus: "STOPPED", HealthStatus: "UNHEALTHY",
		StartedAt: time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC), StopCode: "EssentialContainerExited", StoppedReason: "exit \"1\" \u00e9",
		Containers: []protocol.ContainerState{{Name: "web", RuntimeID: "sim-1", LastStatus: "STOPPED", Reason: "crashed"}},
	}}}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'x'
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("decoded message changed with its buffer:\n got %+v\nwant %+v", got.StateChange.Tasks, m.StateChange.Tasks)
	}
}
