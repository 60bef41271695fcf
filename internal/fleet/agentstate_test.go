package fleet

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// A report of several tasks is one write: the starting ones, and the
// stopped ones with their reservations given back to the instance in one
// rewrite of it; a replay of the same report changes nothing.
func TestApplyTaskStatesBatch(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	ci := instanceRecord("i1", "ACTIVE", 1024-4*100, 2048-4*200)
	ci.RegisteredResources = resources{cpu: 1024, memory: 2048}.Shapes()
	ci.Version = ptr(int64(1))
	tx := st.Txn().Create(store.ContainerInstanceKey("c", "i1"), ci)
	ids := map[string]string{"t1": NewInstanceID(), "t2": NewInstanceID(), "t3": NewInstanceID(), "t4": NewInstanceID()}
	for _, id := range ids {
		task := store.Task{ID: id, Cluster: "c", InstanceID: "i1", Kind: protocol.KindService, Reserved: &store.Reservation{CPU: 100, Memory: 200}}
		task.TaskArn, task.Group = s.ARNs.Task("c", id), "service:web"
		task.LastStatus, task.DesiredStatus, task.Version = "PENDING", "RUNNING", ptr(int64(1))
		tx.Create(store.TaskKey("c", id), task).Create(store.DesiredKey("c", "i1", id), protocol.Task{Arn: task.TaskArn})
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	report := []protocol.TaskState{
		{Arn: s.ARNs.Task("c", ids["t1"]), LastStatus: "RUNNING", Seq: 1},
		{Arn: s.ARNs.Task("c", ids["t2"]), LastStatus: "RUNNING", Seq: 1},
		{Arn: s.ARNs.Task("c", ids["t3"]), LastStatus: "STOPPED", StopCode: "EssentialContainerExited", StoppedReason: "exit 1", Seq: 1},
		{Arn: s.ARNs.Task("c", ids["t4"]), LastStatus: "STOPPED", StopCode: "EssentialContainerExited", StoppedReason: "exit 2", Seq: 1},
	}
	for range 2 { // the second is a replay
		if err := s.ApplyTaskStates(ctx, "c", "i1", report); err != nil {
			t.Fatal(err)
		}
		var rev int64
		for name, want := range map[string]string{"t1": "RUNNING", "t2": "RUNNING", "t3": "STOPPED", "t4": "STOPPED"} {
			id := ids[name]
			got, err := store.Get[store.Task](ctx, st, store.TaskKey("c", id))
			if err != nil || got.Value.LastStatus != want || *got.Value.Version != 2 {
				t.Fatalf("%s: %s version %d (%v), want %s version 2", name, got.Value.LastStatus, *got.Value.Version, err, want)
			}
			if rev != 0 && got.Rev != rev {
				t.Fatalf("%s written at %d, another task at %d: not together", name, got.Rev, rev)
			}
			rev = got.Rev
			if want == "STOPPED" && (got.Value.Reserved != nil || got.Value.DesiredStatus != "STOPPED") {
				t.Fatalf("%s stopped with reservation %+v, desired %s", name, got.Value.Reserved, got.Value.DesiredStatus)
			}
		}
		inst, err := store.Get[store.ContainerInstance](ctx, st, store.ContainerInstanceKey("c", "i1"))
		if err != nil {
			t.Fatal(err)
		}
		if rem := readResources(inst.Value.RemainingResources); rem.cpu != 1024-2*100 || rem.memory != 2048-2*200 {
			t.Fatalf("remaining %+v, want t3's and t4's reservations back", rem)
		}
		if *inst.Value.Version != 2 || inst.Rev != rev {
			t.Fatalf("instance version %d at %d, want one rewrite with the tasks at %d", *inst.Value.Version, inst.Rev, rev)
		}
		if n, _ := st.Count(ctx, store.DesiredPrefix("c", "i1")); n != 2 {
			t.Fatalf("%d manifest entries, want 2 (t3 and t4 left)", n)
		}
	}
}

// A report that adds nothing to the record (a task's first, PROVISIONING
// as the server created it) is acknowledged without a write, alone or in a
// batch; the next report that changes something is written as before.
func TestReportThatChangesNothingIsNotWritten(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	tx := st.Txn().Create(store.ContainerInstanceKey("c", "i1"), instanceRecord("i1", "ACTIVE", 1024, 2048))
	var arns []string
	for range 2 {
		id := NewInstanceID()
		task := store.Task{ID: id, Cluster: "c", InstanceID: "i1", Kind: protocol.KindService}
		task.TaskArn, task.Group = s.ARNs.Task("c", id), "service:web"
		task.LastStatus, task.DesiredStatus, task.HealthStatus, task.Version = "PROVISIONING", "RUNNING", "UNKNOWN", ptr(int64(1))
		task.Containers = []shapes.Container{{Name: "web", LastStatus: "PENDING"}}
		tx.Create(store.TaskKey("c", id), task)
		arns = append(arns, task.TaskArn)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	revs := func() []int64 {
		var out []int64
		for _, arn := range arns {
			got, err := store.Get[store.Task](ctx, st, store.TaskKey("c", LastPart(arn)))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, got.Rev)
		}
		return out
	}
	before := revs()
	first := func(arn string, seq uint64) protocol.TaskState {
		return protocol.TaskState{Arn: arn, LastStatus: "PROVISIONING", HealthStatus: "UNKNOWN", Seq: seq,
			Containers: []protocol.ContainerState{{Name: "web", LastStatus: "PENDING"}}}
	}
	// Alone (the one-by-one path), then as a batch.
	if err := s.ApplyTaskStates(ctx, "c", "i1", []protocol.TaskState{first(arns[0], 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyTaskStates(ctx, "c", "i1", []protocol.TaskState{first(arns[0], 2), first(arns[1], 1)}); err != nil {
		t.Fatal(err)
	}
	if after := revs(); !slices.Equal(after, before) {
		t.Fatalf("revisions %v after reports that change nothing, want %v", after, before)
	}
	// A change is written, alone and in a batch, even at a sequence the
	// skipped reports had passed.
	running := first(arns[0], 2)
	running.LastStatus, running.Containers[0].LastStatus, running.Containers[0].RuntimeID = "RUNNING", "RUNNING", "r1"
	if err := s.ApplyTaskStates(ctx, "c", "i1", []protocol.TaskState{running}); err != nil {
		t.Fatal(err)
	}
	pulled := first(arns[1], 2)
	pulled.Containers[0].ImageDigest = "sha256:abc"
	stale := first(arns[0], 1)
	if err := s.ApplyTaskStates(ctx, "c", "i1", []protocol.TaskState{stale, pulled}); err != nil {
		t.Fatal(err)
	}
	after := revs()
	for i := range after {
		if after[i] == before[i] {
			t.Fatalf("task %d not written by a report that changes it", i)
		}
	}
	t0, _ := store.Get[store.Task](ctx, st, store.TaskKey("c", LastPart(arns[0])))
	t1, _ := store.Get[store.Task](ctx, st, store.TaskKey("c", LastPart(arns[1])))
	if v := t0.Value; v.LastStatus != "RUNNING" || v.Containers[0].RuntimeId != "r1" || *v.Version != 2 || v.StateSeq != 2 {
		t.Fatalf("first task %s runtime %q version %d seq %d, want RUNNING r1 2 2", v.LastStatus, v.Containers[0].RuntimeId, *v.Version, v.StateSeq)
	}
	if v := t1.Value; v.Containers[0].ImageDigest != "sha256:abc" || *v.Version != 2 {
		t.Fatalf("second task digest %q version %d, want sha256:abc 2", v.Containers[0].ImageDigest, *v.Version)
	}
}

// The manifest message is built from the stored entries without decoding
// them; the agent must still read it as the protocol's message.
func TestManifestMessageDecodes(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	empty, err := s.ManifestMessage(ctx, "c", "i1")
	if err != nil {
		t.Fatal(err)
	}
	var m protocol.Message
	if err := json.Unmarshal(empty, &m); err != nil || m.Type != protocol.TypeManifest || m.Manifest == nil || m.Manifest.Tasks == nil || len(m.Manifest.Tasks) != 0 {
		t.Fatalf("empty manifest %s: %+v %v", empty, m, err)
	}
	want := []protocol.Task{
		{Arn: "arn:a", Kind: protocol.KindDaemon, DesiredStatus: "RUNNING", Version: 3},
		{Arn: "arn:b", Kind: protocol.KindService, DesiredStatus: "STOPPED", StoppedReason: `quote " and \ and ü`, Version: 1},
	}
	rev, err := st.Txn().Create(store.DesiredKey("c", "i1", "a"), want[0]).Create(store.DesiredKey("c", "i1", "b"), want[1]).
		Create(store.DesiredKey("c", "i2", "x"), protocol.Task{Arn: "arn:other"}).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.ManifestMessage(ctx, "c", "i1")
	if err != nil {
		t.Fatal(err)
	}
	m = protocol.Message{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if m.Type != protocol.TypeManifest || m.Manifest.Seq < uint64(rev) || !reflect.DeepEqual(m.Manifest.Tasks, want) {
		t.Fatalf("manifest %s\ndecoded %+v, want seq ≥ %d and %+v", b, m.Manifest, rev, want)
	}
}
