package store

import (
	"context"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// Lead blocks until this process is the leader for name, then runs fn with
// a context that ends when leadership is lost or ctx ends. It campaigns
// again after losing, until ctx ends. Only the leader runs controllers.
func (s *Store) Lead(ctx context.Context, name, id string, fn func(ctx context.Context)) error {
	backoff := time.Second
	// A session or a campaign fails while etcd refuses writes (out of
	// space): waited out, or the controllers would stop for good.
	retry := func(what string, err error) {
		s.log.Warn("leader election failed; retrying", "role", name, "step", what, "err", classify(err), "retry_in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(s.client, concurrency.WithTTL(10), concurrency.WithContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			retry("session", err)
			continue
		}
		el := concurrency.NewElection(sess, s.prefix+"leader/"+name)
		if err := el.Campaign(ctx, id); err != nil {
			sess.Close()
			if ctx.Err() != nil {
				return nil
			}
			retry("campaign", err)
			continue
		}
		backoff = time.Second
		s.log.Info("leading", "role", name, "id", id)
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-sess.Done():
				s.log.Warn("lost leadership", "role", name)
			case <-lctx.Done():
			}
			cancel()
		}()
		fn(lctx)
		cancel()
		rctx, rcancel := context.WithTimeout(context.Background(), 2e9)
		el.Resign(rctx)
		rcancel()
		sess.Close()
	}
	return nil
}
