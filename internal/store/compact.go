package store

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// CompactEvery is how often the store compacts the embedded member's
// history, each time to the revision its cache had applied one period
// earlier: 10 to 20 seconds of history are kept, and never less than the
// cache's watch still needs. etcd's own periodic compaction at 30 s kept
// 30 to 60 s whatever the watch had read: 600 MiB of database, mapped into
// this process, after a rollout at 5,000 instances, of which ~100 MiB were
// live records (260 MiB with 5 s here, 350 MiB less resident). Each
// compaction also walks every key's index, so a shorter period costs CPU:
// at 5 s, 9 s of the server's CPU in a two-minute rollout against 2.6 s.
const CompactEvery = 10 * time.Second

// compact runs until ctx ends. Only an embedded member is compacted this
// way: an external cluster has other readers and its own settings.
func (s *Store) compact(ctx context.Context, every time.Duration) {
	compactLoop(ctx, every, s.client, s.cache.revision, s.compacted.Store, func(revs int64) { s.defrag(revs, every) }, s.log)
}

// compactLoop compacts c's history every period to the revision rev gave
// one period earlier, records it with compacted, then calls defrag with
// the revisions the period saw. Until ctx ends.
func compactLoop(ctx context.Context, every time.Duration, c *clientv3.Client, rev func() int64, compacted func(int64), defrag func(revs int64), log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	var behind, done int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := rev()
		revs := now - behind
		if behind > done {
			// Physical: the defragmentation below must not copy what the
			// compaction is still deleting in the background.
			_, err := c.Compact(ctx, behind, clientv3.WithCompactPhysical())
			switch {
			case err == nil || errors.Is(err, rpctypes.ErrCompacted):
				done = behind
				compacted(behind)
			case ctx.Err() == nil:
				log.Warn("compact etcd history", "rev", behind, "err", err)
			}
		}
		if behind > 0 {
			defrag(revs)
		}
		behind = now
	}
}

// Compacted is the revision the store last compacted the embedded
// member's history to (0: not yet, or an external cluster).
func (s *Store) Compacted() int64 { return s.compacted.Load() }
