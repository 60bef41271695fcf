package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// An advance wakes exactly the waiters it satisfies; the rest keep
// waiting without being woken, and one whose context ends leaves.
func TestAdvanceWakesOnlyTheWaitersItReaches(t *testing.T) {
	var w revWaiters
	var cur atomic.Int64
	woke := make([]atomic.Bool, 101)
	var wg sync.WaitGroup
	for rev := int64(1); rev <= 100; rev++ {
		wg.Go(func() {
			if err := w.wait(context.Background(), rev, &cur); err != nil {
				t.Error(err)
			}
			if cur.Load() < rev {
				t.Errorf("woken for %d at %d", rev, cur.Load())
			}
			woke[rev].Store(true)
		})
	}
	waitLen := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); w.len() != n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d waiting, want %d", w.len(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitLen(100)
	cur.Store(40)
	w.reached(40)
	waitLen(60)
	for deadline := time.Now().Add(5 * time.Second); ; {
		n := 0
		for rev := 1; rev <= 100; rev++ {
			if woke[rev].Load() {
				n++
				if rev > 40 {
					t.Fatalf("waiter for %d woken at 40", rev)
				}
			}
		}
		if n == 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 40 reached woke", n)
		}
		time.Sleep(time.Millisecond)
	}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.wait(ctx, 1000, &cur) }()
	waitLen(61)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	waitLen(60)

	cur.Store(100)
	w.reached(100)
	wg.Wait()
	if w.len() != 0 {
		t.Fatalf("%d still waiting", w.len())
	}
	if err := w.wait(context.Background(), 100, &cur); err != nil {
		t.Fatal(err)
	}
}

// Waiters racing with advances never miss the one that reaches them.
func TestRevisionWaitsRaceAdvances(t *testing.T) {
	var w revWaiters
	var cur atomic.Int64
	var wg sync.WaitGroup
	for i := range 2000 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.wait(ctx, int64(i%500+1), &cur); err != nil {
				t.Error(err)
			}
		})
	}
	for rev := int64(1); rev <= 500; rev++ {
		cur.Store(rev)
		w.reached(rev)
	}
	wg.Wait()
}

// CacheWaits counts a read that waited for the cache to apply a write, and
// how long it waited; a read the cache can already answer is not counted.
func TestCacheWaitsCountReadsThatWaited(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	n0, d0 := s.CacheWaits()
	if err := s.WaitFor(ctx, s.cache.revision()); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.CacheWaits(); n != n0 {
		t.Fatalf("a read the cache could answer counted as waiting: %d waits, was %d", n, n0)
	}
	const delay = 50 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- s.WaitFor(ctx, s.cache.revision()+1) }()
	time.Sleep(delay)
	if _, err := s.Txn().Create("a/1", obj{"one", 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n, d := s.CacheWaits()
	if n != n0+1 || d-d0 < delay {
		t.Fatalf("after one read waited %v: %d waits, %v waited; want %d and at least that", delay, n, d-d0, n0+1)
	}
}
