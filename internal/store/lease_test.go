package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A kept lease's keys outlive its TTL; once the keeping stops they vanish
// after it, and a revoked lease is reported lost at once.
func TestKeptLeaseOutlivesItsTTL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := open(t, t.TempDir())
	defer s.Close()
	l, err := s.Grant(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	lost, err := l.Keep(kctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn().PutWithLease("l/a", obj{"a", 1}, l).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if _, err := Get[obj](ctx, s, "l/a"); err != nil {
		t.Fatalf("key of a kept lease gone after 3 TTLs: %v", err)
	}
	select {
	case <-lost:
		t.Fatal("kept lease reported lost")
	default:
	}
	stop()
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("lease not reported lost after its keeping stopped")
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := Get[obj](ctx, s, "l/a"); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("key outlived a lease no longer kept")
		}
		time.Sleep(100 * time.Millisecond)
	}

	l2, err := s.Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lost2, err := l2.Keep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost2:
	case <-time.After(10 * time.Second):
		t.Fatal("revoked lease not reported lost")
	}
}
