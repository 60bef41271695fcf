package store

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// Lead blocks until this process is the leader for name, then runs fn with
// a context that ends when leadership is lost or ctx ends. It campaigns
// again after losing, until ctx ends. Only the leader runs controllers.
func (s *Store) Lead(ctx context.Context, name, id string, fn func(ctx context.Context)) error {
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(s.client, concurrency.WithTTL(10), concurrency.WithContext(ctx))
		if err != nil {
			return fmt.Errorf("leader session: %w", err)
		}
		el := concurrency.NewElection(sess, s.prefix+"leader/"+name)
		if err := el.Campaign(ctx, id); err != nil {
			sess.Close()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("campaign for %s: %w", name, err)
		}
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
