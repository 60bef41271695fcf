package fleet

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

// DefaultStoppedRetention is how long a stopped task, and a deregistered
// (INACTIVE) container instance, stay describable. ECS documents "at least
// one hour" for tasks. Kept for ever, a replacement rollout at 5,000
// instances left 15,000 tasks and 5,000 instances behind each time, which
// every server cached and controllers' passes walked.
const DefaultStoppedRetention = time.Hour

// expireBatch is how many records one expiry write deletes, and
// expireMax how many of each kind one pass does: a backlog (an upgrade
// from a version that kept them all) goes over several passes.
const (
	expireBatch = 128
	expireMax   = 10_000
)

// stoppedProbe is what expiry reads of a task record.
type stoppedProbe struct {
	LastStatus string           `json:"lastStatus"`
	StoppedAt  shapes.Timestamp `json:"stoppedAt"`
}

func (p stoppedProbe) expired(cutoff time.Time) bool {
	return p.LastStatus == "STOPPED" && !p.StoppedAt.Time.IsZero() && p.StoppedAt.Time.Before(cutoff)
}

// expiring names a record expiry looks at.
type expiring struct{ cluster, id string }

// firstExpiring orders what a pass found and keeps at most expireMax.
func firstExpiring(found []expiring) []expiring {
	slices.SortFunc(found, func(a, b expiring) int { return cmp.Or(cmp.Compare(a.cluster, b.cluster), cmp.Compare(a.id, b.id)) })
	return found[:min(len(found), expireMax)]
}

// inBatches has visit add each record's write to a transaction, expireBatch
// records at a time, and returns how many writes took. A batch in which a
// record changed since it was read is dropped: the next pass reads it again.
func (s *State) inBatches(ctx context.Context, items []expiring, visit func(*store.Txn, expiring) (bool, error)) (int, error) {
	done := 0
	for len(items) > 0 {
		batch := items[:min(len(items), expireBatch)]
		items = items[len(batch):]
		tx, n := s.Store.Txn(), 0
		for _, e := range batch {
			wrote, err := visit(tx, e)
			if err != nil {
				return done, err
			}
			if wrote {
				n++
			}
		}
		if n == 0 {
			continue
		}
		if _, err := tx.Commit(ctx); err != nil {
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			return done, err
		}
		done += n
	}
	return done, nil
}

// ExpireStoppedTasks deletes the tasks that stopped before cutoff and that
// nothing refers to any more: no instance's manifest holds them and no
// daemon placement names them. It returns how many it deleted.
func (s *State) ExpireStoppedTasks(ctx context.Context, cutoff time.Time) (int, error) {
	var found []expiring
	v, err := s.fleetView(ctx)
	if err != nil {
		return 0, err
	}
	for name, c := range v.f.clusters {
		for id, t := range c.tasks {
			if t.Last == "STOPPED" && !t.stoppedAt.IsZero() && t.stoppedAt.Before(cutoff) && len(c.placedTasks[id]) == 0 && len(c.desiredOn[id]) == 0 {
				found = append(found, expiring{name, id})
			}
		}
	}
	v.done()
	return s.inBatches(ctx, firstExpiring(found), func(tx *store.Txn, e expiring) (bool, error) {
		it, err := store.Get[stoppedProbe](ctx, s.Store, store.TaskKey(e.cluster, e.id))
		if errors.Is(err, store.ErrNotFound) || err == nil && !it.Value.expired(cutoff) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		tx.Delete(it.Key, it.Rev)
		return true, nil
	})
}

// inactiveProbe is what expiry reads of a container instance record.
type inactiveProbe struct {
	Status     string    `json:"status"`
	InactiveAt time.Time `json:"capstanInactiveAt"`
}

// ExpireInactiveInstances deletes the container instances deregistered
// before cutoff that nothing refers to any more: no task (stopped ones
// expire first), manifest, placement, session or credential. An INACTIVE
// record written before InactiveAt existed is stamped now, and so expires
// a retention later. It returns how many it deleted and stamped.
func (s *State) ExpireInactiveInstances(ctx context.Context, cutoff time.Time) (deleted, stamped int, err error) {
	var found, unstamped []expiring
	v, err := s.fleetView(ctx)
	if err != nil {
		return 0, 0, err
	}
	for name, c := range v.f.clusters {
		for id, fi := range c.instances {
			switch {
			case !fi.rec || fi.status != "INACTIVE":
			case fi.inactiveAt.IsZero():
				unstamped = append(unstamped, expiring{name, id})
			case fi.inactiveAt.Before(cutoff) && fi.refs == 0 && !fi.connected && len(fi.desired) == 0 && len(fi.placements) == 0 && v.f.boundTo[id] == 0:
				found = append(found, expiring{name, id})
			}
		}
	}
	v.done()
	now := s.Now().UTC()
	stamped, err = s.inBatches(ctx, firstExpiring(unstamped), func(tx *store.Txn, e expiring) (bool, error) {
		it, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(e.cluster, e.id))
		if errors.Is(err, store.ErrNotFound) || err == nil && (it.Value.Status != "INACTIVE" || !it.Value.InactiveAt.IsZero()) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		ci := it.Value
		ci.InactiveAt = now
		tx.Update(it.Key, it.Rev, ci)
		return true, nil
	})
	if err != nil {
		return 0, stamped, err
	}
	deleted, err = s.inBatches(ctx, firstExpiring(found), func(tx *store.Txn, e expiring) (bool, error) {
		it, err := store.Get[inactiveProbe](ctx, s.Store, store.ContainerInstanceKey(e.cluster, e.id))
		if errors.Is(err, store.ErrNotFound) || err == nil && (it.Value.Status != "INACTIVE" || it.Value.InactiveAt.IsZero() || !it.Value.InactiveAt.Before(cutoff)) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		tx.Delete(it.Key, it.Rev)
		return true, nil
	})
	return deleted, stamped, err
}

// ExpireEvery is how often the leader looks for stopped tasks past
// retention: a twelfth of it, between 5 s and 5 min.
func ExpireEvery(retention time.Duration) time.Duration {
	return min(max(retention/12, 5*time.Second), 5*time.Minute)
}

// RunExpiry deletes stopped tasks and INACTIVE instances older than
// retention until ctx ends.
func (s *State) RunExpiry(ctx context.Context, retention time.Duration, now func() time.Time, log *slog.Logger) {
	ticks, stop := s.expiryTicker(ExpireEvery(retention))
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		cutoff := now().Add(-retention)
		n, err := s.ExpireStoppedTasks(ctx, cutoff)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("expiring stopped tasks", "err", err)
		case n > 0:
			log.Debug("expired stopped tasks", "deleted", n)
		}
		n, stamped, err := s.ExpireInactiveInstances(ctx, cutoff)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("expiring INACTIVE container instances", "err", err)
		case n+stamped > 0:
			log.Debug("expired INACTIVE container instances", "deleted", n, "stamped", stamped)
		}
	}
}

func (s *State) expiryTicker(every time.Duration) (<-chan time.Time, func()) {
	if s.expiryTicks != nil {
		return s.expiryTicks(every)
	}
	t := time.NewTicker(every)
	return t.C, t.Stop
}
