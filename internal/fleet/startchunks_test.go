package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// startFixture is cluster "c" with a task definition of memory MiB and n
// ACTIVE, connected instances of 100,000 CPU units and MiB each, and a
// request to start count of its tasks spread by instance.
func startFixture(tb testing.TB, st *store.Store, n int, memory int32, count int) (*State, TaskRequest) {
	tb.Helper()
	ctx := context.Background()
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	// The records the API would write: an ACTIVE cluster and revision 1.
	var cl store.Cluster
	cl.ClusterName, cl.ClusterArn, cl.Status = "c", s.ARNs.Cluster("c"), "ACTIVE"
	var td store.TaskDefinition
	td.TaskDefinitionArn, td.Family, td.Revision, td.Status = s.ARNs.TaskDefinition("web", 1), "web", ptr(int32(1)), "ACTIVE"
	td.ContainerDefinitions = []shapes.ContainerDefinition{{Name: "web", Image: "busybox", Memory: &memory}}
	if _, err := st.Txn().Create(store.ClusterKey("c"), cl).
		Create(store.TaskDefinitionFamilyKey("web"), store.Family{Name: "web", LastRevision: 1}).
		Create(store.TaskDefinitionKey("web", 1), td).Commit(ctx); err != nil {
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
	rules, err := ParsePlacement([]shapes.PlacementStrategy{{Type: "spread", Field: "instanceId"}}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s, TaskRequest{Cluster: "c", TaskDefinition: td.TaskDefinitionArn,
		Group: "service:web", StartedBy: "d1", Count: count, Rules: rules}
}

// A start bigger than a transaction commits chunk after chunk, the next
// placed while the previous commits: every task is written once, and an
// instance placed on in several chunks ends with all of them taken off its
// resources (each chunk checks the revision the previous one wrote).
func TestStartCommitsChunksInSequence(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	const instances, count = 60, 1000 // chunks of 338, 338 and 324 on the embedded etcd
	s, req := startFixture(t, st, instances, 64, count)
	tasks, failures, err := s.StartTasks(ctx, req)
	if err != nil || len(failures) != 0 || len(tasks) != count {
		t.Fatalf("started %d, failures %v, err %v", len(tasks), failures, err)
	}
	stored, _, err := store.List[store.Task](ctx, st, store.TaskPrefix("c"), "", 0)
	if err != nil || len(stored) != count {
		t.Fatalf("%d task records, %v", len(stored), err)
	}
	per := map[string]int{}
	for _, it := range stored {
		per[it.Value.InstanceID]++
	}
	for i := range instances {
		id := fmt.Sprintf("i%03d", i)
		it, err := store.Get[store.ContainerInstance](ctx, st, store.ContainerInstanceKey("c", id))
		if err != nil {
			t.Fatal(err)
		}
		rem := readResources(it.Value.RemainingResources)
		if want := 100000 - 64*per[id]; rem.memory != want || per[id] < count/instances {
			t.Errorf("%s: %d tasks, %d MiB left, want %d", id, per[id], rem.memory, want)
		}
	}
}

// BenchmarkStartTasks places 1,000 tasks on 500 instances, with the next
// chunk placed while the previous commits and without, side by side.
func BenchmarkStartTasks(b *testing.B) {
	for _, overlap := range []bool{false, true} {
		b.Run(fmt.Sprintf("overlap=%v", overlap), func(b *testing.B) {
			defer func(v bool) { overlapChunks = v }(overlapChunks)
			overlapChunks = overlap
			st, err := store.Open(context.Background(), store.Config{DataDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			s, req := startFixture(b, st, 500, 8, 1000)
			b.ResetTimer()
			for range b.N {
				tasks, _, err := s.StartTasks(context.Background(), req)
				if err != nil || len(tasks) != 1000 {
					b.Fatalf("%d tasks, %v", len(tasks), err)
				}
			}
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// A services pass's stops that are more than one transaction holds go in
// several, each checked against the service: every task and its agent's
// entry end desired STOPPED.
func TestServiceStopsCommitInChunks(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	const count = 600 // 1,200 writes: more than the embedded member's 1,024 per transaction
	s, req := startFixture(t, st, 30, 64, count)
	tasks, failures, err := s.StartTasks(ctx, req)
	if err != nil || len(failures) != 0 || len(tasks) != count {
		t.Fatalf("started %d, failures %v, err %v", len(tasks), failures, err)
	}
	if _, err := st.Txn().Create(store.ServiceKey("c", "web"), store.Service{Service: shapes.Service{ServiceName: "web"}, Cluster: "c"}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	svc, err := store.Get[store.Service](ctx, st, store.ServiceKey("c", "web"))
	if err != nil {
		t.Fatal(err)
	}
	var items []store.Item[store.Task]
	for _, tk := range tasks {
		it, err := store.Get[store.Task](ctx, st, store.TaskKey("c", tk.TaskArn[strings.LastIndex(tk.TaskArn, "/")+1:]))
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
	}
	if err := s.StopServiceTasks(ctx, svc, items, "scale-in"); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		tk, err := store.Get[store.Task](ctx, st, it.Key)
		if err != nil {
			t.Fatal(err)
		}
		d, err := store.Get[protocol.Task](ctx, st, store.DesiredKey("c", tk.Value.InstanceID, tk.Value.ID))
		if err != nil {
			t.Fatal(err)
		}
		if tk.Value.DesiredStatus != "STOPPED" || d.Value.DesiredStatus != "STOPPED" {
			t.Fatalf("task %s desired %s, its agent's entry %s", tk.Value.ID, tk.Value.DesiredStatus, d.Value.DesiredStatus)
		}
	}
}

// Placement leaves out instances without room for the task, and still
// says why a task fits nowhere as a walk over every instance would: the
// largest free memory of all of them, not of those with room.
func TestPlacementLeavesOutFullInstances(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s, req := startFixture(t, st, 0, 64, 3)
	id := func(i int) string { return fmt.Sprintf("%032d", i) }
	tx := st.Txn()
	for i := range 10 {
		mem := 10 // full
		if i%3 == 0 {
			mem = 100 // room for one task
		}
		ci := instanceRecord(id(i), "ACTIVE", 100000, mem)
		ci.ContainerInstanceArn, ci.Version = s.ARNs.ContainerInstance("c", id(i)), ptr(int64(1))
		tx.Create(store.ContainerInstanceKey("c", id(i)), ci).Create(store.SessionKey("c", id(i)), store.Session{})
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	roomy := []string{id(0), id(3), id(6), id(9)}
	ids := func(cs []*candidate) (out []string) {
		for _, c := range cs {
			out = append(out, c.id)
		}
		slices.Sort(out)
		return out
	}
	fit, err := s.candidates(ctx, "c", req.Group, nil, need{mem: 64})
	if err != nil || !slices.Equal(ids(fit), roomy) {
		t.Fatalf("candidates with room %v, %v", ids(fit), err)
	}
	all, err := s.candidates(ctx, "c", req.Group, nil, need{})
	short, serr := s.shortOfRoom(ctx, "c", req.Group, need{mem: 64})
	if err != nil || serr != nil || len(all) != 10 || len(short) != 6 || len(fit)+len(short) != len(all) {
		t.Fatalf("%d candidates, %d short of room, %v %v", len(all), len(short), err, serr)
	}

	req.Count = 4
	tasks, failures, err := s.StartTasks(ctx, req)
	if err != nil || len(tasks) != 4 || len(failures) != 0 {
		t.Fatalf("started %d, failures %v, err %v", len(tasks), failures, err)
	}
	for _, tk := range tasks {
		if !slices.Contains(roomy, LastPart(tk.ContainerInstanceArn)) {
			t.Errorf("task placed on %s, which had no room", tk.ContainerInstanceArn)
		}
	}
	// Now every instance is full: the reason counts them all.
	req.Count = 1
	tasks, failures, err = s.StartTasks(ctx, req)
	if err != nil || len(tasks) != 0 || len(failures) != 1 {
		t.Fatalf("started %d, failures %v, err %v", len(tasks), failures, err)
	}
	// ECS's code as the reason, what was short as the detail.
	if want := "RESOURCE:MEMORY (needs 64 MiB, largest free is 36 MiB)"; failures[0].Reason != "RESOURCE:MEMORY" || failures[0].Detail != want {
		t.Fatalf("reason %q detail %q, want RESOURCE:MEMORY and %q", failures[0].Reason, failures[0].Detail, want)
	}
	// A spread over an attribute counts every instance's tasks: nothing is
	// left out.
	if r, _ := ParsePlacement([]shapes.PlacementStrategy{{Type: "spread", Field: "attribute:zone"}}, nil); r.narrowsByRoom() {
		t.Fatal("a spread over an attribute narrows by room")
	}
	if !req.Rules.narrowsByRoom() {
		t.Fatal("a spread over instances does not narrow by room")
	}
}
