// Package controller runs level-triggered reconcile loops: it follows the
// keys under a store prefix, queues each changed key once, and lets workers
// reconcile them one key at a time, retrying failures with back-off.
package controller

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/store"
)

// Reconcile brings the object at key towards its desired state. A positive
// requeue asks to be called again after that long even if nothing changes.
type Reconcile func(ctx context.Context, key string) (requeue time.Duration, err error)

// Loop follows a prefix and reconciles its keys.
type Loop struct {
	Name      string
	Store     *store.Store
	Prefix    string
	Reconcile Reconcile
	Workers   int
	// Resync re-queues every key this often, in the background, to heal
	// anything missed; less often for many keys (resyncInterval).
	Resync time.Duration
	// Follow lists other prefixes whose changes concern this loop's keys.
	Follow []Follow
	// First, when set, says which changes of the loop's own keys go ahead
	// of every other queued key: those on the path a user waits on.
	First func(ch store.Change) bool
	Log   *slog.Logger
	// Counts, when set, counts the reconciles (one value may outlive the
	// loop: a leader's next term counts on).
	Counts *Counts
}

// Counts is how many reconciles a loop called and the time spent in them,
// waits included: which controller a busy server's passes go to.
type Counts struct {
	passes atomic.Int64
	busy   atomic.Int64 // nanoseconds
}

// Get returns the counts so far.
func (c *Counts) Get() (passes int64, busy time.Duration) {
	return c.passes.Load(), time.Duration(c.busy.Load())
}

// Stat is a loop's counts read at one moment, or their difference over a
// span.
type Stat struct {
	Passes  int64   `json:"passes"`
	Seconds float64 `json:"seconds"`
}

func (c *Counts) add(d time.Duration) {
	if c != nil {
		c.passes.Add(1)
		c.busy.Add(int64(d))
	}
}

// Follow maps changes under another prefix to keys of the loop, so that an
// object is reconciled when something it depends on changes (a service
// when one of its tasks does).
type Follow struct {
	Prefix string
	Keys   func(ctx context.Context, ch store.Change) []string
	// Background queues the keys behind every other: for a change that
	// concerns every key (a cluster-wide setting) and that most of them
	// will find nothing to do about.
	Background bool
	// First, when set, says which changes queue their keys ahead of every
	// other (see Loop.First).
	First func(ch store.Change) bool
}

// Run blocks until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	q := newQueue()
	sub := l.Store.Subscribe(l.Prefix)
	defer sub.Close()

	var wg sync.WaitGroup
	for range max(l.Workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.work(ctx, q)
		}()
	}
	resync := time.NewTimer(resyncInterval(l.Resync, l.enqueueAll(ctx, q)))
	defer resync.Stop()
	changes := make(chan []store.Change)
	relist := make(chan struct{}, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ch, again, err := sub.Next(ctx)
			if err != nil {
				return
			}
			if again {
				select {
				case relist <- struct{}{}:
				default:
				}
			}
			select {
			case changes <- ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	type wake struct {
		key string
		p   int
	}
	followed := make(chan []wake)
	for _, f := range l.Follow {
		fsub := l.Store.Subscribe(f.Prefix)
		defer fsub.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ch, again, err := fsub.Next(ctx)
				if err != nil {
					return
				}
				if again {
					// Changes were skipped: which keys they concern is unknown.
					select {
					case relist <- struct{}{}:
					default:
					}
				}
				var w []wake
				for _, c := range ch {
					p := urgent
					switch {
					case f.Background:
						p = background
					case f.First != nil && f.First(c):
						p = first
					}
					for _, k := range f.Keys(ctx, c) {
						w = append(w, wake{k, p})
					}
				}
				select {
				case followed <- w:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			q.shutdown()
			wg.Wait()
			return
		case ch := <-changes:
			for _, c := range ch {
				p := urgent
				if l.First != nil && l.First(c) {
					p = first
				}
				q.addAt(c.Key, p)
			}
		case ws := <-followed:
			for _, w := range ws {
				q.addAt(w.key, w.p)
			}
		case <-relist:
			l.enqueueAll(ctx, q)
		case <-resync.C:
			resync.Reset(resyncInterval(l.Resync, l.enqueueAll(ctx, q)))
		}
	}
}

// enqueueAll queues every key in the background and says how many.
func (l *Loop) enqueueAll(ctx context.Context, q *queue) int {
	items, _, err := store.List[rawValue](ctx, l.Store, l.Prefix, "", 0)
	if err != nil {
		l.Log.Error("list for reconcile", "controller", l.Name, "err", err)
		return 0
	}
	for _, it := range items {
		q.addAt(it.Key, background)
	}
	return len(items)
}

// resyncPerKey spaces resyncs by key count: a reconcile with nothing to do
// costs a fraction of a millisecond (more while the key changes), so a
// resync of n keys every n×30 ms stays a few percent of a core at any size;
// changes, not resyncs, drive the work.
const resyncPerKey = 30 * time.Millisecond

// resyncInterval is the time until the next resync of n keys.
func resyncInterval(base time.Duration, n int) time.Duration {
	return max(base, time.Second, time.Duration(n)*resyncPerKey)
}

// rawValue accepts any JSON value without decoding it.
type rawValue struct{}

func (*rawValue) UnmarshalJSON([]byte) error { return nil }

func (l *Loop) work(ctx context.Context, q *queue) {
	failures := map[string]int{}
	for {
		key, p, ok := q.getAt()
		if !ok {
			return
		}
		start := time.Now()
		requeue, err := l.Reconcile(ctx, key)
		q.done(key)
		l.Counts.add(time.Since(start))
		l.Log.Debug("reconciled", "controller", l.Name, "key", key, "took", time.Since(start), "err", err)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures[key]++
			backoff := min(time.Duration(1<<min(failures[key], 10))*50*time.Millisecond, time.Minute)
			l.Log.Warn("reconcile failed", "controller", l.Name, "key", key, "err", err, "retry_in", backoff)
			q.addAfter(key, backoff, p)
		default:
			delete(failures, key)
			if requeue > 0 {
				q.addAfter(key, requeue, p)
			}
		}
	}
}

// Queue priorities: a key queued urgent is handed out before every key
// queued in the background (resyncs, relists, fan-outs to every key). At
// 5,000 instances a resync alone queued more keys than the workers finished
// between two resyncs, and the keys a change concerned waited behind them.
// A key queued first goes before both: in a rollout of 5,000 instances a
// new instance waited 2.7 s (median) for its daemon behind thousands of
// changes with nothing to do.
const (
	background = 1
	urgent     = 2
	first      = 3
)

// queue holds each key at most once, and never hands the same key to two
// workers at a time.
type queue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	front      []string       // keys queued first, in order
	order      []string       // urgent keys, in order
	later      []string       // background keys, in order
	queued     map[string]int // key → the priority it is queued at
	processing map[string]bool
	dirty      map[string]int // key → priority to queue it at when done
	closed     bool
}

func newQueue() *queue {
	q := &queue{queued: map[string]int{}, processing: map[string]bool{}, dirty: map[string]int{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) add(key string) { q.addAt(key, urgent) }

// addAt queues key at priority p, or raises it to p if it waits at a lower
// one (its old place is then skipped).
func (q *queue) addAt(key string, p int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if q.processing[key] {
		q.dirty[key] = max(q.dirty[key], p)
		return
	}
	if q.queued[key] >= p {
		return
	}
	q.queued[key] = p
	switch p {
	case first:
		q.front = append(q.front, key)
	case urgent:
		q.order = append(q.order, key)
	default:
		q.later = append(q.later, key)
	}
	q.cond.Signal()
}

// addAfter queues key after d at priority p, or urgent if that is
// higher: a key asked to come back (an instance waiting out its daemon's
// first second) keeps the place it had, or gets an urgent one.
func (q *queue) addAfter(key string, d time.Duration, p int) {
	time.AfterFunc(d, func() { q.addAt(key, max(p, urgent)) })
}

// getAt hands out the next key and the priority it was queued at.
func (q *queue) getAt() (string, int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for len(q.front) == 0 && len(q.order) == 0 && len(q.later) == 0 && !q.closed {
			q.cond.Wait()
		}
		if q.closed {
			return "", 0, false
		}
		var key string
		var p int
		switch {
		case len(q.front) > 0:
			key, q.front, p = q.front[0], q.front[1:], first
		case len(q.order) > 0:
			key, q.order, p = q.order[0], q.order[1:], urgent
		default:
			key, q.later, p = q.later[0], q.later[1:], background
		}
		if q.queued[key] != p {
			continue // raised since, or handed out already
		}
		delete(q.queued, key)
		q.processing[key] = true
		return key, p, true
	}
}

func (q *queue) done(key string) {
	q.mu.Lock()
	delete(q.processing, key)
	again := q.dirty[key]
	delete(q.dirty, key)
	q.mu.Unlock()
	if again > 0 {
		q.addAt(key, again)
	}
}

func (q *queue) shutdown() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}
