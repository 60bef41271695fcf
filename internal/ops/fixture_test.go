package ops

import (
	"context"
	"fmt"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// openStore opens a store on an embedded etcd of the test's own, closed
// when the test ends.
func openStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// newService is the operations over a fresh fleet state on st.
func newService(st *store.Store) *Service {
	return New(fleet.New(fleet.Config{Store: st, Region: "us-east-1", AccountID: "123456789012"}))
}

// keyOnly decodes nothing: reads that need keys only.
type keyOnly struct{}

func (*keyOnly) UnmarshalJSON([]byte) error { return nil }

// instanceRecord is an instance of cluster "c" in zone a with cpu and mem
// free and port 22 taken.
func instanceRecord(id, status string, cpu, mem int) store.ContainerInstance {
	ci := store.ContainerInstance{ID: id, Cluster: "c"}
	ci.Status, ci.CapacityProviderName = status, "cp"
	ci.Attributes = []shapes.Attribute{{Name: "zone", Value: "a"}}
	ci.RemainingResources = fleet.ResourceShapes(cpu, mem, "tcp/22")
	return ci
}

// startFixture is cluster "c", created through the API, with a task
// definition of memory MiB, n ACTIVE connected instances of 100,000 CPU
// units and MiB each, and a request to start count of its tasks spread by
// instance.
func startFixture(tb testing.TB, st *store.Store, n int, memory int32, count int) (*Service, fleet.TaskRequest) {
	tb.Helper()
	ctx := context.Background()
	s := newService(st)
	if _, err := s.CreateCluster(ctx, &shapes.CreateClusterRequest{ClusterName: "c"}); err != nil {
		tb.Fatal(err)
	}
	td, err := s.RegisterTaskDefinition(ctx, &shapes.RegisterTaskDefinitionRequest{Family: "web",
		ContainerDefinitions: []shapes.ContainerDefinition{{Name: "web", Image: "busybox", Memory: &memory}}})
	if err != nil {
		tb.Fatal(err)
	}
	tx := st.Txn()
	for i := range n {
		id := fmt.Sprintf("i%03d", i)
		ci := instanceRecord(id, "ACTIVE", 100000, 100000)
		ci.ContainerInstanceArn = s.ARNs.ContainerInstance("c", id)
		ci.Version = ptr(int64(1))
		tx.Create(store.ContainerInstanceKey("c", id), ci).Create(store.SessionKey("c", id), store.Session{})
		if (i+1)%300 == 0 || i == n-1 { // two operations each, within the transaction limit
			if _, err := tx.Commit(ctx); err != nil {
				tb.Fatal(err)
			}
			tx = st.Txn()
		}
	}
	rules, err := fleet.ParsePlacement([]shapes.PlacementStrategy{{Type: "spread", Field: "instanceId"}}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s, fleet.TaskRequest{Cluster: "c", TaskDefinition: td.TaskDefinition.TaskDefinitionArn,
		Group: "service:web", StartedBy: "d1", Count: count, Rules: rules}
}
