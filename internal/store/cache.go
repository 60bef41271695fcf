package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type entry struct {
	// value is as etcd holds it: JSON, or compressed (values.go). The
	// records were the largest share of the server's live heap (70 MiB
	// decompressed at 5,000 instances after a rollout); kept compressed
	// they cost a decompression on each read that decodes, and
	// controllers read through Memos, which decode only what changed.
	value []byte
	rev   int64
	// cold: the value is not kept (see coldPrefixes); value is nil.
	cold bool
}

// coldPrefixes hold records written once and read seldom: the cache keeps
// their keys and revisions, and reads fetch their values from etcd. A
// cluster's events (20,000 of ~1.6 KB each at 5,000 instances) were an
// eighth of the server's live heap, for a log only ListEvents reads.
var coldPrefixes = []string{"events/", "audit/"} // the audit trail: written on every call, read by ListAuditEvents only

// newEntry is the cache's entry for a key (without the store's prefix).
func newEntry(key string, value []byte, rev int64) entry {
	for _, p := range coldPrefixes {
		if strings.HasPrefix(key, p) {
			return entry{rev: rev, cold: true}
		}
	}
	return entry{value: value, rev: rev}
}

type kv struct {
	key string
	entry
}

// item is what the cache's tree holds: the entry by pointer, so that the
// nodes a change copies hold 24 bytes an item, not 56 (the copies were
// the largest of the server's allocations in a rollout).
type item struct {
	key string
	e   *entry
}

// cache mirrors every key under the prefix, fed by one etcd watch.
type cache struct {
	client *clientv3.Client
	prefix string
	log    *slog.Logger

	// mu guards the subscriptions and the indexes' list; readers of the
	// records never take it.
	mu sync.RWMutex
	// ixmu orders the writers (changes, loads, replays) and what the
	// indexes are fed; held without mu while they are fed changes.
	ixmu sync.Mutex
	// tree is never changed once published: a change is made to a lazy
	// copy of it, which then replaces it. Reads take no lock, so none
	// waits for a change being applied (a transaction of a thousand
	// records held every read back for its length, then each reader
	// queued for a core once let go), and a long scan holds back no
	// change.
	tree   atomic.Pointer[btree.BTreeG[item]]
	rev    atomic.Int64
	loaded atomic.Bool
	// waiters wait for rev to reach theirs. An advance wakes only those it
	// satisfies: a broadcast to all woke hundreds of readers per watch
	// response at 5,000 instances, most to wait again, each queued for a
	// core first (31 of the 85 goroutines queued in a rollout's trace).
	waiters revWaiters
	subs    map[*Subscription]struct{}
	// byPrefix and lens index subs by prefix: a change is offered only to
	// the subscriptions whose prefix it has, found with one lookup per
	// distinct prefix length, instead of testing every subscription (each
	// agent session holds two).
	byPrefix map[string]map[*Subscription]struct{}
	lens     map[int]int // prefix length → subscriptions of that length
	writes   writeCounts
	indexes  []index
}

// addSub and removeSub keep the index; c.mu is held.
func (c *cache) addSub(s *Subscription) {
	c.subs[s] = struct{}{}
	m := c.byPrefix[s.prefix]
	if m == nil {
		m = map[*Subscription]struct{}{}
		c.byPrefix[s.prefix] = m
	}
	m[s] = struct{}{}
	c.lens[len(s.prefix)]++
}

func (c *cache) removeSub(s *Subscription) {
	if _, ok := c.subs[s]; !ok {
		return
	}
	delete(c.subs, s)
	m := c.byPrefix[s.prefix]
	delete(m, s)
	if len(m) == 0 {
		delete(c.byPrefix, s.prefix)
	}
	if c.lens[len(s.prefix)]--; c.lens[len(s.prefix)] == 0 {
		delete(c.lens, len(s.prefix))
	}
}

// offer hands a change to the subscriptions whose prefix it has; c.mu is
// held. A record the cache keeps no value for is decompressed only here,
// and only if someone follows it.
func (c *cache) offer(ch Change) {
	for l := range c.lens {
		if l > len(ch.Key) {
			continue
		}
		for s := range c.byPrefix[ch.Key[:l]] {
			if ch.encoded {
				ch.Value, ch.encoded = c.stored(ch.Key, ch.Value), false
			}
			s.offer(ch)
		}
	}
}

// decode is the JSON value of what etcd holds at key (with the store's
// prefix).
func (c *cache) decode(key string, v []byte) ([]byte, error) {
	b, err := decodeValue(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.TrimPrefix(key, c.prefix), err)
	}
	return b, nil
}

// stored is what the cache keeps for a value etcd holds at key: its JSON,
// or, if it cannot be decompressed, the value as stored, which whoever
// decodes it then fails on with an error naming the key.
func (c *cache) stored(key string, v []byte) []byte {
	b, err := c.decode(key, v)
	if err != nil {
		c.log.Error("cannot read stored value", "err", err)
		return v
	}
	return b
}

// treeDegree is the cache tree's B-tree degree. Each watch response
// copies the nodes on the paths to the keys it changes (the tree is copy
// on write): smaller nodes copy fewer bytes per change (4 puts at 60,000
// keys: 36 KB at 32, 15 KB at 8) but make the scans that controllers and
// listings run slower (twice as slow at 8), and a 5,000-instance rollout
// took longer with 8 in both side-by-side pairs (BenchmarkCacheTree*).
const treeDegree = 32

func newTree(degree int) *btree.BTreeG[item] {
	return btree.NewG(degree, func(a, b item) bool { return a.key < b.key })
}

func newCache(c *clientv3.Client, prefix string, log *slog.Logger) *cache {
	ca := &cache{client: c, prefix: prefix, log: log, subs: map[*Subscription]struct{}{},
		byPrefix: map[string]map[*Subscription]struct{}{}, lens: map[int]int{}}
	ca.tree.Store(newTree(treeDegree))
	return ca
}

// load replaces the cache with a consistent snapshot of the prefix.
func (c *cache) load(ctx context.Context) error {
	resp, err := c.client.Get(ctx, c.prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("load state from etcd: %w", err)
	}
	tree := newTree(treeDegree)
	for _, k := range resp.Kvs {
		key := string(k.Key)
		e := newEntry(key[len(c.prefix):], k.Value, k.ModRevision)
		tree.ReplaceOrInsert(item{key, &e})
	}
	c.ixmu.Lock()
	defer c.ixmu.Unlock()
	c.mu.Lock()
	c.tree.Store(tree)
	c.rev.Store(resp.Header.Revision)
	c.loaded.Store(true)
	for _, x := range c.indexes {
		c.replay(x)
	}
	for s := range c.subs {
		s.resyncNow()
	}
	c.mu.Unlock()
	c.waiters.reached(c.rev.Load())
	return nil
}

// run follows the watch until ctx ends, reloading after compaction.
func (c *cache) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			c.log.Warn("watch history compacted; reloading state")
			if err := c.load(ctx); err != nil {
				c.log.Error("reload state", "err", err)
			}
			continue
		}
		c.log.Warn("etcd watch ended; resuming", "err", err, "rev", c.revision())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (c *cache) follow(ctx context.Context) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	from := c.revision() + 1
	wch := c.client.Watch(wctx, c.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return err
		}
		events, rev := resp.Events, resp.Header.Revision
		// Responses that queued while the last was applied go in with it:
		// one copy of the tree's upper nodes and one wake of the readers
		// for all of them, where each response copied the paths to its
		// keys (a tenth of what the server allocated in a rollout).
		var ended error
	more:
		for range maxCoalesce {
			select {
			case next, ok := <-wch:
				if !ok {
					ended = errWatchClosed
					break more
				}
				if ended = next.Err(); ended != nil {
					break more
				}
				// Clipped: the first response's array is not ours to extend.
				events, rev = append(slices.Clip(events), next.Events...), max(rev, next.Header.Revision)
			default:
				break more
			}
		}
		c.apply(events, rev)
		if ended != nil {
			return ended
		}
	}
	return errWatchClosed
}

var errWatchClosed = errors.New("watch channel closed")

// maxCoalesce bounds the watch responses applied at once.
const maxCoalesce = 64

// apply takes one watch response: the records first, then the indexes,
// then the revision and the subscriptions. The indexes are fed outside the
// cache's lock: they take their own, and a long read of one (a walk over
// thousands of instances) then holds back only the revision, not every
// read of the cache. Readers wait for a revision, so what they read after
// waiting has both; subscribers hear of a change only once both have it.
func (c *cache) apply(events []*clientv3.Event, rev int64) {
	c.ixmu.Lock()
	defer c.ixmu.Unlock()
	c.writes.add(c.prefix, events)
	changes := make([]Change, 0, len(events))
	if len(events) > 0 {
		tree := c.tree.Load().Clone()
		for _, ev := range events {
			k := string(ev.Kv.Key)
			switch ev.Type {
			case mvccpb.PUT:
				e := newEntry(k[len(c.prefix):], ev.Kv.Value, ev.Kv.ModRevision)
				ch := Change{Key: k[len(c.prefix):], Rev: ev.Kv.ModRevision, Value: ev.Kv.Value, encoded: e.cold}
				if !e.cold {
					// The indexes take JSON; the cache keeps what etcd holds.
					ch.Value = c.stored(k, ev.Kv.Value)
				}
				tree.ReplaceOrInsert(item{k, &e})
				changes = append(changes, ch)
			case mvccpb.DELETE:
				tree.Delete(item{key: k})
				changes = append(changes, Change{Key: k[len(c.prefix):], Rev: ev.Kv.ModRevision, Deleted: true})
			}
		}
		c.tree.Store(tree)
	}
	c.indexChanges(changes)
	c.mu.Lock()
	for _, ch := range changes {
		c.offer(ch)
	}
	if rev > c.rev.Load() {
		c.rev.Store(rev)
	}
	c.mu.Unlock()
	c.waiters.reached(c.rev.Load())
}

func (c *cache) revision() int64 { return c.rev.Load() }

func (c *cache) ready() bool { return c.loaded.Load() }

// waitFor blocks until the cache has applied revision rev.
func (c *cache) waitFor(ctx context.Context, rev int64) error {
	if c.rev.Load() >= rev {
		return nil
	}
	if err := c.waiters.wait(ctx, rev, &c.rev); err != nil {
		return fmt.Errorf("wait for state revision %d: %w", rev, err)
	}
	return nil
}

func (c *cache) get(key string) (entry, bool) {
	it, ok := c.tree.Load().Get(item{key: key})
	if !ok {
		return entry{}, false
	}
	return *it.e, true
}

// scan visits keys with the prefix, after `after`, up to limit (0: all);
// it reports whether more keys remained.
func (c *cache) scan(prefix, after string, limit int, fn func(string, entry) bool) (more bool) {
	start := prefix
	if after > start {
		start = after + "\x00"
	}
	n := 0
	c.tree.Load().AscendGreaterOrEqual(item{key: start}, func(it item) bool {
		if !strings.HasPrefix(it.key, prefix) {
			return false
		}
		if limit > 0 && n == limit {
			more = true
			return false
		}
		n++
		return fn(it.key, *it.e)
	})
	return more
}

func nopZap() *zap.Logger { return zap.NewNop() }
