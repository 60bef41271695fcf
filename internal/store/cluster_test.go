package store

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// A member takes the cluster's CA on first start and keeps it: a CA
// written over, or another CA later, is refused.
func TestMemberAdoptsTheClusterCA(t *testing.T) {
	caDir, other, dir := t.TempDir(), t.TempDir(), t.TempDir()
	if _, _, err := WriteCA(caDir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := WriteCA(caDir); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a CA written over another: %v", err)
	}
	if err := adoptCA(dir, t.TempDir()); err == nil || !strings.Contains(err.Error(), "capstan etcd ca writes one") {
		t.Fatalf("adopting from a dir without a CA: %v", err)
	}
	if err := adoptCA(dir, caDir); err != nil {
		t.Fatal(err)
	}
	f, err := ensureMemberTLS(dir, memberIPs("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	ca, _, err := loadPair(filepath.Join(caDir, "ca.crt"), filepath.Join(caDir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	srv, _, err := loadPair(f.Server, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("the member's certificate is not the cluster CA's: %v", err)
	}
	if err := adoptCA(dir, caDir); err != nil {
		t.Fatalf("the same CA again: %v", err)
	}
	if _, _, err := WriteCA(other); err != nil {
		t.Fatal(err)
	}
	if err := adoptCA(dir, other); err == nil || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("another CA for a member that has one: %v", err)
	}
}

// A cluster member defragments only while it holds the cluster's lock:
// with another holder it leaves its database as it is, and defragments
// once the lock is free.
func TestDefragWaitsForTheClusterLock(t *testing.T) {
	ctx := context.Background()
	m, err := StartMember(ctx, MemberConfig{Dir: t.TempDir(), CompactEvery: time.Hour, DefragMinBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	srv := m.e.etcd.Server
	sess, err := concurrency.NewSession(m.client, concurrency.WithTTL(defragLockTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	other := concurrency.NewMutex(sess, defragLockKey)
	if err := other.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var d defragger
	d.minBytes = 1
	defragOneAtATime(ctx, srv, m.client, &d, 0, time.Hour, slog.New(slog.DiscardHandler))
	if n := len(d.list()); n != 0 {
		t.Fatalf("%d defragmentations while another member held the lock", n)
	}
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	defragOneAtATime(ctx, srv, m.client, &d, 0, time.Hour, slog.New(slog.DiscardHandler))
	if n := len(d.list()); n != 1 {
		t.Fatalf("%d defragmentations with the lock free, want 1", n)
	}
	// The lock is free again afterwards.
	if err := other.TryLock(ctx); err != nil {
		t.Fatalf("the lock after a defragmentation: %v", err)
	}
}
