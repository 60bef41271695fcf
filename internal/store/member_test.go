package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A member started on its own takes the embedded member's transaction size
// from a store told so, and compacts its own history, which no store
// compacts for it.
func TestMemberServesAnotherStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := StartMember(ctx, t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := StartMember(ctx, t.TempDir(), 0); err == nil {
		t.Fatal("a member without a compaction period started")
	}

	if _, err := Open(ctx, Config{Endpoints: []string{m.ClientURL()}, MaxTxnOps: -1}); err == nil {
		t.Fatal("a negative MaxTxnOps opened a store")
	}
	s, err := Open(ctx, Config{Endpoints: []string{m.ClientURL()}, MaxTxnOps: EmbeddedMaxTxnOps})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.MaxTxnOps() != EmbeddedMaxTxnOps {
		t.Fatalf("MaxTxnOps %d, want %d", s.MaxTxnOps(), EmbeddedMaxTxnOps)
	}
	if s.Compacted() != 0 {
		t.Fatal("a store compacted an external member")
	}
	// More operations than etcd's default allows in one transaction.
	tx := s.Txn()
	for i := range DefaultMaxTxnOps + 1 {
		tx = tx.Create(fmt.Sprintf("m/%04d", i), obj{"x", i})
	}
	first, err := tx.Commit(ctx)
	if err != nil {
		t.Fatalf("a transaction of %d operations: %v", DefaultMaxTxnOps+1, err)
	}
	items, _, err := List[obj](ctx, s, "m/", "", 0)
	if err != nil || len(items) != DefaultMaxTxnOps+1 {
		t.Fatalf("listed %d of %d (%v)", len(items), DefaultMaxTxnOps+1, err)
	}
	for i := range 5 {
		if _, err := s.Txn().Put("m/0000", obj{"y", i}).Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// etcd's periodic compaction reaches past the first transaction.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := s.client.Get(ctx, s.prefix+"m/0000", clientv3.WithRev(first))
		if errors.Is(err, rpctypes.ErrCompacted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the member did not compact its history in 30s")
		}
		if _, err := s.Txn().Put("m/0001", obj{"z", 1}).Commit(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
