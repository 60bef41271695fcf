package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// Records under a cold prefix are kept in the cache as keys and revisions
// only; every read returns their values from etcd, in order, as the other
// records'.
func TestColdValuesAreReadFromEtcd(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	tx := s.Txn()
	for i := range 5 {
		tx = tx.Create(fmt.Sprintf("events/c/%02d", i), obj{"ev", i})
	}
	if _, err := tx.Create("tasks/c/1", obj{"task", 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	e, ok := s.cache.get(s.prefix + "events/c/03")
	if !ok || !e.cold || e.value != nil {
		t.Fatalf("cached event entry %+v: want its key and revision only", e)
	}
	if e, _ := s.cache.get(s.prefix + "tasks/c/1"); e.cold || e.value == nil {
		t.Fatalf("cached task entry %+v: want its value", e)
	}

	it, err := Get[obj](ctx, s, "events/c/03")
	if err != nil || it.Value.N != 3 || it.Rev == 0 {
		t.Fatalf("get a cold record: %+v %v", it, err)
	}
	items, more, err := List[obj](ctx, s, "events/c/", "events/c/00", 3)
	if err != nil || !more || len(items) != 3 {
		t.Fatalf("list a page: %d items, more %v, %v", len(items), more, err)
	}
	for i, it := range items {
		if it.Key != fmt.Sprintf("events/c/%02d", i+1) || it.Value.N != i+1 {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	raw, err := ListRaw(ctx, s, "events/")
	if err != nil || len(raw) != 5 || len(raw[4]) == 0 {
		t.Fatalf("raw values: %d, %v", len(raw), err)
	}
	revs, _, err := Revisions(ctx, s, "events/c/", "", 2)
	if err != nil || len(revs) != 2 || revs[1].Key != "events/c/01" || revs[1].Rev == 0 {
		t.Fatalf("revisions: %+v %v", revs, err)
	}

	// Deleted behind the cache's back (etcd only, as if after its scan):
	// dropped from a listing; rewritten: read as it is now.
	if _, err := s.client.Delete(ctx, s.prefix+"events/c/01"); err != nil {
		t.Fatal(err)
	}
	kvs := []kv{}
	s.cache.scan(s.prefix+"events/c/", "", 0, func(k string, e entry) bool { kvs = append(kvs, kv{k, e}); return true })
	if _, err := s.client.Put(ctx, s.prefix+"events/c/02", `{"name":"again","n":22}`); err != nil {
		t.Fatal(err)
	}
	got, err := s.fillCold(ctx, kvs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[1].key != s.prefix+"events/c/02" || string(got[1].value) != `{"name":"again","n":22}` || got[1].rev <= kvs[2].rev {
		t.Fatalf("filled %d entries, second %q %s rev %d", len(got), got[1].key, got[1].value, got[1].rev)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Get[obj](ctx, s, "events/c/01"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get a deleted cold record: %v", err)
	}

	defer func() {
		if recover() == nil {
			t.Fatal("an index under a cold prefix was added")
		}
	}()
	s.AddIndex("events/", &batchRecorder{})
}
