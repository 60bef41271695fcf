package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type blob struct {
	Data string `json:"data"`
	N    int    `json:"n"`
}

func randomText(n int) string {
	b := make([]byte, n*3/4)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// A member whose history was rewritten many times is defragmented once
// writes stop, not while they go on, and loses nothing by it.
func TestDefragmentsWhenQuietAndKeepsEveryRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, err := Open(ctx, Config{DataDir: dir, CompactEvery: 200 * time.Millisecond, DefragMinBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	dbFile := filepath.Join(dir, "data", "member", "snap", "db")

	// 200 records of 16 KB, each written six times, side by side.
	const keys, rounds = 200, 6
	want := make(map[string]blob, keys)
	revs := make(map[string]int64, keys)
	var mu sync.Mutex
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < keys; i += 4 {
					k := fmt.Sprintf("d/%03d", i)
					v := blob{Data: randomText(16 << 10), N: r}
					mu.Lock()
					rev := revs[k]
					mu.Unlock()
					txn := s.Txn()
					if r == 0 {
						txn.Create(k, v)
					} else {
						txn.Update(k, rev, v)
					}
					rev, err := txn.Commit(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					want[k], revs[k] = v, rev
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}

	// Busy: 200 writes a second, far over the quiet rate.
	var busy atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := s.Txn().Put("busy/k", obj{N: i}).Commit(ctx); err != nil {
				t.Error(err)
				return
			}
			busy.Add(1)
		}
	}()
	// Five compactions under that load: each is a defragmentation check.
	last, seen := s.Compacted(), 0
	for until := time.Now().Add(20 * time.Second); seen < 5; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(until) {
			t.Fatalf("%d compactions in 20 s of writes, want 5", seen)
		}
		if c := s.Compacted(); c > last {
			last, seen = c, seen+1
		}
	}
	close(stop)
	<-done
	if n := len(s.Defrags()); n != 0 {
		t.Fatalf("defragmented %d times while %d writes went on", n, busy.Load())
	}

	// Quiet: the next periods see no writes.
	deadline := time.Now().Add(20 * time.Second)
	for len(s.Defrags()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not defragmented within 20 s of quiet (database %d bytes)", s.embedded.etcd.Server.Backend().Size())
		}
		time.Sleep(50 * time.Millisecond)
	}
	d := s.Defrags()[0]
	st, err := os.Stat(dbFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("defragmented %d → %d bytes in %v; file %d bytes", d.BeforeBytes, d.AfterBytes, d.Took, st.Size())
	// What is left is about the live records (how much history the file
	// held before depends on how many compactions the writes overlapped,
	// so on the machine's load: 7.0 to 8.3 MB here). bbolt grows its file
	// in doubling steps, so the file may hold up to twice the database:
	// an 8.3 MB database left 3.7 MB in a 4.2 MB file.
	live := int64(keys * 16 << 10)
	if d.AfterBytes >= d.BeforeBytes || d.AfterBytes > live*14/10 || st.Size() >= d.BeforeBytes || st.Size() > 2*d.AfterBytes {
		t.Fatalf("defragmentation left %d bytes (file %d) of %d; the live records hold %d", d.AfterBytes, st.Size(), d.BeforeBytes, live)
	}
	// What the soak reads: the database and the part in use, within the
	// file and holding the live records (their 16 KB of random text does
	// not compress below half).
	if size, inUse, ok := s.DatabaseSize(); !ok || size > st.Size() || inUse > size || inUse < live/2 {
		t.Fatalf("DatabaseSize: %d bytes, %d in use, ok %v; file %d, live records %d", size, inUse, ok, st.Size(), live)
	}

	check := func(s *Store, what string) {
		t.Helper()
		for k, v := range want {
			it, err := Get[blob](ctx, s, k)
			if err != nil || it.Value != v {
				t.Fatalf("%s: %s = %.20v (rev %d), %v; want round %d", what, k, it.Value, it.Rev, err, v.N)
			}
			resp, err := s.client.Get(ctx, s.prefix+k)
			if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != it.Rev {
				t.Fatalf("%s: etcd's %s: %v %v, want revision %d", what, k, resp, err, it.Rev)
			}
		}
	}
	check(s, "after defragmenting")

	// Writes go on after it, and everything is there after a restart.
	k := "d/000"
	v := blob{Data: "after", N: rounds}
	if revs[k], err = s.Txn().Update(k, revs[k], v).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want[k] = v
	check(s, "after a write")
	s.Close()
	s = open(t, dir)
	check(s, "after a restart")
}

func TestDefragIsDueWhenGrownAndQuiet(t *testing.T) {
	now := time.Now()
	const p = 10 * time.Second
	d := &defragger{minBytes: 32 << 20}
	for _, c := range []struct {
		name       string
		size, revs int64
		want       bool
	}{
		{"small", 20 << 20, 0, false},
		{"busy", 100 << 20, 101, false},
		{"quiet", 100 << 20, 100, true},
	} {
		if got := d.due(now, c.size, c.revs, p); got != c.want {
			t.Errorf("%s: due = %v, want %v", c.name, got, c.want)
		}
	}
	d.record(Defrag{At: now, BeforeBytes: 100 << 20, AfterBytes: 40 << 20})
	if d.due(now.Add(2*time.Minute), 79<<20, 0, p) {
		t.Error("due before the database doubled since the last defragmentation")
	}
	if d.due(now.Add(30*time.Second), 80<<20, 0, p) {
		t.Error("due within a minute of the last defragmentation")
	}
	if !d.due(now.Add(2*time.Minute), 80<<20, 0, p) {
		t.Error("not due at twice the size, quiet, after a minute")
	}
	d.failed(now.Add(2 * time.Minute))
	if d.due(now.Add(2*time.Minute+30*time.Second), 80<<20, 0, p) {
		t.Error("a failed attempt retried within a minute")
	}
}
