package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/capstanhq/capstan/internal/store"
)

// keyKeeper keeps a live session's key in etcd. Another session of the
// same agent can delete it: one whose open hung while etcd had no quorum
// writes the key after the agent's live session elsewhere did, and
// deletes it when it ends, as its own. The agent, attached elsewhere, then
// looked silent and its instance was replaced. The keeper writes the key
// again when it goes while the session lives; if it cannot (its lease is
// gone), it ends the session so that the agent opens another. It costs
// nothing until the key changes: no goroutine waits.
type keyKeeper struct {
	g   *Gateway
	s   *session
	ctx context.Context // the session's
	sl  *serverLease
	key string
	val store.Session
	mu  sync.Mutex // sub is set after the subscription may have woken
	sub *store.Subscription
	rev atomic.Int64 // the revision of the session's last write of the key

	busy, pending atomic.Bool
	wg            sync.WaitGroup
}

func (g *Gateway) keepKey(ctx context.Context, s *session, sl *serverLease, key string, val store.Session, rev int64) *keyKeeper {
	k := &keyKeeper{g: g, s: s, ctx: ctx, sl: sl, key: key, val: val}
	k.rev.Store(rev)
	k.mu.Lock()
	k.sub = g.st.SubscribeFunc(key, k.wake)
	k.mu.Unlock()
	return k
}

// wake starts a check unless one runs; the store calls it under its
// cache's lock.
func (k *keyKeeper) wake() {
	k.pending.Store(true)
	if k.busy.CompareAndSwap(false, true) {
		k.wg.Add(1)
		go k.run()
	}
}

func (k *keyKeeper) run() {
	defer k.wg.Done()
	for {
		k.pending.Store(false)
		k.check()
		k.busy.Store(false)
		if !k.pending.Load() || !k.busy.CompareAndSwap(false, true) {
			return
		}
	}
}

// check writes the key again if its last change deleted it.
func (k *keyKeeper) check() {
	k.mu.Lock()
	sub := k.sub
	k.mu.Unlock()
	changes, resync := sub.Take()
	gone := false
	if resync {
		_, err := store.Rev(k.ctx, k.g.st, k.key)
		gone = errors.Is(err, store.ErrNotFound)
	}
	for _, ch := range changes {
		if ch.Key == k.key {
			gone = ch.Deleted
		}
	}
	if !gone || k.ctx.Err() != nil || k.sl.ctx.Err() != nil {
		return
	}
	rev, err := k.g.st.Txn().PutWithLease(k.key, k.val, k.sl.l).Commit(k.ctx)
	if err != nil {
		if k.ctx.Err() == nil {
			k.s.end(fmt.Errorf("the session's key was deleted and could not be written again: %w", err))
		}
		return
	}
	k.rev.Store(rev)
	k.g.log.Info("agent session's key was deleted while the session lives; written again", "key", k.key)
}

// stop ends the keeping and returns the revision of the session's last
// write of the key.
func (k *keyKeeper) stop() int64 {
	k.sub.Close()
	k.wg.Wait()
	return k.rev.Load()
}
