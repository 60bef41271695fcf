package ops

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

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
		tk.TaskArn, tk.Group, tk.StartedBy = s.ARNs.Task("c", tk.ID), "family:web", "me"
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
		tk.TaskArn, tk.StartedBy = s.ARNs.Task("c", tk.ID), []string{"", "me", "you"}[i%3]
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
				!fleet.DesiredMatches(desired, tk):
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
		tk.TaskArn, tk.Group, tk.StartedBy = s.ARNs.Task("c", tk.ID), "service:web", fmt.Sprintf("by-%d", i%instances)
		tk.TaskDefinitionArn = s.ARNs.TaskDefinition(fmt.Sprintf("f%d", i%instances), 1)
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
		tk.TaskArn, tk.Group = s.ARNs.Task("c", tk.ID), "daemon:agent"
		tk.TaskDefinitionArn = s.ARNs.TaskDefinition("agent", 1+i%2)
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
		ci.ContainerInstanceArn = s.ARNs.ContainerInstance("c", id)
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
			filter, err := fleet.ParseInstanceFilter(req.Filter)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, ci := range all {
				if (req.Status == "" && ci.Status != "INACTIVE" || ci.Status == req.Status) && filter.Match(fleet.AttributeMap(ci)) {
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

// DescribeContainerInstances counts each instance's tasks by status, in
// the order asked, with an unknown instance among them a failure.
func TestDescribeContainerInstancesCountsTasks(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s, req := startFixture(t, st, 0, 64, 14)
	id := func(i int) string { return fmt.Sprintf("%032d", i) }
	tx := st.Txn()
	for i := range 4 {
		ci := instanceRecord(id(i), "ACTIVE", 100000, 100000)
		ci.ContainerInstanceArn, ci.Version = s.ARNs.ContainerInstance("c", id(i)), ptr(int64(1))
		tx.Create(store.ContainerInstanceKey("c", id(i)), ci).Create(store.SessionKey("c", id(i)), store.Session{})
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tasks, failures, err := s.StartTasks(ctx, req)
	if err != nil || len(failures) != 0 || len(tasks) != 14 {
		t.Fatalf("started %d, failures %v, err %v", len(tasks), failures, err)
	}
	want := map[string][2]int{}
	for i, tk := range tasks {
		it, err := store.Get[store.Task](ctx, st, store.TaskKey("c", fleet.LastPart(tk.TaskArn)))
		if err != nil {
			t.Fatal(err)
		}
		n := want[it.Value.InstanceID]
		switch i % 3 {
		case 0:
			it.Value.LastStatus = "RUNNING"
			n[0]++
		case 1:
			it.Value.LastStatus = "STOPPED"
		default:
			n[1]++
		}
		want[it.Value.InstanceID] = n
		if _, err := st.Txn().Update(it.Key, it.Rev, it.Value).Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{id(2), id(9), id(0), id(1), id(3)}
	out, err := s.DescribeContainerInstances(ctx, &shapes.DescribeContainerInstancesRequest{Cluster: "c", ContainerInstances: ids})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Failures) != 1 || out.Failures[0].Reason != "MISSING" || !strings.HasSuffix(out.Failures[0].Arn, "/"+id(9)) {
		t.Fatalf("failures %+v", out.Failures)
	}
	var got []string
	for _, ci := range out.ContainerInstances {
		id := fleet.LastPart(ci.ContainerInstanceArn)
		got = append(got, id)
		if n := want[id]; *ci.RunningTasksCount != int32(n[0]) || *ci.PendingTasksCount != int32(n[1]) {
			t.Errorf("%s: %d running, %d pending, want %v", id, *ci.RunningTasksCount, *ci.PendingTasksCount, n)
		}
	}
	if !slices.Equal(got, []string{id(2), id(0), id(1), id(3)}) {
		t.Fatalf("described %v", got)
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
