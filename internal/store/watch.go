package store

import (
	"context"
	"sync"
)

// Change is one write seen by the cache.
type Change struct {
	Key     string // without the store prefix
	Rev     int64
	Value   []byte // nil when Deleted
	Deleted bool
	// encoded: Value is as etcd holds it (see values.go), not yet
	// decompressed; never so once offered.
	encoded bool
}

// Subscription delivers the changes under a prefix in commit order. It
// never blocks the cache: changes queue until the owner takes them.
type Subscription struct {
	c      *cache
	prefix string
	mu     sync.Mutex
	queue  []Change
	resync bool
	notify chan struct{}
	ready  func() // called instead of notify, if set (SubscribeFunc)
}

// Subscribe follows changes under prefix from now on. A consumer lists the
// prefix after subscribing, then applies changes; when Next reports a
// resync, it lists again (the cache was reloaded and changes were skipped).
func (s *Store) Subscribe(prefix string) *Subscription {
	sub := &Subscription{c: s.cache, prefix: prefix, notify: make(chan struct{}, 1)}
	s.cache.mu.Lock()
	s.cache.addSub(sub)
	s.cache.mu.Unlock()
	return sub
}

// SubscribeFunc is Subscribe for a consumer with no goroutine waiting on
// Ready (whose channel then never fires): the cache calls ready, under its
// lock, when changes may have queued. ready must return at once and must
// not call the store; the consumer calls Take later, from elsewhere.
func (s *Store) SubscribeFunc(prefix string, ready func()) *Subscription {
	sub := &Subscription{c: s.cache, prefix: prefix, ready: ready}
	s.cache.mu.Lock()
	s.cache.addSub(sub)
	s.cache.mu.Unlock()
	return sub
}

// offer queues a change the cache found under sub's prefix.
func (sub *Subscription) offer(ch Change) {
	sub.mu.Lock()
	sub.queue = append(sub.queue, ch)
	sub.mu.Unlock()
	sub.wake()
}

func (sub *Subscription) resyncNow() {
	sub.mu.Lock()
	sub.queue, sub.resync = nil, true
	sub.mu.Unlock()
	sub.wake()
}

func (sub *Subscription) wake() {
	if sub.ready != nil {
		sub.ready()
		return
	}
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// Ready is signalled when changes may have queued: a consumer that waits
// on several things selects on it, then calls Take.
func (sub *Subscription) Ready() <-chan struct{} { return sub.notify }

// Take returns what queued up, without waiting.
func (sub *Subscription) Take() (changes []Change, resync bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	changes, resync = sub.queue, sub.resync
	sub.queue, sub.resync = nil, false
	return changes, resync
}

// Next waits for changes and returns all that queued up.
func (sub *Subscription) Next(ctx context.Context) (changes []Change, resync bool, err error) {
	for {
		changes, resync = sub.Take()
		if len(changes) > 0 || resync {
			return changes, resync, nil
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-sub.notify:
		}
	}
}

// Close stops the subscription.
func (sub *Subscription) Close() {
	sub.c.mu.Lock()
	sub.c.removeSub(sub)
	sub.c.mu.Unlock()
}
