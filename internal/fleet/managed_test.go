package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// waitingTasks records n tasks of req's task definition and group that
// wait for an instance of capacity provider "cp".
func waitingTasks(t *testing.T, s *State, st *store.Store, req TaskRequest, from, n int) []*store.Task {
	t.Helper()
	var out []*store.Task
	tx := st.Txn()
	for i := from; i < from+n; i++ {
		tk := store.Task{ID: fmt.Sprintf("w%03d", i), Cluster: "c"}
		tk.TaskArn, tk.TaskDefinitionArn, tk.Group = s.ARNs.Task("c", tk.ID), req.TaskDefinition, req.Group
		tk.CapacityProviderName, tk.DesiredStatus, tk.LastStatus, tk.Version = "cp", "RUNNING", "PROVISIONING", ptr(int64(1))
		tx.Create(store.TaskKey("c", tk.ID), tk)
		out = append(out, &tk)
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	return out
}

// Waiting tasks are placed in bulk as one by one: spread over the
// instances with room, each instance's resources reduced by exactly its
// tasks, each task's manifest entry written; tasks without room stay
// waiting and are not named as fitting.
func TestPlaceWaitingTasksInBulk(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	const instances = 10
	s, req := startFixture(t, st, 0, 300, 0)
	tx := st.Txn()
	for i := range instances {
		id := fmt.Sprintf("i%03d", i)
		ci := instanceRecord(id, "ACTIVE", 4096, 1000) // three tasks of 300 MiB each
		ci.ContainerInstanceArn = s.ARNs.ContainerInstance("c", id)
		ci.Version = ptr(int64(1))
		tx.Create(store.ContainerInstanceKey("c", id), ci).Create(store.SessionKey("c", id), store.Session{})
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(placed int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			per, placedNow := map[string]int{}, 0
			stored, _, err := store.List[store.Task](ctx, st, store.TaskPrefix("c"), "", 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range stored {
				if id := it.Value.InstanceID; id != "" {
					per[id]++
					placedNow++
					if _, err := store.Get[protocol.Task](ctx, st, store.DesiredKey("c", id, it.Value.ID)); err != nil {
						t.Fatalf("task %s on %s has no manifest entry: %v", it.Value.ID, id, err)
					}
				}
			}
			if placedNow == placed {
				lo, hi := placed, 0
				for i := range instances {
					id := fmt.Sprintf("i%03d", i)
					it, err := store.Get[store.ContainerInstance](ctx, st, store.ContainerInstanceKey("c", id))
					if err != nil {
						t.Fatal(err)
					}
					if rem := readResources(it.Value.RemainingResources); rem.memory != 1000-300*per[id] || rem.memory < 0 {
						t.Fatalf("%s: %d tasks, %d MiB left", id, per[id], rem.memory)
					}
					lo, hi = min(lo, per[id]), max(hi, per[id])
				}
				if hi-lo > 1 {
					t.Fatalf("tasks per instance from %d to %d, want spread: %v", lo, hi, per)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d tasks placed, want %d", placedNow, placed)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	first := waitingTasks(t, s, st, req, 0, 25)
	fits, retry, err := s.PlaceWaitingTasks(ctx, "c", first)
	if err != nil || retry || len(fits) != 25 {
		t.Fatalf("first 25: %d fit, retry %v, err %v", len(fits), retry, err)
	}
	check(25)

	// Room for 5 more; the fleet view must show the first writes.
	more := waitingTasks(t, s, st, req, 25, 10)
	deadline := time.Now().Add(10 * time.Second)
	for {
		fits, retry, err = s.PlaceWaitingTasks(ctx, "c", more)
		if err != nil {
			t.Fatal(err)
		}
		if !retry || time.Now().After(deadline) {
			break
		}
		more = slicesWaiting(t, st, more)
		time.Sleep(20 * time.Millisecond)
	}
	if len(fits) > 5 {
		t.Fatalf("%d of 10 more tasks fit where 5 have room", len(fits))
	}
	check(25 + len(fits))
	if len(fits) != 5 {
		t.Fatalf("%d of 10 more tasks placed, want the 5 that have room", len(fits))
	}
}

// slicesWaiting rereads tasks, keeping those still waiting.
func slicesWaiting(t *testing.T, st *store.Store, tasks []*store.Task) []*store.Task {
	t.Helper()
	var out []*store.Task
	for _, tk := range tasks {
		it, err := store.Get[store.Task](context.Background(), st, store.TaskKey("c", tk.ID))
		if err != nil {
			t.Fatal(err)
		}
		if it.Value.InstanceID == "" {
			out = append(out, &it.Value)
		}
	}
	return out
}

// RegisteredAs answers from the fleet view what InstanceOf reads from the
// records, through a managed instance's life: launched, registered, its
// resources used, deregistered, forgotten.
func TestRegisteredAsAgreesWithTheRecords(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	m, cred, err := s.NewManagedInstance(ctx, ManagedInstance{ID: "m1", Cluster: "c", CapacityProvider: "cp", CPU: 2048, MemoryMiB: 4096})
	if err != nil {
		t.Fatal(err)
	}
	agree := func(step string, wantRegistered, busy bool) {
		t.Helper()
		ci, reg, err := s.InstanceOf(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		b, breg, err := s.RegisteredAs(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if reg != wantRegistered || breg != reg {
			t.Fatalf("%s: registered: records %v, fleet %v, want %v", step, reg, breg, wantRegistered)
		}
		if !reg {
			return
		}
		cpu, mem := readResources(ci.RemainingResources).cpu, readResources(ci.RemainingResources).memory
		want := InstanceBrief{Cluster: "c", ID: ci.ID, Arn: ci.ContainerInstanceArn, Status: ci.Status, CapacityProvider: ci.CapacityProviderName,
			Managed: true, RegisteredAt: ci.RegisteredAt.Time, CPU: cpu, Memory: mem, Connected: s.Connected(ctx, "c", ci.ID), Busy: busy}
		sum, found, err := s.InstanceSummary(ctx, "c", ci.ID)
		if err != nil || !found || sum != b {
			t.Fatalf("%s: summary %+v (found %v, %v), registration %+v", step, sum, found, err, b)
		}
		if !b.RegisteredAt.Equal(want.RegisteredAt) {
			t.Fatalf("%s: registeredAt %v, records say %v", step, b.RegisteredAt, want.RegisteredAt)
		}
		b.RegisteredAt = want.RegisteredAt
		if b != want {
			t.Fatalf("%s: fleet says %+v, records %+v", step, b, want)
		}
	}
	agree("launched", false, false)

	ci := instanceRecord("i1", "REGISTERING", 2048, 4096)
	ci.ContainerInstanceArn, ci.AccessKeyID = s.ARNs.ContainerInstance("c", "i1"), cred.AccessKeyID
	ci.RegisteredAt = shapes.At(time.Now().Truncate(time.Millisecond))
	cred.InstanceID = "i1"
	credKey := store.CredentialKey(cred.AccessKeyID)
	c, err := store.Get[store.AgentCredential](ctx, st, credKey)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := st.Txn().Update(credKey, c.Rev, cred).Create(store.ContainerInstanceKey("c", "i1"), ci).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agree("registering", true, false)

	ci.Status = "ACTIVE"
	ci.RemainingResources = resources{cpu: 1024, memory: 1000}.Shapes()
	app := store.Task{ID: "t1", Cluster: "c", InstanceID: "i1"}
	app.Group, app.LastStatus, app.DesiredStatus = "service:web", "RUNNING", "RUNNING"
	daemon := store.Task{ID: "t2", Cluster: "c", InstanceID: "i1"}
	daemon.Group, daemon.LastStatus, daemon.DesiredStatus = "daemon:agent", "RUNNING", "RUNNING"
	if rev, err = st.Txn().Update(store.ContainerInstanceKey("c", "i1"), rev, ci).Create(store.SessionKey("c", "i1"), store.Session{}).
		Create(store.TaskKey("c", "t2"), daemon).Create(store.DesiredKey("c", "i1", "t2"), map[string]string{}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	agree("active with its daemon and a session", true, false)
	if _, err = st.Txn().Create(store.TaskKey("c", "t1"), app).Create(store.DesiredKey("c", "i1", "t1"), map[string]string{}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	agree("active with an application task", true, true)

	ci.Status = "INACTIVE"
	if _, err = st.Txn().Update(store.ContainerInstanceKey("c", "i1"), rev, ci).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	agree("deregistered", true, true)

	it, err := store.Get[ManagedInstance](ctx, st, ManagedInstanceKey("c", "m1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetManagedInstance(ctx, it); err != nil {
		t.Fatal(err)
	}
	agree("forgotten", false, false)
}

// Waiting decodes a waiting task again only when it changed: a task
// rewritten while it waits is returned as it is now, one placed meanwhile
// leaves the list and the memo.
func TestWaitingRereadsChangedTasks(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s, req := startFixture(t, st, 0, 300, 0)
	waitingTasks(t, s, st, req, 0, 3)
	waitFor := func(what string, ok func([]*store.Task) bool) []*store.Task {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ws, err := s.Waiting(ctx, "c", "cp")
			if err != nil {
				t.Fatal(err)
			}
			if ok(ws) {
				return ws
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: waiting %+v", what, ws)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("three waiting", func(ws []*store.Task) bool { return len(ws) == 3 })
	for id, change := range map[string]func(*store.Task){
		"w001": func(tk *store.Task) { tk.StartedBy = "changed" },
		"w002": func(tk *store.Task) { tk.InstanceID = "i000" },
	} {
		it, err := store.Get[store.Task](ctx, st, store.TaskKey("c", id))
		if err != nil {
			t.Fatal(err)
		}
		change(&it.Value)
		if _, err := st.Txn().Update(it.Key, it.Rev, it.Value).Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ws := waitFor("w002 placed", func(ws []*store.Task) bool { return len(ws) == 2 })
	for _, tk := range ws {
		if tk.ID == "w001" && tk.StartedBy != "changed" {
			t.Fatalf("w001 as it was before its rewrite: %+v", tk)
		}
		if tk.ID != "w000" && tk.ID != "w001" {
			t.Fatalf("unexpected task %s", tk.ID)
		}
	}
	if s.waitingMemo.Holds(store.TaskKey("c", "w002")) {
		t.Fatal("a placed task stays in the memo")
	}
}
