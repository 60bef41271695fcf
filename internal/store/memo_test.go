package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// A memo's listing decodes only what changed since the last (the same
// shared value comes back for the others), follows updates, creates and
// deletes as List does, and forgets deleted keys.
func TestMemoDecodesOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	tx := s.Txn()
	for i := range 5 {
		tx.Create(fmt.Sprintf("m/%d", i), obj{fmt.Sprint(i), i})
	}
	tx.Create("other/1", obj{"other", 9})
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var m Memo[obj]
	agrees := func(what string, got []*Item[obj]) {
		t.Helper()
		want, _, err := List[obj](ctx, s, "m/", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d listed, List has %d", what, len(got), len(want))
		}
		for i := range want {
			if *got[i] != want[i] {
				t.Fatalf("%s: memo has %+v, List %+v", what, *got[i], want[i])
			}
		}
	}
	first, err := m.List(ctx, s, "m/")
	if err != nil {
		t.Fatal(err)
	}
	agrees("first", first)

	it, err := Get[obj](ctx, s, "m/1")
	if err != nil {
		t.Fatal(err)
	}
	three, err := Get[obj](ctx, s, "m/3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn().Update(it.Key, it.Rev, obj{"one", 10}).Delete(three.Key, three.Rev).Create("m/5", obj{"5", 5}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := m.List(ctx, s, "m/")
	if err != nil {
		t.Fatal(err)
	}
	agrees("second", second)
	byKey := map[string]*Item[obj]{}
	for _, it := range first {
		byKey[it.Key] = it
	}
	for _, it := range second {
		was := byKey[it.Key]
		if changed := it.Key == "m/1" || it.Key == "m/5"; changed == (was == it) {
			t.Fatalf("%s: decoded again %v, want %v", it.Key, was != it, changed)
		}
	}
	if m.Holds("m/3") {
		t.Fatal("the memo still holds a deleted key")
	}

	got, err := m.Get(ctx, s, "m/1")
	if err != nil || got.Value.N != 10 || got != second[1] {
		t.Fatalf("Get m/1: %+v %v (the listed value: %p, got %p)", got, err, second[1], got)
	}
	if _, err := m.Get(ctx, s, "m/3"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a deleted key: %v", err)
	}
	if o, err := m.Get(ctx, s, "other/1"); err != nil || o.Value.N != 9 {
		t.Fatalf("Get other/1: %+v %v", o, err)
	}
	if _, err := m.List(ctx, s, "m/"); err != nil {
		t.Fatal(err)
	}
	if !m.Holds("other/1") {
		t.Fatal("listing m/ forgot a key of another prefix")
	}

	// Read takes the named keys, in order, and forgets the prefix's others.
	got2, err := m.Read(ctx, s, "m/", []string{"m/4", "m/3", "m/0"})
	if err != nil || len(got2) != 2 || got2[0].Key != "m/4" || got2[1].Key != "m/0" {
		t.Fatalf("Read: %+v %v", got2, err)
	}
	if got2[1] != byKey["m/0"] {
		t.Fatal("Read decoded an unchanged record again")
	}
	if m.Holds("m/1") || !m.Holds("other/1") {
		t.Fatalf("after Read: holds m/1 %v, other/1 %v", m.Holds("m/1"), m.Holds("other/1"))
	}
}
