package store

import (
	"context"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// Leadership timing. The election key lives on a lease of leaderTTL
// seconds, which etcd ends leaderTTL after the last renewal it received.
// The client's own view of the lease (the session's Done) ends only after
// its last answer plus the TTL: later than etcd's, so a leader cut off
// from etcd would still run its controllers when another server takes
// over. A leader steps down instead once etcd has answered no renewal for
// stepDownAfter, well before etcd can end the lease.
const (
	leaderTTL     = 10
	stepDownAfter = 7 * time.Second
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
		sess, err := concurrency.NewSession(s.client, concurrency.WithTTL(leaderTTL), concurrency.WithContext(ctx))
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
		go s.holdLeadership(lctx, cancel, sess, name)
		fn(lctx)
		cancel()
		rctx, rcancel := context.WithTimeout(context.Background(), 2e9)
		el.Resign(rctx)
		rcancel()
		sess.Close()
	}
	return nil
}

// holdLeadership ends the leader's context (cancel) when its session
// ends, or when etcd has not answered a renewal of the session's lease for
// stepDownAfter.
func (s *Store) holdLeadership(ctx context.Context, cancel context.CancelFunc, sess *concurrency.Session, name string) {
	defer cancel()
	// A second listener on the session's lease: the session renews it,
	// this sees each answer.
	answers, err := s.client.KeepAlive(ctx, sess.Lease())
	if err != nil {
		s.log.Warn("lost leadership", "role", name, "err", err)
		return
	}
	last := time.Now() // the campaign's write was just answered
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			s.log.Warn("lost leadership", "role", name)
			return
		case _, ok := <-answers:
			if !ok {
				if ctx.Err() == nil {
					s.log.Warn("lost leadership", "role", name)
				}
				return
			}
			last = time.Now()
		case <-tick.C:
			if quiet := time.Since(last); quiet > stepDownAfter {
				s.log.Warn("lost leadership", "role", name, "reason", "etcd answered no lease renewal", "for", quiet.Round(time.Millisecond))
				return
			}
		}
	}
}
