package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func TestClassifyNamesWantOfSpace(t *testing.T) {
	for _, c := range []struct {
		err   error
		space bool
		words string
	}{
		{rpctypes.ErrNoSpace, true, "NOSPACE"},
		{rpctypes.ErrGRPCNoSpace, true, "NOSPACE"},
		{fmt.Errorf("txn: %w", rpctypes.ErrNoSpace), true, "quota"},
		{&fs.PathError{Op: "write", Path: "/d/wal", Err: syscall.ENOSPC}, true, "the disk is full"},
		{fmt.Errorf("commit: %w", syscall.ENOSPC), true, "the disk is full"},
		{fmt.Errorf("%w: kept", ErrNoSpace), true, "kept"},
		{rpctypes.ErrTooManyOps, false, ""},
		{syscall.EIO, false, ""},
		{context.DeadlineExceeded, false, ""},
	} {
		got := classify(c.err)
		if errors.Is(got, ErrNoSpace) != c.space {
			t.Errorf("classify(%v) = %v: out of space %v, want %v", c.err, got, !c.space, c.space)
			continue
		}
		if !c.space && got != c.err {
			t.Errorf("classify(%v) changed it to %v", c.err, got)
		}
		if c.space && (!strings.HasPrefix(got.Error(), "the state store is out of space: ") || !strings.Contains(got.Error(), c.words)) {
			t.Errorf("classify(%v) = %q, want it to name the cause (%q)", c.err, got, c.words)
		}
	}
	if classify(nil) != nil {
		t.Error("classify(nil) is not nil")
	}
}

func TestDiskGuardRefusesWritesUntilSpaceReturns(t *testing.T) {
	free := int64(writeReserve + 10<<20)
	sp := newSpace("/data", slog.New(slog.DiscardHandler))
	sp.statfs = func(string) (int64, error) { return free, nil }

	if err := sp.admit(1<<20, true); err != nil {
		t.Fatalf("admit with room: %v", err)
	}
	if st := sp.state(); st.OutOfSpace || st.FreeBytes != free {
		t.Fatalf("state with room: %+v", st)
	}
	// The write itself counts, twice (WAL and database).
	if err := sp.admit(6<<20, true); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a write eating into the reserve: %v", err)
	}
	free = writeReserve - 1
	err := sp.admit(10, false)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "the disk is full") || !strings.Contains(err.Error(), "/data") {
		t.Fatalf("admit on a full disk: %v", err)
	}
	if st := sp.state(); !st.OutOfSpace || !strings.Contains(st.Reason, "disk is full") {
		t.Fatalf("state on a full disk: %+v", st)
	}
	free = writeReserve + spaceHysteresis - 1
	if err := sp.checkDisk(0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("writes resumed at the line they stopped at: %v", err)
	}
	free = writeReserve + spaceHysteresis
	if err := sp.checkDisk(0); err != nil {
		t.Fatalf("check after space returned: %v", err)
	}
	if st := sp.state(); st.OutOfSpace {
		t.Fatalf("still out of space after space returned: %+v", st)
	}

	// The alarm refuses puts, not deletes.
	sp.setAlarm(true, 8<<20)
	if err := sp.admit(10, true); !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "NOSPACE") {
		t.Fatalf("put under the NOSPACE alarm: %v", err)
	}
	if err := sp.admit(10, false); err != nil {
		t.Fatalf("delete under the NOSPACE alarm: %v", err)
	}
	sp.setAlarm(false, 0)
	if err := sp.admit(10, true); err != nil || sp.state().OutOfSpace {
		t.Fatalf("put after the alarm: %v %+v", err, sp.state())
	}

	// An external cluster's store has no disk to look at.
	ext := newSpace("", slog.New(slog.DiscardHandler))
	ext.statfs = func(string) (int64, error) { t.Fatal("statfs of an external cluster"); return 0, nil }
	if err := ext.admit(1<<30, true); err != nil || ext.state().FreeBytes != -1 {
		t.Fatalf("external: %v %+v", err, ext.state())
	}
}

func TestStartNeedsRoom(t *testing.T) {
	full := func(string) (int64, error) { return startReserve - 1, nil }
	err := checkStart("/data", full)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "the disk is full") || !strings.Contains(err.Error(), "/data") {
		t.Fatalf("start on a full disk: %v", err)
	}
	if err := checkStart("/data", func(string) (int64, error) { return startReserve, nil }); err != nil {
		t.Fatalf("start with room: %v", err)
	}
	if startReserve >= writeReserve {
		t.Fatal("a server stopped while refusing writes could not start again")
	}
}

// etcd's NOSPACE alarm: puts are refused naming it, reads and deletes go
// on, and once deletes and a compaction made room the store defragments,
// disarms the alarm and takes puts again.
func TestNoSpaceAlarmRefusesPutsThenClears(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Config{DataDir: t.TempDir(), QuotaBytes: 2 << 20, CompactEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	type rec struct{ Data string }
	big := strings.Repeat("x", 32<<10)
	var written []string
	var refused error
	for i := 0; i < 500 && refused == nil; i++ {
		key := fmt.Sprintf("fill/%04d", i)
		// Distinct values, so compression cannot shrink them much.
		v := rec{fmt.Sprintf("%d", i) + scramble(big, i)}
		if _, err := s.Txn().Create(key, v).Commit(ctx); err != nil {
			refused = err
			break
		}
		written = append(written, key)
	}
	if !errors.Is(refused, ErrNoSpace) || !strings.Contains(refused.Error(), "NOSPACE") {
		t.Fatalf("put over the quota: %v (after %d puts)", refused, len(written))
	}
	waitFor(t, "the alarm noted", func() bool { return s.Space().OutOfSpace })
	if !strings.Contains(s.Space().Reason, "NOSPACE") {
		t.Fatalf("reason: %q", s.Space().Reason)
	}
	if _, err := Get[rec](ctx, s, written[0]); err != nil {
		t.Fatalf("read under the alarm: %v", err)
	}
	for _, k := range written {
		it, err := Get[rec](ctx, s, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Txn().Delete(k, it.Rev).Commit(ctx); err != nil {
			t.Fatalf("delete under the alarm: %v", err)
		}
	}
	waitFor(t, "the alarm cleared", func() bool { return !s.Space().OutOfSpace })
	if _, err := s.Txn().Create("after", rec{"ok"}).Commit(ctx); err != nil {
		t.Fatalf("put after the alarm cleared: %v", err)
	}
	if len(s.Defrags()) == 0 {
		t.Fatal("the alarm cleared without a defragmentation")
	}
}

func scramble(s string, seed int) string {
	b := []byte(s)
	x := uint32(seed*2654435761 + 1)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = 'a' + byte(x%26)
	}
	return string(b)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 30s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
