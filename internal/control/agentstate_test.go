package control

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

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
	ci.RegisteredResources = resources{cpu: 1024, memory: 2048}.shapes()
	ci.Version = ptr(int64(1))
	tx := st.Txn().Create(store.ContainerInstanceKey("c", "i1"), ci)
	ids := map[string]string{"t1": newInstanceID(), "t2": newInstanceID(), "t3": newInstanceID(), "t4": newInstanceID()}
	for _, id := range ids {
		task := store.Task{ID: id, Cluster: "c", InstanceID: "i1", Kind: protocol.KindService, Reserved: &store.Reservation{CPU: 100, Memory: 200}}
		task.TaskArn, task.Group = s.arns.task("c", id), "service:web"
		task.LastStatus, task.DesiredStatus, task.Version = "PENDING", "RUNNING", ptr(int64(1))
		tx.Create(store.TaskKey("c", id), task).Create(store.DesiredKey("c", "i1", id), protocol.Task{Arn: task.TaskArn})
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	report := []protocol.TaskState{
		{Arn: s.arns.task("c", ids["t1"]), LastStatus: "RUNNING", Seq: 1},
		{Arn: s.arns.task("c", ids["t2"]), LastStatus: "RUNNING", Seq: 1},
		{Arn: s.arns.task("c", ids["t3"]), LastStatus: "STOPPED", StopCode: "EssentialContainerExited", StoppedReason: "exit 1", Seq: 1},
		{Arn: s.arns.task("c", ids["t4"]), LastStatus: "STOPPED", StopCode: "EssentialContainerExited", StoppedReason: "exit 2", Seq: 1},
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
