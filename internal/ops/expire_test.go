package ops

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/servicedeploy"
	"github.com/capstanhq/capstan/internal/store"
)

// A stopped task past retention is deleted once nothing refers to it; one
// stopped lately, one running, one still in its instance's manifest and
// one a daemon placement names stay. The API and the fleet view forget
// the deleted one, and a late report of it recreates nothing.
func TestExpireStoppedTasks(t *testing.T) {
	ctx := context.Background()
	st, s := clusterC(t)
	now := time.Now()
	ids := map[string]string{}
	tx := st.Txn()
	for name, at := range map[string]time.Duration{"old": 2 * time.Hour, "recent": 10 * time.Minute, "running": 0,
		"manifested": 2 * time.Hour, "placed": 3 * time.Hour} {
		id := fleet.NewInstanceID()
		ids[name] = id
		task := store.Task{ID: id, Cluster: "c", InstanceID: "i1", Kind: protocol.KindService}
		task.TaskArn, task.Group, task.Version = s.ARNs.Task("c", id), "service:web", ptr(int64(3))
		task.LastStatus, task.DesiredStatus = "STOPPED", "STOPPED"
		task.StoppedAt = shapes.At(now.Add(-at))
		if name == "running" {
			task.LastStatus, task.DesiredStatus, task.StoppedAt = "RUNNING", "RUNNING", shapes.Timestamp{}
		}
		tx.Create(store.TaskKey("c", id), task)
	}
	tx.Create(store.DesiredKey("c", "i1", ids["manifested"]), protocol.Task{Arn: s.ARNs.Task("c", ids["manifested"])})
	tx.Create(fleet.DaemonPlacementKey("c", "i1", "agent"), fleet.DaemonPlacement{Daemon: "agent", TaskID: ids["placed"]})
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	n, err := s.ExpireStoppedTasks(ctx, now.Add(-time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("expired %d (%v), want 1", n, err)
	}
	for name, id := range ids {
		_, err := store.Get[keyOnly](ctx, st, store.TaskKey("c", id))
		if gone := errors.Is(err, store.ErrNotFound); gone != (name == "old") {
			t.Errorf("%s: gone %v (%v)", name, gone, err)
		}
	}
	d, err := s.DescribeTasks(ctx, &shapes.DescribeTasksRequest{Cluster: "c", Tasks: []string{ids["old"], ids["recent"]}})
	if err != nil || len(d.Tasks) != 1 || len(d.Failures) != 1 || d.Failures[0].Reason != "MISSING" || d.Failures[0].Arn != s.ARNs.Task("c", ids["old"]) {
		t.Fatalf("DescribeTasks: %+v (%v), want recent and old MISSING", d, err)
	}
	l, err := s.ListTasks(ctx, &shapes.ListTasksRequest{Cluster: "c", DesiredStatus: "STOPPED"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{s.ARNs.Task("c", ids["recent"]), s.ARNs.Task("c", ids["manifested"]), s.ARNs.Task("c", ids["placed"])}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(l.TaskArns))
	if !slices.Equal(got, want) {
		t.Fatalf("stopped tasks listed %v, want %v", got, want)
	}
	planned, err := s.PlanTasks(ctx, "c", "service:web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(planned) != 4 || slices.ContainsFunc(planned, func(p servicedeploy.Task) bool { return p.ID == ids["old"] }) {
		t.Fatalf("the service's tasks: %+v, want the four left", planned)
	}

	// The agent reports the deleted task again: nothing is written.
	report := []protocol.TaskState{{Arn: s.ARNs.Task("c", ids["old"]), LastStatus: "STOPPED", Seq: 9}}
	if err := s.ApplyTaskStates(ctx, "c", "i1", report); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get[keyOnly](ctx, st, store.TaskKey("c", ids["old"])); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a late report recreated the task: %v", err)
	}

	// Once the manifest lets it go, it goes too; nothing else is due.
	m, err := store.Get[keyOnly](ctx, st, store.DesiredKey("c", "i1", ids["manifested"]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn().Delete(m.Key, m.Rev).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ExpireStoppedTasks(ctx, now.Add(-time.Hour)); err != nil || n != 1 {
		t.Fatalf("expired %d (%v) after the manifest let go, want 1", n, err)
	}
	if n, err := s.ExpireStoppedTasks(ctx, now.Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("expired %d (%v) on a second pass, want 0", n, err)
	}
}

// An INACTIVE instance past retention is deleted once no task, credential
// or session refers to it; a record from before InactiveAt existed is
// stamped, and so starts its retention now.
func TestExpireInactiveInstances(t *testing.T) {
	ctx := context.Background()
	st, s := clusterC(t)
	now := time.Now()
	ids := map[string]string{}
	tx := st.Txn()
	for name, status := range map[string]string{"gone": "INACTIVE", "recent": "INACTIVE", "active": "ACTIVE", "bound": "INACTIVE",
		"tasked": "INACTIVE", "connected": "INACTIVE", "legacy": "INACTIVE"} {
		id := fleet.NewInstanceID()
		ids[name] = id
		ci := instanceRecord(id, status, 100, 100)
		ci.ContainerInstanceArn, ci.Version = s.ARNs.ContainerInstance("c", id), ptr(int64(2))
		switch name {
		case "recent":
			ci.InactiveAt = now.Add(-10 * time.Minute)
		case "gone", "bound", "tasked", "connected":
			ci.InactiveAt = now.Add(-2 * time.Hour)
		}
		tx.Create(store.ContainerInstanceKey("c", id), ci)
	}
	tx.Create(store.CredentialKey("AKBOUND"), map[string]string{"cluster": "c", "instanceId": ids["bound"]})
	tx.Create(store.SessionKey("c", ids["connected"]), store.Session{Server: "s"})
	task := store.Task{ID: fleet.NewInstanceID(), Cluster: "c", InstanceID: ids["tasked"], Kind: protocol.KindService}
	task.LastStatus, task.StoppedAt = "STOPPED", shapes.At(now.Add(-10*time.Minute))
	tx.Create(store.TaskKey("c", task.ID), task)
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	deleted, stamped, err := s.ExpireInactiveInstances(ctx, now.Add(-time.Hour))
	if err != nil || deleted != 1 || stamped != 1 {
		t.Fatalf("deleted %d, stamped %d (%v), want 1 and 1", deleted, stamped, err)
	}
	for name, id := range ids {
		it, err := store.Get[store.ContainerInstance](ctx, st, store.ContainerInstanceKey("c", id))
		if gone := errors.Is(err, store.ErrNotFound); gone != (name == "gone") {
			t.Errorf("%s: gone %v (%v)", name, gone, err)
		}
		if name == "legacy" && (it.Value.InactiveAt.Before(now.Truncate(time.Millisecond)) || it.Value.InactiveAt.After(time.Now())) {
			t.Errorf("legacy stamped %s, want the pass's time", it.Value.InactiveAt)
		}
	}
	d, err := s.DescribeContainerInstances(ctx, &shapes.DescribeContainerInstancesRequest{Cluster: "c", ContainerInstances: []string{ids["gone"], ids["recent"]}})
	if err != nil || len(d.ContainerInstances) != 1 || len(d.Failures) != 1 || d.Failures[0].Reason != "MISSING" {
		t.Fatalf("DescribeContainerInstances: %+v (%v), want recent and gone MISSING", d, err)
	}
	l, err := s.ListContainerInstances(ctx, &shapes.ListContainerInstancesRequest{Cluster: "c", Status: "INACTIVE"})
	if err != nil || len(l.ContainerInstanceArns) != 5 || slices.Contains(l.ContainerInstanceArns, s.ARNs.ContainerInstance("c", ids["gone"])) {
		t.Fatalf("INACTIVE listed %v (%v), want the five left", l.ContainerInstanceArns, err)
	}

	// What held the others back lets go: the credential moves on, the
	// session ends, the task expires. The stamped one waits its retention.
	c, err := store.Get[keyOnly](ctx, st, store.CredentialKey("AKBOUND"))
	if err != nil {
		t.Fatal(err)
	}
	sess, err := store.Get[keyOnly](ctx, st, store.SessionKey("c", ids["connected"]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn().Update(c.Key, c.Rev, map[string]string{"cluster": "c", "instanceId": ids["active"]}).Delete(sess.Key, sess.Rev).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ExpireStoppedTasks(ctx, now); err != nil || n != 1 {
		t.Fatalf("expired %d tasks (%v), want the one on tasked", n, err)
	}
	if deleted, stamped, err = s.ExpireInactiveInstances(ctx, now.Add(-time.Hour)); err != nil || deleted != 3 || stamped != 0 {
		t.Fatalf("deleted %d, stamped %d (%v), want bound, connected and tasked, nothing stamped", deleted, stamped, err)
	}
	if deleted, _, err = s.ExpireInactiveInstances(ctx, time.Now().Add(time.Minute)); err != nil || deleted != 2 {
		t.Fatalf("deleted %d (%v) past every retention, want recent and legacy", deleted, err)
	}

	// Deregistering records when, which starts the retention (to the
	// millisecond, as the API's times).
	before := time.Now().Truncate(time.Millisecond)
	if _, err := s.DeregisterContainerInstance(ctx, &shapes.DeregisterContainerInstanceRequest{Cluster: "c", ContainerInstance: ids["active"]}); err != nil {
		t.Fatal(err)
	}
	it, err := store.Get[store.ContainerInstance](ctx, st, store.ContainerInstanceKey("c", ids["active"]))
	if err != nil || it.Value.Status != "INACTIVE" || it.Value.InactiveAt.Before(before) || it.Value.InactiveAt.After(time.Now()) {
		t.Fatalf("deregistered: %s at %s (%v), want INACTIVE since the call", it.Value.Status, it.Value.InactiveAt, err)
	}
}

// clusterC is a service on a fresh store with cluster "c" created, as the
// API's reads need it.
func clusterC(t *testing.T) (*store.Store, *Service) {
	t.Helper()
	st := openStore(t)
	s := newService(st)
	if _, err := s.CreateCluster(context.Background(), &shapes.CreateClusterRequest{ClusterName: "c"}); err != nil {
		t.Fatal(err)
	}
	return st, s
}
