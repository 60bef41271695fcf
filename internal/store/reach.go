package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Reachability. A server that cannot reach etcd (the cluster lost its
// quorum, or this server is cut off from it) must not keep agents and
// clients that another server could serve: it fails its health check and
// ends its agent sessions. A linearizable read needs etcd's leader, so it
// answers only while this server reaches a quorum; one goes out every
// probeEvery, each bounded by unreachableAfter, several in flight at once
// so that one stuck on a stopped member does not hold back the others.
// A server is unreachable after as long a silence as makes a leader step
// down: a busy etcd that is slow to answer does not send agents away.
const (
	probeEvery       = time.Second
	unreachableAfter = stepDownAfter
)

type reach struct {
	mu      sync.Mutex
	last    time.Time // the last answer
	lastErr error     // the last probe's failure since
	down    bool
	changed chan struct{} // closed and replaced on each change of down
}

func newReach() *reach { return &reach{last: time.Now(), changed: make(chan struct{})} }

// Reachable reports whether etcd answered a linearizable read within the
// last unreachableAfter; when not, reason says for how long it has not.
func (s *Store) Reachable() (ok bool, reason string) {
	r := s.reach
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.down {
		return true, ""
	}
	reason = fmt.Sprintf("the store (etcd) is unavailable: no quorum, or not reachable from this server: no answer for %s", time.Since(r.last).Round(time.Second))
	if r.lastErr != nil {
		reason += fmt.Sprintf(" (%v)", r.lastErr)
	}
	return false, reason
}

// ReachChanged returns a channel closed when Reachable's answer next
// changes.
func (s *Store) ReachChanged() <-chan struct{} {
	s.reach.mu.Lock()
	defer s.reach.mu.Unlock()
	return s.reach.changed
}

func (r *reach) set(down bool) bool {
	if r.down == down {
		return false
	}
	r.down = down
	close(r.changed)
	r.changed = make(chan struct{})
	return true
}

// probe reads etcd every probeEvery until ctx ends and updates Reachable.
func (s *Store) probe(ctx context.Context) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	r := s.reach
	r.mu.Lock()
	r.last = time.Now() // the store has just opened
	r.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, unreachableAfter)
			_, err := s.client.Get(pctx, s.prefix+schemaKey, clientv3.WithCountOnly())
			cancel()
			if ctx.Err() != nil {
				return
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if err == nil {
				r.last, r.lastErr = time.Now(), nil
				if r.set(false) {
					s.log.Info("etcd reachable again")
				}
				return
			}
			r.lastErr = err
		})
		r.mu.Lock()
		if quiet := time.Since(r.last); quiet > unreachableAfter && r.set(true) {
			s.log.Warn("etcd unreachable: failing the health check and ending agent sessions", "quiet_for", quiet.Round(time.Millisecond), "err", r.lastErr)
		}
		r.mu.Unlock()
	}
}
