package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
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
	m, err := StartMember(ctx, MemberConfig{Dir: t.TempDir(), CompactEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := StartMember(ctx, MemberConfig{Dir: t.TempDir()}); err == nil {
		t.Fatal("a member without a compaction period started")
	}

	if !strings.HasPrefix(m.ClientURL(), "unix:///") {
		t.Fatalf("a member told no address serves %s, want a unix socket", m.ClientURL())
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

// A member on its own compacts its history and, once writes stop,
// defragments its database without losing a record.
func TestMemberDefragmentsWhenQuiet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := StartMember(ctx, MemberConfig{Dir: t.TempDir(), CompactEvery: 500 * time.Millisecond, DefragMinBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := Open(ctx, Config{Endpoints: []string{m.ClientURL()}, MaxTxnOps: EmbeddedMaxTxnOps})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// 200 records of 16 KB, each written six times: with the history
	// compacted behind them, a database of 8-13 MB.
	const keys, rounds = 200, 6
	want := map[string]blob{}
	for r := range rounds {
		for i := range keys {
			k, v := fmt.Sprintf("d/%03d", i), blob{Data: randomText(16 << 10), N: r}
			if _, err := s.Txn().Put(k, v).Commit(ctx); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
	}
	if n := len(m.Defrags()); n != 0 {
		t.Fatalf("defragmented %d times while writes went on", n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(m.Defrags()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not defragmented within 30 s of quiet (database %d bytes)", m.e.etcd.Server.Backend().Size())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m.Compacted() == 0 {
		t.Fatal("defragmented before compacting")
	}
	d := m.Defrags()[0]
	t.Logf("defragmented %d → %d bytes in %v", d.BeforeBytes, d.AfterBytes, d.Took)
	if d.AfterBytes*2 > d.BeforeBytes {
		t.Fatalf("defragmentation left %d bytes of %d", d.AfterBytes, d.BeforeBytes)
	}
	for k, v := range want {
		resp, err := m.client.Get(ctx, s.prefix+k)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s after defragmenting: %v %v", k, resp, err)
		}
		got, err := Get[blob](ctx, s, k)
		if err != nil || got.Value != v || got.Rev != resp.Kvs[0].ModRevision {
			t.Fatalf("%s after defragmenting: %.20v rev %d (%v), want round %d at rev %d", k, got.Value, got.Rev, err, v.N, resp.Kvs[0].ModRevision)
		}
	}
}

func TestMemberRefusesBadAddresses(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		client, peer, want string
	}{
		{"localhost:2379", "127.0.0.1:2380", "IP address"},
		{"127.0.0.1", "127.0.0.1:2380", "IP:PORT"},
		{"https://127.0.0.1:2379", "127.0.0.1:2380", "IP:PORT"},
		{"127.0.0.1:0", "127.0.0.1:2380", "port from 1 to 65535"},
		{"127.0.0.1:2379", "", "go together"},
	} {
		_, err := StartMember(ctx, MemberConfig{Dir: t.TempDir(), Listen: c.client, PeerListen: c.peer, CompactEvery: time.Second})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("client %q peer %q: %v, want an error saying %q", c.client, c.peer, err, c.want)
		}
	}
	_, err := StartMember(ctx, MemberConfig{Dir: t.TempDir(), CompactEvery: time.Second, EtcdLogLevel: "loud"})
	if err == nil || !strings.Contains(err.Error(), "log level") {
		t.Errorf("etcd log level \"loud\": %v, want an error naming the log level", err)
	}
}

// freeLocal is a free address on 127.0.0.1.
func freeLocal(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A data dir serves one member at a time; a second is refused at once,
// where etcd's own database lock would wait for ever.
func TestDataDirInUseIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	m, err := StartMember(ctx, MemberConfig{Dir: dir, CompactEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func(was time.Duration) { lockWait = was }(lockWait)
	lockWait = time.Second
	start := time.Now()
	if _, err := StartMember(ctx, MemberConfig{Dir: dir, Listen: freeLocal(t), PeerListen: freeLocal(t), CompactEvery: time.Second}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second member on the data dir: %v", err)
	}
	if _, err := Open(ctx, Config{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a store embedding a member on the data dir: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("refusing took %v", d)
	}
	// A member that lets go within the wait is waited for, as in a restart.
	lockWait = 30 * time.Second
	var logs lockedBuffer
	opened := make(chan error, 1)
	go func() {
		s, err := Open(ctx, Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err == nil {
			s.Close()
		}
		opened <- err
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), "in use; waiting"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no word of waiting for the data dir in 20 s: %q", logs.String())
		}
	}
	m.Close()
	if err := <-opened; err != nil {
		t.Fatalf("the data dir once its member stopped: %v", err)
	}
}

// lockedBuffer collects a logger's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
