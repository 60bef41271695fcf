package ops

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

func describeCounts(t testing.TB, s *Service, cluster string) [4]int32 {
	t.Helper()
	out, err := s.DescribeClusters(context.Background(), &shapes.DescribeClustersRequest{Clusters: []string{cluster}})
	if err != nil || len(out.Clusters) != 1 {
		t.Fatalf("describe %s: %+v, %v", cluster, out, err)
	}
	c := out.Clusters[0]
	return [4]int32{*c.RegisteredContainerInstancesCount, *c.RunningTasksCount, *c.PendingTasksCount, *c.ActiveServicesCount}
}

// DescribeClusters counts registered instances, RUNNING and not yet
// RUNNING tasks and ACTIVE services from the records, and follows them as
// they change; another cluster's records do not count.
func TestClusterCounts(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s, _ := startFixture(t, st, 0, 300, 0)
	if _, err := s.CreateCluster(ctx, &shapes.CreateClusterRequest{ClusterName: "other"}); err != nil {
		t.Fatal(err)
	}
	if got := describeCounts(t, s, "c"); got != [4]int32{} {
		t.Fatalf("empty cluster counts %v", got)
	}
	tx := st.Txn()
	for i, status := range []string{"ACTIVE", "ACTIVE", "DRAINING", "INACTIVE"} {
		id := fmt.Sprintf("i%d", i)
		tx.Create(store.ContainerInstanceKey("c", id), instanceRecord(id, status, 1024, 2048))
	}
	for i, last := range []string{"RUNNING", "RUNNING", "RUNNING", "PENDING", "PROVISIONING", "STOPPED", "DEACTIVATING"} {
		tk := store.Task{ID: fmt.Sprintf("t%d", i), Cluster: "c", InstanceID: "i0"}
		tk.Group, tk.LastStatus, tk.DesiredStatus = "service:web", last, "RUNNING"
		tx.Create(store.TaskKey("c", tk.ID), tk)
	}
	tx.Create(store.TaskKey("other", "x"), store.Task{ID: "x", Cluster: "other"})
	for name, status := range map[string]string{"web": "ACTIVE", "api": "ACTIVE", "old": "DRAINING", "gone": "INACTIVE"} {
		var v store.Service
		v.ServiceName, v.Status, v.Cluster = name, status, "c"
		tx.Create(store.ServiceKey("c", name), v)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := describeCounts(t, s, "c"), [4]int32{3, 3, 2, 2}; got != want {
		t.Fatalf("counts (instances, running, pending, services) %v, want %v", got, want)
	}

	// A pending task starts, a running one stops, an instance is
	// deregistered, a service is deleted.
	tx = st.Txn()
	for id, last := range map[string]string{"t3": "RUNNING", "t0": "STOPPED"} {
		tk := store.Task{ID: id, Cluster: "c", InstanceID: "i0"}
		tk.Group, tk.LastStatus, tk.DesiredStatus = "service:web", last, "RUNNING"
		tx.Put(store.TaskKey("c", id), tk)
	}
	tx.Put(store.ContainerInstanceKey("c", "i1"), instanceRecord("i1", "INACTIVE", 1024, 2048))
	for _, key := range []string{store.ServiceKey("c", "api"), store.TaskKey("c", "t4")} {
		it, err := store.Get[keyOnly](ctx, st, key)
		if err != nil {
			t.Fatal(err)
		}
		tx.Delete(key, it.Rev)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := describeCounts(t, s, "c"), [4]int32{2, 3, 0, 1}; got != want {
		t.Fatalf("counts after changes %v, want %v", got, want)
	}
	if got := describeCounts(t, s, "other"); got != [4]int32{} {
		t.Fatalf("other cluster counts %v", got)
	}
}

// BenchmarkDescribeClusters describes a cluster of 5,000 instances and
// 30,000 tasks (half of them RUNNING) and 50 services: the counts come
// from the fleet view's tally, so the cost does not grow with the fleet.
func BenchmarkDescribeClusters(b *testing.B) {
	ctx := context.Background()
	const instances = 5000
	s := benchTasks(b, 30000, func(s *Service, i int) store.Task {
		tk := store.Task{ID: fmt.Sprintf("%032x", i), Cluster: "c", InstanceID: fmt.Sprintf("%032d", i%instances)}
		tk.TaskArn, tk.Group = s.ARNs.Task("c", tk.ID), "daemon:agent"
		tk.DesiredStatus, tk.LastStatus = "RUNNING", "RUNNING"
		if i%2 == 0 {
			tk.DesiredStatus, tk.LastStatus = "STOPPED", "STOPPED"
		}
		return tk
	})
	st := s.Store
	for from := 0; from < instances; from += 500 {
		tx := st.Txn()
		for i := from; i < from+500; i++ {
			id := fmt.Sprintf("%032d", i)
			tx.Create(store.ContainerInstanceKey("c", id), instanceRecord(id, "ACTIVE", 1024, 2048))
		}
		if _, err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	tx := st.Txn()
	for i := range 50 {
		var v store.Service
		v.ServiceName, v.Status, v.Cluster = fmt.Sprintf("s%d", i), "ACTIVE", "c"
		tx.Create(store.ServiceKey("c", v.ServiceName), v)
	}
	if _, err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	want := [4]int32{instances, 15000, 0, 50}
	if got := describeCounts(b, s, "c"); got != want {
		b.Fatalf("counts %v, want %v", got, want)
	}
	for b.Loop() {
		describeCounts(b, s, "c")
	}
}

// UpdateDaemonIfUnchanged without the revision to check is refused,
// naming the member, before anything is read or written.
func TestUpdateDaemonIfUnchangedNeedsTheRevision(t *testing.T) {
	s := newService(openStore(t))
	_, err := s.UpdateDaemonIfUnchanged(context.Background(), &UpdateDaemonIfUnchangedRequest{
		UpdateDaemonRequest: shapes.UpdateDaemonRequest{DaemonArn: "arn:aws:ecs:us-east-1:123456789012:daemon/c/cw"}})
	if err == nil || !strings.Contains(err.Error(), "ifRevisionArn: is required") {
		t.Fatalf("got %v", err)
	}
}
