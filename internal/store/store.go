// Package store is the only code that talks to etcd. It keeps every durable
// object as one JSON value under a key, offers typed reads from a watch-fed
// cache with read-your-writes consistency, and revision-checked writes that
// commit atomically or not at all.
package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/capstanhq/capstan/internal/codec"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrConflict means a revision check failed: someone else wrote first.
var ErrConflict = errors.New("store: conflicting write")

// ErrNotFound means the key does not exist.
var ErrNotFound = errors.New("store: not found")

// Config says where the state lives.
type Config struct {
	// DataDir holds the embedded etcd when Endpoints is empty.
	DataDir string
	// Endpoints of an external etcd cluster.
	Endpoints []string
	// Prefix namespaces every key; several Capstan installs may share one etcd.
	Prefix string
	Logger *slog.Logger
	// MaxTxnOps is how many operations the external cluster takes in one
	// transaction (its --max-txn-ops; 0: etcd's default, DefaultMaxTxnOps).
	// The embedded member takes EmbeddedMaxTxnOps.
	MaxTxnOps int
	// CompactEvery is how often the embedded member's history is
	// compacted (0: the default, CompactEvery).
	CompactEvery time.Duration
	// DefragMinBytes is the smallest embedded database the store
	// defragments when etcd is quiet (0: the default, DefragMinBytes).
	DefragMinBytes int64
	// TLS names the files that authenticate the store to an external
	// etcd and it to the store (TLSFiles).
	TLS TLSFiles
	// Sealer seals the secrets records hold (SecretRecord) before they go
	// to etcd; nil writes them in the clear.
	Sealer Sealer
	// QuotaBytes is the embedded member's database quota, past which etcd
	// raises its NOSPACE alarm (0: etcd's default, 2 GiB).
	QuotaBytes int64
}

// Store is a handle on the state.
type Store struct {
	client   *clientv3.Client
	embedded *embedded
	prefix   string
	cache    *cache
	log      *slog.Logger
	// lastWrite is the highest revision this process has committed; reads
	// wait until the cache has applied it.
	lastWrite atomic.Int64
	// waits counts the reads that waited for the cache to apply a
	// revision, and the nanoseconds they waited: how far the watch ran
	// behind the writes, as the readers felt it.
	waits, waitNanos atomic.Int64
	group            grouper
	cancel           context.CancelFunc
	done             chan struct{}
	compacted        atomic.Int64
	defrags          defragger
	maxTxnOps        int
	sealer           Sealer
	space            *space
	reach            *reach // whether etcd answers (reach.go)
	// rotating: the secrets in etcd are sealed under a previous key of
	// sealer's, recorded at sealerRev (sealed.go).
	rotating  bool
	sealerRev int64
}

// Open connects to etcd (starting the embedded member when no endpoints
// are given) and fills the cache.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/capstan/"
	}
	if cfg.MaxTxnOps < 0 {
		return nil, errors.New("store: MaxTxnOps must not be negative")
	}
	s := &Store{prefix: cfg.Prefix, log: cfg.Logger, done: make(chan struct{}), maxTxnOps: cfg.MaxTxnOps, sealer: cfg.Sealer, reach: newReach()}
	s.defrags.minBytes = cfg.DefragMinBytes
	if s.defrags.minBytes <= 0 {
		s.defrags.minBytes = DefragMinBytes
	}
	if len(cfg.Endpoints) == 0 {
		if cfg.DataDir == "" {
			return nil, errors.New("store: a data dir or etcd endpoints are required")
		}
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("etcd data dir: %w", err)
		}
		if err := checkStart(cfg.DataDir, freeBytes); err != nil {
			return nil, err
		}
		e, c, err := startMember(ctx, memberOpts{dir: cfg.DataDir, log: s.log, quota: cfg.QuotaBytes, etcdLog: etcdLogger(s.log)})
		if err != nil {
			return nil, classify(err)
		}
		s.embedded, s.client = e, c
		s.space = newSpace(cfg.DataDir, s.log)
		s.log.Info("embedded etcd started", "client_url", e.clientURL())
	} else {
		c, tc, err := dialExternal(ctx, cfg.Endpoints, cfg.TLS)
		if err != nil {
			return nil, err
		}
		s.client = c
		s.space = newSpace("", s.log)
		if err := awaitEtcd(ctx, c, s.prefix, tc, s.log); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := s.checkSchema(ctx); err != nil {
		s.closeClient()
		return nil, err
	}
	s.cache = newCache(s.client, s.prefix, s.log)
	if err := s.cache.load(ctx); err != nil {
		s.closeClient()
		return nil, err
	}
	if err := s.checkSealer(ctx); err != nil {
		s.closeClient()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		watched := make(chan struct{})
		go func() { defer close(watched); s.watchSpace(runCtx) }()
		defer func() { <-watched }()
		probed := make(chan struct{})
		go func() { defer close(probed); s.probe(runCtx) }()
		defer func() { <-probed }()
		if s.embedded == nil {
			s.cache.run(runCtx)
			return
		}
		compacted := make(chan struct{})
		every := cfg.CompactEvery
		if every <= 0 {
			every = CompactEvery
		}
		go func() { defer close(compacted); s.compact(runCtx, every) }()
		s.cache.run(runCtx)
		<-compacted
	}()
	return s, nil
}

// Close stops the cache and, when embedded, etcd itself.
func (s *Store) Close() {
	s.cancel()
	<-s.done
	s.closeClient()
}

func (s *Store) closeClient() {
	s.client.Close()
	if s.embedded != nil {
		s.embedded.close()
	}
}

// MaxTxnOps is how many operations a transaction may hold.
func (s *Store) MaxTxnOps() int {
	switch {
	case s.embedded != nil:
		return EmbeddedMaxTxnOps
	case s.maxTxnOps > 0:
		return s.maxTxnOps
	}
	return DefaultMaxTxnOps
}

// Ready reports whether the cache is serving.
func (s *Store) Ready() bool { return s.cache.ready() }

// Revision is the newest revision the cache has applied.
func (s *Store) Revision() int64 { return s.cache.revision() }

// sync waits until the cache reflects every write this process committed,
// or, for scoped reads, every write made in the scope.
func (s *Store) sync(ctx context.Context) error {
	if ctx.Value(syncedKey{s}) != nil {
		return nil
	}
	rev := s.lastWrite.Load()
	if sc, ok := ctx.Value(scopeKey{s}).(scopeCtx); ok && sc.reads {
		rev = sc.s.last.Load()
	}
	return s.WaitFor(ctx, rev)
}

// WaitFor waits until the cache has applied revision rev: for a caller
// that knows the revision of a write it did not make itself.
func (s *Store) WaitFor(ctx context.Context, rev int64) error {
	if s.cache.revision() >= rev {
		return nil
	}
	start := time.Now()
	err := s.cache.waitFor(ctx, rev)
	s.waits.Add(1)
	s.waitNanos.Add(int64(time.Since(start)))
	return err
}

// CacheWaits reports how many reads so far waited for the cache to apply
// a revision (a write's, mostly), and their time waiting in all.
func (s *Store) CacheWaits() (int64, time.Duration) {
	return s.waits.Load(), time.Duration(s.waitNanos.Load())
}

// Scope is one caller's consistency (a client session, in the usual
// sense): reads made in it see every write made in it and everything the
// process had written when it began, but need not wait for what other
// callers or controllers wrote since. The API serves read-only calls this
// way: waiting for the process's latest write made every Describe wait
// for the watch behind busy controllers.
type Scope struct{ last atomic.Int64 }

// NewScope starts a scope that has seen every write so far, so that a
// caller whose scope was forgotten loses nothing by starting another.
func (s *Store) NewScope() *Scope {
	ss := &Scope{}
	ss.last.Store(s.lastWrite.Load())
	return ss
}

type scopeKey struct{ s *Store }

type scopeCtx struct {
	s     *Scope
	reads bool
}

// InScope returns ctx whose commits are noted in ss. With reads, its reads
// wait only for the scope's writes; without, they wait for the process's
// as other reads do (a call that writes reads at the latest, so that its
// revision checks do not fail on what the process already wrote).
func (s *Store) InScope(ctx context.Context, ss *Scope, reads bool) context.Context {
	return context.WithValue(ctx, scopeKey{s}, scopeCtx{ss, reads})
}

type syncedKey struct{ s *Store }

// ReadOnly waits once for this process's writes to reach the cache and
// returns a context whose reads skip that wait. For read-only passes over
// many keys: while controllers write, each read would otherwise wait for
// the latest write again. Writes must not use it (a retry would not see
// its own conflict resolved).
func (s *Store) ReadOnly(ctx context.Context) (context.Context, error) {
	if err := s.sync(ctx); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, syncedKey{s}, true), nil
}

// Item is a decoded value with its key and modification revision.
type Item[T any] struct {
	Key   string
	Rev   int64
	Value T
}

// Get reads one object from the cache.
func Get[T any](ctx context.Context, s *Store, key string) (Item[T], error) {
	var it Item[T]
	if err := s.sync(ctx); err != nil {
		return it, err
	}
	e, ok := s.cache.get(s.prefix + key)
	if ok && e.cold {
		kvs, err := s.fillCold(ctx, []kv{{s.prefix + key, e}})
		if err != nil {
			return it, err
		}
		if ok = len(kvs) == 1; ok {
			e = kvs[0].entry
		}
	}
	if !ok {
		return it, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	it.Key, it.Rev = key, e.rev
	if err := withJSON(e.value, func(b []byte) error { return codec.Unmarshal(b, &it.Value) }); err != nil {
		return it, fmt.Errorf("decode %s: %w", key, err)
	}
	if err := s.openIn(&it.Value); err != nil {
		return it, fmt.Errorf("decode %s: %w", key, err)
	}
	return it, nil
}

// Rev is the modification revision of the object at key, read from the
// cache without decoding it: a caller holding a decoded copy at that
// revision need not decode it again.
func Rev(ctx context.Context, s *Store, key string) (int64, error) {
	if err := s.sync(ctx); err != nil {
		return 0, err
	}
	e, ok := s.cache.get(s.prefix + key)
	if !ok {
		return 0, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return e.rev, nil
}

// List reads the objects under prefix in key order, starting after the key
// `after` (empty for the beginning), at most limit of them (0 for all).
// more reports whether objects remain.
func List[T any](ctx context.Context, s *Store, prefix, after string, limit int) (items []Item[T], more bool, err error) {
	if err := s.sync(ctx); err != nil {
		return nil, false, err
	}
	// Decoded after the scan (values are never changed in place), which
	// only copies the entries.
	var kvs []kv
	more = s.cache.scan(s.prefix+prefix, afterKey(s.prefix, after), limit, func(k string, e entry) bool {
		kvs = append(kvs, kv{k, e})
		return true
	})
	if kvs, err = s.fillCold(ctx, kvs); err != nil {
		return nil, false, err
	}
	if len(kvs) == 0 {
		return nil, more, nil
	}
	items = make([]Item[T], len(kvs))
	_, secret := any(&items[0].Value).(secretOpener)
	for i, e := range kvs {
		if err := withJSON(e.value, func(b []byte) error { return codec.Unmarshal(b, &items[i].Value) }); err != nil {
			return nil, false, fmt.Errorf("decode %s: %w", e.key, err)
		}
		if secret {
			if err := s.openIn(&items[i].Value); err != nil {
				return nil, false, fmt.Errorf("decode %s: %w", e.key, err)
			}
		}
		items[i].Key, items[i].Rev = e.key[len(s.prefix):], e.rev
	}
	return items, more, nil
}

// ListRaw returns the stored JSON of every object under prefix, in key
// order, for callers that pass it on as it is. The slices may be shared
// with the cache: they must not be changed.
func ListRaw(ctx context.Context, s *Store, prefix string) ([][]byte, error) {
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	// Sessions build their manifests this way: the values alone, unless
	// the prefix holds records the cache keeps no value for.
	var out [][]byte
	cold := false
	var bad error
	s.cache.scan(s.prefix+prefix, "", 0, func(k string, e entry) bool {
		cold = e.cold
		if cold {
			return false
		}
		v, err := s.cache.decode(k, e.value)
		if err != nil {
			bad = err
			return false
		}
		out = append(out, v)
		return true
	})
	if bad != nil {
		return nil, bad
	}
	if !cold {
		return out, nil
	}
	var kvs []kv
	s.cache.scan(s.prefix+prefix, "", 0, func(k string, e entry) bool {
		kvs = append(kvs, kv{k, e})
		return true
	})
	kvs, err := s.fillCold(ctx, kvs)
	if err != nil {
		return nil, err
	}
	out = make([][]byte, len(kvs))
	for i, e := range kvs {
		if out[i], err = s.cache.decode(e.key, e.value); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Keys returns the keys under prefix in order, after the key `after`, at
// most limit of them (0 for all), without their values: for callers that
// know enough of each object from elsewhere to skip decoding it. more
// reports whether keys remain.
func Keys(ctx context.Context, s *Store, prefix, after string, limit int) (keys []string, more bool, err error) {
	if err := s.sync(ctx); err != nil {
		return nil, false, err
	}
	more = s.cache.scan(s.prefix+prefix, afterKey(s.prefix, after), limit, func(k string, _ entry) bool {
		keys = append(keys, k[len(s.prefix):])
		return true
	})
	return keys, more, nil
}

// Revisions returns the keys under prefix in order, after the key `after`,
// at most limit of them (0 for all), with their revisions and without their
// values: for writes that only check revisions (a delete of old records).
func Revisions(ctx context.Context, s *Store, prefix, after string, limit int) (items []Item[struct{}], more bool, err error) {
	if err := s.sync(ctx); err != nil {
		return nil, false, err
	}
	more = s.cache.scan(s.prefix+prefix, afterKey(s.prefix, after), limit, func(k string, e entry) bool {
		items = append(items, Item[struct{}]{Key: k[len(s.prefix):], Rev: e.rev})
		return true
	})
	return items, more, nil
}

func afterKey(prefix, after string) string {
	if after == "" {
		return ""
	}
	return prefix + after
}

// Count returns the number of keys under prefix.
func (s *Store) Count(ctx context.Context, prefix string) (int, error) {
	if err := s.sync(ctx); err != nil {
		return 0, err
	}
	n := 0
	s.cache.scan(s.prefix+prefix, "", 0, func(string, entry) bool { n++; return true })
	return n, nil
}

// Txn collects writes that commit together or not at all.
type Txn struct {
	s     *Store
	cmps  []clientv3.Cmp
	ops   []clientv3.Op
	err   error
	after []func()
}

// OnCommit runs fn once the transaction has committed (never if it fails),
// for side effects such as events that must follow the write. Commit
// returns after every fn has; several run side by side, so each must not
// depend on another's order.
func (t *Txn) OnCommit(fn func()) *Txn {
	t.after = append(t.after, fn)
	return t
}

// Txn starts a transaction.
func (s *Store) Txn() *Txn { return &Txn{s: s} }

func (t *Txn) put(key string, v any) {
	if b, ok := t.encode(key, v); ok {
		t.ops = append(t.ops, clientv3.OpPut(t.s.prefix+key, b))
	}
}

// encode is what goes to etcd for v: its JSON with its secrets sealed,
// compressed when that pays. A failure fails the transaction.
func (t *Txn) encode(key string, v any) (string, bool) {
	if t.err != nil {
		return "", false
	}
	v, err := t.s.sealFor(v)
	if err != nil {
		t.err = fmt.Errorf("seal %s: %w", key, err)
		return "", false
	}
	enc, err := codec.Encode(v)
	if err != nil {
		t.err = fmt.Errorf("encode %s: %w", key, err)
		return "", false
	}
	defer enc.Release()
	b := enc.Bytes()
	out := encodeValue(b)
	if len(out) > 0 && unsafe.StringData(out) == &b[0] {
		out = strings.Clone(out) // kept as JSON: copied out of the pooled buffer
	}
	return out, true
}

// Create writes key, which must not exist.
func (t *Txn) Create(key string, v any) *Txn {
	t.cmps = append(t.cmps, clientv3.Compare(clientv3.CreateRevision(t.s.prefix+key), "=", 0))
	t.put(key, v)
	return t
}

// Update writes key, which must still be at revision rev.
func (t *Txn) Update(key string, rev int64, v any) *Txn {
	t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(t.s.prefix+key), "=", rev))
	t.put(key, v)
	return t
}

// Delete removes key, which must still be at revision rev.
func (t *Txn) Delete(key string, rev int64) *Txn {
	t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(t.s.prefix+key), "=", rev))
	t.ops = append(t.ops, clientv3.OpDelete(t.s.prefix+key))
	return t
}

// Unchanged requires key to still be at revision rev (0: still absent)
// without writing it.
func (t *Txn) Unchanged(key string, rev int64) *Txn {
	t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(t.s.prefix+key), "=", rev))
	return t
}

// Commit applies the transaction and returns its revision. ErrConflict
// means a revision check failed and nothing was written.
func (t *Txn) Commit(ctx context.Context) (int64, error) {
	if t.err != nil {
		return 0, t.err
	}
	if len(t.ops) == 0 {
		return t.s.cache.revision(), nil
	}
	if err := t.s.space.admit(int64(t.size()), t.puts()); err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, commitTimeout)
	resp, err := t.s.client.Txn(cctx).If(t.cmps...).Then(t.ops...).Commit()
	cancel()
	if err != nil {
		if unavailable(ctx, err) {
			err = unavailableErr(err)
		}
		return 0, fmt.Errorf("etcd txn: %w", classify(err))
	}
	if !resp.Succeeded {
		t.conflicted(ctx, resp.Header.Revision)
		return 0, ErrConflict
	}
	t.committed(ctx, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// conflicted makes the scope's next reads wait for rev, the store's
// revision when a check failed: it holds the write that came first, which
// the scope's cache reads may not have seen yet, and a retry must.
func (t *Txn) conflicted(ctx context.Context, rev int64) {
	if sc, ok := ctx.Value(scopeKey{t.s}).(scopeCtx); ok {
		raise(&sc.s.last, rev)
	}
}

// committed notes a commit at rev and runs what waited for it.
func (t *Txn) committed(ctx context.Context, rev int64) {
	t.s.noteWrite(rev)
	if sc, ok := ctx.Value(scopeKey{t.s}).(scopeCtx); ok {
		raise(&sc.s.last, rev)
	}
	switch len(t.after) {
	case 0:
	case 1:
		t.after[0]()
	default:
		// A write of hundreds of instances (a rollout's batch) has an event
		// each: one after another, each waited for its own event write
		// (1.5 s a write at 5,000 instances); side by side they share them.
		// A few at a time: hundreds at once took the cores from API calls.
		var wg sync.WaitGroup
		sem := make(chan struct{}, hooksAtOnce)
		for _, fn := range t.after {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				fn()
			})
		}
		wg.Wait()
	}
}

// hooksAtOnce bounds the OnCommit hooks of one write running together.
const hooksAtOnce = 8

func (s *Store) noteWrite(rev int64) { raise(&s.lastWrite, rev) }

// raise sets a to rev unless it is already higher.
func raise(a *atomic.Int64, rev int64) {
	for {
		cur := a.Load()
		if rev <= cur || a.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// Retry runs fn until it returns something other than ErrConflict, a
// bounded number of times; fn must re-read what it writes on every call.
// Waits are jittered so that the losers of one round do not collide again.
func Retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := range 64 {
		if err = fn(); !errors.Is(err, ErrConflict) {
			return err
		}
		wait := time.Duration(rand.Int64N(int64(min(attempt+1, 16)) * int64(time.Millisecond)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return err
}
