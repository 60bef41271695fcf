package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/testenv"
)

// A live session's key deleted by someone else (another session of the
// agent's that ended late, deleting the key it had written last) is
// written again: the agent stays connected and is not counted silent.
func TestSessionKeyKeptWhileTheSessionLives(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	a, arn := registerAgent(t, srv, "kept")
	a.must(protocol.TypeManifest, 10*time.Second)
	id := arn[strings.LastIndex(arn, "/")+1:]
	key := store.SessionKey("kept", id)
	first, err := store.Get[store.Session](ctx, srv.Store, key)
	if err != nil {
		t.Fatalf("the open session's key: %v", err)
	}

	// What the late session's end does: delete the key at its revision.
	if _, err := srv.Store.Txn().Delete(key, first.Rev).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		it, err := store.Get[store.Session](ctx, srv.Store, key)
		if err == nil {
			if it.Rev <= first.Rev || it.Value.Server != first.Value.Server {
				t.Fatalf("key after the delete: %+v at %d; want this server's, written after %d", it.Value, it.Rev, first.Rev)
			}
			break
		}
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the live session's deleted key was not written again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	d, err := srv.ECS().DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("kept"), ContainerInstances: []string{arn}})
	if err != nil || len(d.ContainerInstances) != 1 || !d.ContainerInstances[0].AgentConnected {
		t.Fatalf("instance after its key was written again: %+v, %v; want agentConnected", d, err)
	}
	// The session still works, over the same connection.
	a.send(protocol.Message{Type: "nonsense"})
	a.must(protocol.TypeError, 5*time.Second)
}
