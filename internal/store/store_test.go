package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

type obj struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestCreateUpdateDeleteWithRevisions(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()

	if _, err := s.Txn().Create("a/1", obj{"one", 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn().Create("a/1", obj{"dup", 1}).Commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("second create: got %v, want ErrConflict", err)
	}
	it, err := Get[obj](ctx, s, "a/1")
	if err != nil || it.Value.Name != "one" {
		t.Fatalf("get after create: %+v %v", it, err)
	}
	if _, err := s.Txn().Update("a/1", it.Rev, obj{"one", 2}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A stale revision must not write, and must not write the other key either.
	_, err = s.Txn().Create("a/2", obj{"two", 2}).Update("a/1", it.Rev, obj{"stale", 3}).Commit(ctx)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("stale update: got %v", err)
	}
	if _, err := Get[obj](ctx, s, "a/2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("half-written txn: a/2 exists (%v)", err)
	}
	it2, _ := Get[obj](ctx, s, "a/1")
	if it2.Value.N != 2 {
		t.Fatalf("read-your-writes: got %+v", it2.Value)
	}
	if _, err := s.Txn().Delete("a/1", it.Rev).Commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete with stale rev: %v", err)
	}
	if _, err := s.Txn().Delete("a/1", it2.Rev).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Get[obj](ctx, s, "a/1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

func TestListPagesInKeyOrder(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	for i := range 25 {
		if _, err := s.Txn().Create(fmt.Sprintf("l/%03d", i), obj{N: i}).Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.Txn().Create("lz", obj{N: 99}).Commit(ctx) // shares the string prefix "l" but not "l/"
	var got []int
	after := ""
	pages := 0
	for {
		items, more, err := List[obj](ctx, s, "l/", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, it := range items {
			got = append(got, it.Value.N)
		}
		if !more {
			break
		}
		after = items[len(items)-1].Key
	}
	if pages != 3 || len(got) != 25 {
		t.Fatalf("pages=%d items=%d", pages, len(got))
	}
	for i, n := range got {
		if n != i {
			t.Fatalf("order: %v", got)
		}
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.Txn().Create("k", obj{"kept", 7}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	it, err := Get[obj](ctx, s, "k")
	if err != nil || it.Value.Name != "kept" {
		t.Fatalf("after restart: %+v %v", it, err)
	}
}

func TestSubscriptionSeesChangesInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := open(t, t.TempDir())
	defer s.Close()
	sub := s.Subscribe("w/")
	defer sub.Close()
	s.Txn().Create("w/a", obj{N: 1}).Commit(ctx)
	s.Txn().Create("x/ignored", obj{N: 2}).Commit(ctx)
	it, _ := Get[obj](ctx, s, "w/a")
	s.Txn().Delete("w/a", it.Rev).Commit(ctx)
	var seen []Change
	for len(seen) < 2 {
		ch, _, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v (seen %v)", err, seen)
		}
		seen = append(seen, ch...)
	}
	if len(seen) != 2 || seen[0].Key != "w/a" || seen[0].Deleted || !seen[1].Deleted {
		t.Fatalf("changes: %+v", seen)
	}
}

func TestListWhereDecodesOnlyWhatIsKept(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	for i := range 10 {
		if _, err := s.Txn().Create(fmt.Sprintf("w/%02d", i), obj{Name: fmt.Sprintf("n%d", i%3), N: i}).Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A value that only the probe can read: it must not be decoded whole
	// unless kept.
	if _, err := s.Txn().Create("w/zz", map[string]any{"name": "other", "n": "not a number"}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	type probe struct {
		Name string `json:"name"`
	}
	items, err := ListWhere[obj](ctx, s, "w/", func(p probe) bool { return p.Name == "n1" })
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, it := range items {
		got = append(got, it.Value.N)
		if it.Rev == 0 || it.Key == "" {
			t.Fatalf("item without key or revision: %+v", it)
		}
	}
	if fmt.Sprint(got) != "[1 4 7]" {
		t.Fatalf("kept %v, want [1 4 7] in key order", got)
	}
	if _, err := ListWhere[obj](ctx, s, "w/", func(p probe) bool { return p.Name == "other" }); err == nil {
		t.Fatal("a kept value that does not decode gave no error")
	}
}
