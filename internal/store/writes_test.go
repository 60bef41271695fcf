package store

import (
	"context"
	"encoding/json"
	"testing"
)

// The store tallies what its watch saw written by kind of record: puts
// with the bytes of their values, deletes, and none for a failed check.
func TestWritesAreCountedByKind(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	before := s.Writes()
	one, _ := json.Marshal(obj{"one", 1})
	two, _ := json.Marshal(obj{"two", 2})
	rev, err := s.Txn().Create("tasks/c/1", obj{"one", 1}).Create("desired/c/i/1", obj{"two", 2}).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rev, err = s.Txn().Update("tasks/c/1", rev, obj{"two", 2}).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn().Update("tasks/c/1", rev-1, obj{"stale", 0}).Commit(ctx); err == nil {
		t.Fatal("a stale update committed")
	}
	if _, err := s.Txn().Delete("tasks/c/1", rev).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The tally follows the watch: wait for it to reach the last write.
	if err := s.sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := WritesSince(before, s.Writes())
	want := map[string]WriteCount{
		"tasks":   {Puts: 2, Deletes: 1, Bytes: int64(len(one) + len(two))},
		"desired": {Puts: 1, Bytes: int64(len(two))},
	}
	if len(got) != len(want) {
		t.Fatalf("writes by kind %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
}
