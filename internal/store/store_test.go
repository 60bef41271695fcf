package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// A subscription made with SubscribeFunc calls its function where another's
// Ready would fire, and queues the same changes for Take.
func TestSubscribeFuncCallsOnChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := open(t, t.TempDir())
	defer s.Close()
	called := make(chan struct{}, 100)
	sub := s.SubscribeFunc("w/", func() { called <- struct{}{} })
	if _, err := s.Txn().Create("x/ignored", obj{N: 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn().Create("w/a", obj{N: 2}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-called:
	case <-ctx.Done():
		t.Fatal("no call for a change under the prefix")
	}
	changes, _ := sub.Take()
	if len(changes) != 1 || changes[0].Key != "w/a" {
		t.Fatalf("changes taken: %+v", changes)
	}
	// Closed, it is called no more.
	sub.Close()
	if _, err := s.Txn().Create("w/b", obj{N: 3}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-called:
		t.Fatal("a closed subscription's function was called")
	default:
	}
}

// Subscriptions of nested, equal, empty and exact-key prefixes each get
// exactly the changes under their prefix; a closed one gets nothing more.
func TestSubscriptionsByPrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := open(t, t.TempDir())
	defer s.Close()
	prefixes := []string{"", "d/", "d/c1/", "d/c1/", "d/c1/i1/", "d/c1/i1/t1", "d/c2/"}
	subs := make([]*Subscription, len(prefixes))
	for i, p := range prefixes {
		subs[i] = s.Subscribe(p)
	}
	closed := s.Subscribe("d/")
	closed.Close()
	keys := []string{"d/c1/i1/t1", "d/c1/i1/t2", "d/c1/i2/t1", "d/c2/i1/t1", "e/x"}
	var last int64
	for _, k := range keys {
		rev, err := s.Txn().Create(k, obj{}).Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = rev
	}
	if _, _, err := List[obj](ctx, s, "", "", 0); err != nil || s.Revision() < last {
		t.Fatalf("cache behind: %v", err)
	}
	for i, p := range prefixes {
		var want []string
		for _, k := range keys {
			if len(k) >= len(p) && k[:len(p)] == p {
				want = append(want, k)
			}
		}
		var got []string
		for len(got) < len(want) {
			chs, _, err := subs[i].Next(ctx)
			if err != nil {
				t.Fatalf("prefix %q: %v (got %v)", p, err, got)
			}
			for _, ch := range chs {
				got = append(got, ch.Key)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("prefix %q got %v, want %v", p, got, want)
		}
		subs[i].Close()
	}
	if chs, _, _ := closed.Next(canceled()); len(chs) > 0 {
		t.Errorf("closed subscription got %v", chs)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestScopeReadsWaitForTheirOwnWritesOnly(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()

	sc := s.NewScope()
	reads := s.InScope(ctx, sc, true)
	rev, err := s.Txn().Create("a/1", obj{"one", 1}).Commit(s.InScope(ctx, sc, false))
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.last.Load(); got != rev {
		t.Fatalf("scope noted revision %d, want the commit's %d", got, rev)
	}
	if it, err := Get[obj](reads, s, "a/1"); err != nil || it.Value.Name != "one" {
		t.Fatalf("scoped read of the scope's own write: %+v %v", it, err)
	}
	// Another writer of this process has committed, and the watch has not
	// delivered it yet.
	s.noteWrite(rev + 1000)
	if it, err := Get[obj](reads, s, "a/1"); err != nil || it.Value.Name != "one" {
		t.Fatalf("scoped read waited for a write outside the scope: %+v %v", it, err)
	}
	short := func(f func(ctx context.Context) error) error {
		c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		return f(c)
	}
	for name, c := range map[string]func(context.Context) context.Context{
		"unscoped":           func(c context.Context) context.Context { return c },
		"scoped write call":  func(c context.Context) context.Context { return s.InScope(c, sc, false) },
		"scope started late": func(c context.Context) context.Context { return s.InScope(c, s.NewScope(), true) },
	} {
		err := short(func(cc context.Context) error { _, err := Get[obj](c(cc), s, "a/1"); return err })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s read: got %v, want it to wait for the process's write", name, err)
		}
	}
}

// gate is an index whose Put waits while the gate is closed: a reader of
// the index holding its lock for long.
type gate struct {
	shut atomic.Bool
	open chan struct{}
	mu   sync.Mutex
	keys []string
}

func (g *gate) Reset() {}
func (g *gate) Put(key string, _ []byte, _ int64) {
	if g.shut.Load() {
		<-g.open
	}
	g.mu.Lock()
	g.keys = append(g.keys, key)
	g.mu.Unlock()
}
func (g *gate) Delete(string) {}

// An index slow to take a change holds back the revision (reads that wait
// for the write, and subscribers), not the cache's other reads.
func TestSlowIndexHoldsBackOnlyTheRevision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := open(t, t.TempDir())
	defer s.Close()
	if _, err := s.Txn().Create("other/1", obj{N: 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Get[obj](ctx, s, "other/1"); err != nil { // in the cache before the gate shuts
		t.Fatal(err)
	}
	g := &gate{open: make(chan struct{})}
	s.AddIndex("g/", g)
	g.shut.Store(true)
	sub := s.Subscribe("g/")
	defer sub.Close()

	if _, err := s.Txn().Create("g/a", obj{N: 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The watch is now stuck in the index's Put.
	ro := s.InScope(ctx, &Scope{}, true) // waits for nothing
	done := make(chan error, 1)
	go func() {
		_, err := Get[obj](ro, s, "other/1")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read of the cache waited for the index")
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := Get[obj](short, s, "g/a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a read waiting for the write returned before the index had it: %v", err)
	}
	cancelShort()
	select {
	case <-sub.Ready():
		t.Fatal("a subscriber heard of the change before the index had it")
	default:
	}
	close(g.open)
	if it, err := Get[obj](ctx, s, "g/a"); err != nil || it.Value.N != 1 {
		t.Fatalf("after the index took it: %+v %v", it, err)
	}
	g.mu.Lock()
	keys := g.keys
	g.mu.Unlock()
	if len(keys) != 1 || keys[0] != "g/a" {
		t.Fatalf("index got %v", keys)
	}
	ch, _, err := sub.Next(ctx)
	if err != nil || len(ch) != 1 || ch[0].Key != "g/a" {
		t.Fatalf("subscriber: %v %v", ch, err)
	}
}

// Concurrent grouped commits share etcd transactions, yet each keeps its
// own outcome: stale revisions fail alone, two writers of one key never
// share a group, and OnCommit runs only for what was written.
func TestGroupedCommitsKeepEachOutcome(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	const n = 200
	revs := make([]int64, n)
	for i := range n {
		rev, err := s.Txn().Create(fmt.Sprintf("g/%03d", i), obj{"start", 0}).Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		revs[i] = rev
	}
	type result struct {
		rev int64
		err error
		ran bool
	}
	// Writer i updates key i; writers n..n+9 race writers 0..9 for their keys.
	res := make([]result, n+10)
	var wg sync.WaitGroup
	for w := range n + 10 {
		wg.Go(func() {
			i, rev := w%n, revs[w%n]
			if i%20 == 7 {
				rev-- // stale
			}
			r := &res[w]
			tx := s.Txn().Update(fmt.Sprintf("g/%03d", i), rev, obj{fmt.Sprint("writer", w), w})
			tx.OnCommit(func() { r.ran = true })
			r.rev, r.err = tx.CommitGrouped(ctx)
			if r.err == nil {
				// Read-your-writes holds as for Commit.
				if it, err := Get[obj](ctx, s, fmt.Sprintf("g/%03d", i)); err != nil || it.Rev < r.rev {
					t.Errorf("writer %d: read after commit at %d: %+v %v", w, r.rev, it, err)
				}
			}
		})
	}
	wg.Wait()
	groups := map[int64]int{}
	for i := range n {
		it, err := Get[obj](ctx, s, fmt.Sprintf("g/%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		writers := []int{i}
		if i < 10 {
			writers = append(writers, n+i)
		}
		won := 0
		for _, w := range writers {
			r := res[w]
			switch {
			case r.err == nil:
				won++
				groups[r.rev]++
				if !r.ran || it.Value.N != w || it.Rev != r.rev {
					t.Errorf("key %d: writer %d committed at %d (OnCommit ran: %v) but holds %+v at %d", i, w, r.rev, r.ran, it.Value, it.Rev)
				}
			case errors.Is(r.err, ErrConflict):
				if r.ran {
					t.Errorf("writer %d: OnCommit ran after a conflict", w)
				}
			default:
				t.Errorf("writer %d: %v", w, r.err)
			}
		}
		want := 1
		if i%20 == 7 {
			want = 0
		}
		if won != want {
			t.Errorf("key %d: %d writers committed, want %d (value %+v)", i, won, want, it.Value)
		}
	}
	wins := 0
	for _, c := range groups {
		wins += c
	}
	if len(groups) > wins/2 {
		t.Errorf("%d commits in %d etcd transactions: hardly grouped", wins, len(groups))
	}
}

// A scoped read need not wait for others' writes, so it may read a record
// older than etcd's; the write it then makes fails its revision check, and
// the scope's next read waits for the write that came first (here held
// back in the watch by a slow index).
func TestConflictMakesTheScopeWaitForTheWinner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := open(t, t.TempDir())
	defer s.Close()
	commits := map[string]func(*Txn, context.Context) (int64, error){"Commit": (*Txn).Commit, "CommitGrouped": (*Txn).CommitGrouped}
	for name, commit := range commits {
		prefix := name + "/"
		g := &gate{open: make(chan struct{})}
		s.AddIndex(prefix, g)
		release := sync.OnceFunc(func() { close(g.open) })
		defer release() // a failed check must not leave the watch held
		if _, err := s.Txn().Create(prefix+"a", obj{"first", 1}).Commit(ctx); err != nil {
			t.Fatal(err)
		}
		sc := s.NewScope()
		reads := s.InScope(ctx, sc, true)
		old, err := Get[obj](reads, s, prefix+"a")
		if err != nil {
			t.Fatal(err)
		}
		g.shut.Store(true)
		// Another writer wins; the watch is held before the cache has it.
		if _, err := s.Txn().Update(prefix+"a", old.Rev, obj{"winner", 2}).Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := commit(s.Txn().Update(prefix+"a", old.Rev, obj{"loser", 3}), reads); !errors.Is(err, ErrConflict) {
			t.Fatalf("%s: stale write: %v, want ErrConflict", name, err)
		}
		short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = Get[obj](s.InScope(short, sc, true), s, prefix+"a")
		cancelShort()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: scoped read after the conflict did not wait for the winner: %v", name, err)
		}
		release()
		if it, err := Get[obj](reads, s, prefix+"a"); err != nil || it.Value.Name != "winner" {
			t.Fatalf("%s: retry's read: %+v %v, want the winner", name, it, err)
		}
	}
}

// The embedded member's history is compacted behind what the cache has
// applied, and never past it: a cache held back keeps the history it
// still has to read, and reads on without reloading once let go.
func TestHistoryIsCompactedBehindTheCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Config{DataDir: t.TempDir(), CompactEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.Txn().Create("h/a", obj{N: 0}).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	it, err := Get[obj](ctx, s, "h/a")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		rev, err := s.Txn().Update("h/a", it.Rev, obj{N: i}).Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		it.Rev = rev
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Compacted() <= first {
		if time.Now().After(deadline) {
			t.Fatalf("history not compacted past revision %d (at %d)", first, s.Compacted())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.client.Get(ctx, s.prefix+"h/a", clientv3.WithRev(first)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("revision %d still readable after compaction: %v", first, err)
	}

	// Hold the cache back: writes go on, compaction must stop at it.
	g := &gate{open: make(chan struct{})}
	s.AddIndex("g/", g)
	g.shut.Store(true)
	held, err := s.Txn().Create("g/a", obj{N: 1}).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := 0; i < 20; i++ {
		if last, err = s.Txn().Create(fmt.Sprintf("h/%d", i), obj{N: i}).Commit(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // several compaction periods
	if c := s.Compacted(); c >= held {
		t.Fatalf("compacted to %d while the cache had not applied %d", c, held)
	}
	close(g.open)
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	if it, err := Get[obj](short, s, "h/19"); err != nil || it.Rev != last {
		t.Fatalf("after the cache was let go: %+v %v", it, err)
	}
	g.mu.Lock()
	keys := g.keys
	g.mu.Unlock()
	if len(keys) != 1 { // a reload would have replayed g/a into the index again
		t.Fatalf("index got %v: the cache reloaded", keys)
	}
}

// A write's OnCommit hooks run side by side (each waits for the other
// here) and Commit returns only once all of them have.
func TestCommitHooksRunTogether(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := open(t, t.TempDir())
	defer s.Close()
	a, b := make(chan struct{}), make(chan struct{})
	var met, done atomic.Int32
	meet := func(mine, theirs chan struct{}) func() {
		return func() {
			close(mine)
			select {
			case <-theirs:
				met.Add(1)
			case <-time.After(5 * time.Second):
			}
			done.Add(1)
		}
	}
	if _, err := s.Txn().Create("hooks/1", obj{N: 1}).OnCommit(meet(a, b)).OnCommit(meet(b, a)).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if done.Load() != 2 {
		t.Fatalf("Commit returned with %d of 2 hooks done", done.Load())
	}
	if met.Load() != 2 {
		t.Fatal("the hooks ran one after the other")
	}
}

// TestReadsSeeWholeTransactions lists keys that every transaction rewrites
// together while the transactions are applied: each listing must show one
// transaction's values throughout, never a mix, though reads take no lock
// against the watch applying changes.
func TestReadsSeeWholeTransactions(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	const keys, txns = 64, 200
	write := func(n int) {
		tx := s.Txn()
		for k := range keys {
			tx.Put(fmt.Sprintf("w/%02d", k), obj{"w", n})
		}
		if _, err := tx.Commit(ctx); err != nil {
			t.Error(err)
		}
	}
	write(0)
	rctx, err := s.ReadOnly(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var lists atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				items, _, err := List[obj](rctx, s, "w/", "", 0)
				if err != nil {
					t.Error(err)
					return
				}
				if len(items) != keys {
					t.Errorf("listed %d keys, want %d", len(items), keys)
					return
				}
				for _, it := range items {
					if it.Value.N != items[0].Value.N {
						t.Errorf("one listing mixes transactions %d and %d", items[0].Value.N, it.Value.N)
						return
					}
				}
				lists.Add(1)
			}
		})
	}
	for n := 1; n <= txns; n++ {
		write(n)
	}
	close(done)
	wg.Wait()
	it, err := Get[obj](ctx, s, "w/63")
	if err != nil || it.Value.N != txns {
		t.Fatalf("last write: %+v, %v", it.Value, err)
	}
	if lists.Load() == 0 {
		t.Fatal("no listing ran alongside the writes")
	}
}

// batchRecorder records the calls a BatchIndexer gets.
type batchRecorder struct {
	mu    sync.Mutex
	calls [][]Change
	puts  int
}

func (b *batchRecorder) Reset()                            {}
func (b *batchRecorder) Put(key string, _ []byte, _ int64) { b.mu.Lock(); b.puts++; b.mu.Unlock() }
func (b *batchRecorder) Delete(string)                     {}
func (b *batchRecorder) Apply(chs []Change) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, slices.Clone(chs))
}

// TestBatchIndexerTakesATransactionAtOnce commits 50 records under an
// index's prefix and others beside them in one transaction, then deletes
// one: the index gets the transaction's 50 in one call, in key order as
// written, and the delete in the next.
func TestBatchIndexerTakesATransactionAtOnce(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	b := &batchRecorder{}
	s.AddIndex("b/", b)
	tx := s.Txn()
	for i := range 50 {
		tx.Put(fmt.Sprintf("b/%02d", i), obj{"b", i})
		tx.Put(fmt.Sprintf("other/%02d", i), obj{"o", i})
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	it, err := Get[obj](ctx, s, "b/07")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn().Delete("b/07", it.Rev).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.calls) != 2 || b.puts != 0 {
		t.Fatalf("%d batches and %d single puts, want 2 batches", len(b.calls), b.puts)
	}
	if len(b.calls[0]) != 50 {
		t.Fatalf("first batch has %d changes, want 50", len(b.calls[0]))
	}
	for i, ch := range b.calls[0] {
		if ch.Key != fmt.Sprintf("b/%02d", i) || ch.Deleted {
			t.Fatalf("change %d: %+v", i, ch)
		}
	}
	if d := b.calls[1]; len(d) != 1 || d[0].Key != "b/07" || !d[0].Deleted {
		t.Fatalf("second batch: %+v", d)
	}
}
