package control

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// waitingTasks records n tasks of req's task definition and group that
// wait for an instance of capacity provider "cp".
func waitingTasks(t *testing.T, s *Service, st *store.Store, req taskRequest, from, n int) []*store.Task {
	t.Helper()
	var out []*store.Task
	tx := st.Txn()
	for i := from; i < from+n; i++ {
		tk := store.Task{ID: fmt.Sprintf("w%03d", i), Cluster: "c"}
		tk.TaskArn, tk.TaskDefinitionArn, tk.Group = s.arns.task("c", tk.ID), req.taskDefinition, req.group
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
		ci.ContainerInstanceArn = s.arns.containerInstance("c", id)
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
	ci.ContainerInstanceArn, ci.AccessKeyID = s.arns.containerInstance("c", "i1"), cred.AccessKeyID
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
	ci.RemainingResources = resources{cpu: 1024, memory: 1000}.shapes()
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

// ListTasks filtered by container instance lists, page by page in ID
// order, exactly the instance's tasks that pass the other filters, as the
// scan of every task did.
func TestListTasksOfAnInstance(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s, _ := startFixture(t, st, 0, 300, 0)
	tx := st.Txn()
	var want []string
	for i := range 30 {
		tk := store.Task{ID: fmt.Sprintf("t%03d", (i*7)%30), Cluster: "c", InstanceID: fmt.Sprintf("%032d", i%3)}
		tk.TaskArn, tk.Group, tk.StartedBy = s.arns.task("c", tk.ID), "family:web", "me"
		tk.DesiredStatus, tk.LastStatus = "RUNNING", "RUNNING"
		if i%5 == 0 {
			tk.DesiredStatus, tk.LastStatus = "STOPPED", "STOPPED"
		}
		if i%3 == 1 && tk.DesiredStatus == "RUNNING" {
			want = append(want, tk.TaskArn)
		}
		tx.Create(store.TaskKey("c", tk.ID), tk)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	for _, size := range []int32{1, 3, 100} {
		var got []string
		token := ""
		for pages := 0; ; pages++ {
			out, err := s.ListTasks(ctx, &shapes.ListTasksRequest{Cluster: "c", ContainerInstance: fmt.Sprintf("%032d", 1), MaxResults: &size, NextToken: token})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.TaskArns) > int(size) || pages > 30 {
				t.Fatalf("page of %d with maxResults %d (page %d)", len(out.TaskArns), size, pages)
			}
			got = append(got, out.TaskArns...)
			if token = out.NextToken; token == "" {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("maxResults %d: listed %v, want %v", size, got, want)
		}
	}
	out, err := s.ListTasks(ctx, &shapes.ListTasksRequest{Cluster: "c", ContainerInstance: fmt.Sprintf("%032d", 1), DesiredStatus: "STOPPED"})
	if err != nil || len(out.TaskArns) != 2 {
		t.Fatalf("stopped tasks of i1: %v, %v", out, err)
	}
}

// TestListTasksByViewAgreesWithTheRecords lists with every filter the
// fleet view answers, in pages of several sizes, and checks each listing
// against the filter applied to the records themselves.
func TestListTasksByViewAgreesWithTheRecords(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s, _ := startFixture(t, st, 0, 300, 0)
	tx := st.Txn()
	var all []store.Task
	for i := range 60 {
		tk := store.Task{ID: fmt.Sprintf("t%03d", (i*37)%60), Cluster: "c", InstanceID: fmt.Sprintf("%032d", i%4)}
		tk.TaskArn, tk.StartedBy = s.arns.task("c", tk.ID), []string{"", "me", "you"}[i%3]
		tk.Group = []string{"service:web", "daemon:agent", "family:batch"}[i%3]
		tk.DesiredStatus, tk.LastStatus = "RUNNING", "RUNNING"
		switch i % 5 {
		case 0:
			tk.DesiredStatus, tk.LastStatus = "STOPPED", "STOPPED"
		case 1:
			tk.LastStatus = "PENDING"
		case 2:
			tk.DesiredStatus = "STOPPED"
		}
		tx.Create(store.TaskKey("c", tk.ID), tk)
		all = append(all, tk)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(all, func(a, b store.Task) int { return strings.Compare(a.ID, b.ID) })
	for _, req := range []shapes.ListTasksRequest{
		{}, {DesiredStatus: "STOPPED"}, {DesiredStatus: "PENDING"}, {StartedBy: "me"},
		{DaemonName: "agent"}, {DaemonName: "agent", DesiredStatus: "STOPPED"},
		{StartedBy: "you", DesiredStatus: "PENDING"}, {StartedBy: "nobody"},
	} {
		var want []string
		for _, tk := range all {
			desired := cmp.Or(req.DesiredStatus, "RUNNING")
			switch {
			case req.StartedBy != "" && tk.StartedBy != req.StartedBy,
				req.DaemonName != "" && tk.Group != "daemon:"+req.DaemonName,
				!desiredMatches(desired, tk):
				continue
			}
			want = append(want, tk.TaskArn)
		}
		if len(want) == 0 && req.StartedBy != "nobody" {
			t.Fatalf("%+v: the fixture lists nothing", req)
		}
		for _, size := range []int32{1, 7, 100} {
			got := listAll(t, size, func(size *int32, token string) ([]string, string, error) {
				r := req
				r.Cluster, r.MaxResults, r.NextToken = "c", size, token
				out, err := s.ListTasks(ctx, &r)
				if err != nil {
					return nil, "", err
				}
				return out.TaskArns, out.NextToken, nil
			})
			if !slices.Equal(got, want) {
				t.Fatalf("%+v, maxResults %d: listed %v, want %v", req, size, got, want)
			}
		}
	}
}

// BenchmarkListTasksOfAnInstance lists one instance's 6 tasks among
// 30,000: found in the fleet view and read (instance), matched in the view
// without reading (startedBy, the same 6 tasks), and, as a peer, by a
// filter only the scan of every record can apply (family, the same 6).
func BenchmarkListTasksOfAnInstance(b *testing.B) {
	ctx := context.Background()
	const tasks, instances = 30000, 5000
	s := benchTasks(b, tasks, func(s *Service, i int) store.Task {
		tk := store.Task{ID: fmt.Sprintf("%032x", i), Cluster: "c", InstanceID: fmt.Sprintf("%032d", i%instances)}
		tk.TaskArn, tk.Group, tk.StartedBy = s.arns.task("c", tk.ID), "service:web", fmt.Sprintf("by-%d", i%instances)
		tk.TaskDefinitionArn = s.arns.taskDefinition(fmt.Sprintf("f%d", i%instances), 1)
		tk.DesiredStatus, tk.LastStatus = "RUNNING", "RUNNING"
		return tk
	})
	for _, c := range []struct {
		name string
		req  shapes.ListTasksRequest
	}{
		{"instance", shapes.ListTasksRequest{Cluster: "c", ContainerInstance: fmt.Sprintf("%032d", 42)}},
		{"view", shapes.ListTasksRequest{Cluster: "c", StartedBy: "by-42"}},
		{"scan", shapes.ListTasksRequest{Cluster: "c", Family: "f42"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				out, err := s.ListTasks(ctx, &c.req)
				if err != nil || len(out.TaskArns) != tasks/instances {
					b.Fatalf("%d tasks, %v", len(out.TaskArns), err)
				}
			}
		})
	}
}

// BenchmarkListTasksPage lists the first page of running tasks of a
// cluster where as many stopped ones lie between them (as after a daemon
// rollout): matched in the fleet view and, as a peer, by a filter only the
// scan of every record can apply (family, which every task shares).
func BenchmarkListTasksPage(b *testing.B) {
	ctx := context.Background()
	s := benchTasks(b, 30000, func(s *Service, i int) store.Task {
		tk := store.Task{ID: fmt.Sprintf("%032x", i), Cluster: "c", InstanceID: fmt.Sprintf("%032d", i%5000)}
		tk.TaskArn, tk.Group = s.arns.task("c", tk.ID), "daemon:agent"
		tk.TaskDefinitionArn = s.arns.taskDefinition("agent", 1+i%2)
		tk.DesiredStatus, tk.LastStatus = "RUNNING", "RUNNING"
		if i%2 == 0 {
			tk.DesiredStatus, tk.LastStatus = "STOPPED", "STOPPED"
		}
		return tk
	})
	for _, c := range []struct {
		name string
		req  shapes.ListTasksRequest
	}{
		{"view", shapes.ListTasksRequest{Cluster: "c"}},
		{"scan", shapes.ListTasksRequest{Cluster: "c", Family: "agent"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				out, err := s.ListTasks(ctx, &c.req)
				if err != nil || len(out.TaskArns) != 100 {
					b.Fatalf("%d tasks, %v", len(out.TaskArns), err)
				}
			}
		})
	}
}

// benchTasks records n tasks made by task in a fixture of its own.
func benchTasks(b *testing.B, n int, task func(*Service, int) store.Task) *Service {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	s, _ := startFixture(b, st, 0, 300, 0)
	for from := 0; from < n; from += 500 {
		tx := st.Txn()
		for i := from; i < min(from+500, n); i++ {
			tk := task(s, i)
			tx.Create(store.TaskKey("c", tk.ID), tk)
		}
		if _, err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return s
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

// ListContainerInstances pages from the fleet view what it paged from the
// records: every status and attribute filter, in pages of 1, 7 and 100,
// including an instance whose record changed after the first listing.
func TestListContainerInstancesByViewAgreesWithTheRecords(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s, _ := startFixture(t, st, 0, 300, 0)
	statuses := []string{"ACTIVE", "DRAINING", "ACTIVE", "INACTIVE", "REGISTERING", "ACTIVE"}
	var all []store.ContainerInstance
	write := func(ci store.ContainerInstance, create bool) {
		t.Helper()
		tx := st.Txn()
		if create {
			tx.Create(store.ContainerInstanceKey("c", ci.ID), ci)
		} else {
			it, err := store.Get[store.ContainerInstance](ctx, st, store.ContainerInstanceKey("c", ci.ID))
			if err != nil {
				t.Fatal(err)
			}
			tx.Update(it.Key, it.Rev, ci)
		}
		if _, err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		id := fmt.Sprintf("%032d", (i*17)%40)
		ci := instanceRecord(id, statuses[i%len(statuses)], 1000, 1000)
		ci.ContainerInstanceArn = s.arns.containerInstance("c", id)
		ci.Attributes = []shapes.Attribute{{Name: "zone", Value: []string{"a", "b", "c"}[i%3]}}
		if i%4 == 0 {
			ci.Attributes = append(ci.Attributes, shapes.Attribute{Name: "gpu", Value: "yes"})
		}
		write(ci, true)
		all = append(all, ci)
	}
	slices.SortFunc(all, func(a, b store.ContainerInstance) int { return strings.Compare(a.ID, b.ID) })
	check := func() {
		t.Helper()
		for _, req := range []shapes.ListContainerInstancesRequest{
			{}, {Status: "ACTIVE"}, {Status: "DRAINING"}, {Status: "INACTIVE"}, {Status: "REGISTERING"},
			{Filter: "attribute:gpu exists"}, {Filter: "attribute:zone == b"}, {Status: "ACTIVE", Filter: "attribute:zone != a"},
			{Filter: "attribute:zone == nowhere"},
		} {
			filter, err := parseInstanceFilter(req.Filter)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, ci := range all {
				if (req.Status == "" && ci.Status != "INACTIVE" || ci.Status == req.Status) && filter.match(attributeMap(ci)) {
					want = append(want, ci.ContainerInstanceArn)
				}
			}
			if len(want) == 0 && req.Filter != "attribute:zone == nowhere" {
				t.Fatalf("%+v: the fixture lists nothing", req)
			}
			for _, size := range []int32{1, 7, 100} {
				got := listAll(t, size, func(size *int32, token string) ([]string, string, error) {
					r := req
					r.Cluster, r.MaxResults, r.NextToken = "c", size, token
					out, err := s.ListContainerInstances(ctx, &r)
					if err != nil {
						return nil, "", err
					}
					return out.ContainerInstanceArns, out.NextToken, nil
				})
				if !slices.Equal(got, want) {
					t.Fatalf("%+v, maxResults %d: listed %v, want %v", req, size, got, want)
				}
			}
		}
	}
	check()
	// The view follows changes: drain some, take an attribute from others.
	for i := range all {
		switch i % 5 {
		case 0:
			all[i].Status = "DRAINING"
		case 1:
			all[i].Attributes = all[i].Attributes[:1]
		default:
			continue
		}
		write(all[i], false)
	}
	check()
}

// listAll pages through a list operation with maxResults size, checking
// that no page is larger than asked (and that paging ends).
func listAll(t *testing.T, size int32, page func(size *int32, token string) ([]string, string, error)) []string {
	t.Helper()
	var all []string
	token := ""
	for pages := 0; ; pages++ {
		got, next, err := page(&size, token)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > int(size) || pages > 100 {
			t.Fatalf("page of %d with maxResults %d (page %d)", len(got), size, pages)
		}
		all = append(all, got...)
		if token = next; token == "" {
			return all
		}
	}
}
