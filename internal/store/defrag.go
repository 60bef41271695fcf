package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver"
)

// Compaction frees old revisions but not the database file: etcd keeps
// its keys by revision, so the records that live long (stopped tasks,
// event pages) stay scattered over pages that held the history around
// them, and a page is merged away only when under a quarter full. After
// a rollout at 5,000 instances the embedded member's file was 113-129
// MiB, all of it mapped into this process, for ~35 MiB of live values.
// Only a defragmentation, which copies the live keys into a new file,
// gives that back. It stops every read and write of etcd while it runs,
// so the store runs it only when the member is quiet.
const (
	// DefragMinBytes is the smallest database worth defragmenting.
	DefragMinBytes = 32 << 20
	// defragGrowth is how much larger than after the last
	// defragmentation the database must have grown.
	defragGrowth = 2
	// defragQuietPerSecond is the most revisions a second, over the last
	// compaction period, of a member quiet enough to defragment.
	defragQuietPerSecond = 10
	// defragSpacing is the least time between two defragmentations.
	defragSpacing = time.Minute
)

// Defrag is one defragmentation of the embedded member's database.
type Defrag struct {
	At          time.Time
	BeforeBytes int64
	AfterBytes  int64
	Took        time.Duration
}

// defragger decides when to defragment; the compaction loop calls it.
type defragger struct {
	minBytes int64
	mu       sync.Mutex
	done     []Defrag
	// base is the database's size after the last defragmentation.
	base int64
	last time.Time
}

// due says whether a database of size bytes, after revs revisions in
// the last period, should be defragmented now.
func (d *defragger) due(now time.Time, size, revs int64, period time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	quiet := float64(revs) <= defragQuietPerSecond*period.Seconds()
	return quiet && size >= d.minBytes && size >= defragGrowth*d.base && now.Sub(d.last) >= defragSpacing
}

func (d *defragger) record(r Defrag) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = append(d.done, r)
	d.base, d.last = r.AfterBytes, r.At
}

// failed keeps a failed attempt from being retried before the spacing.
func (d *defragger) failed(at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = at
}

// defrag defragments the embedded member when it is due.
func (s *Store) defrag(revs int64, period time.Duration) {
	defragIfDue(s.embedded.etcd.Server, &s.defrags, revs, period, s.log)
}

// defragIfDue defragments srv's database if d says it is due after revs
// revisions in the last period.
func defragIfDue(srv *etcdserver.EtcdServer, d *defragger, revs int64, period time.Duration, log *slog.Logger) {
	if !d.due(time.Now(), srv.Backend().Size(), revs, period) {
		return
	}
	runDefrag(srv, d, log)
}

// runDefrag defragments srv's database and records it in d, if its disk
// has room for the copy: etcd ends the process when a write meets a full
// disk.
func runDefrag(srv *etcdserver.EtcdServer, d *defragger, log *slog.Logger) {
	be := srv.Backend()
	before := be.Size()
	start := time.Now()
	if free, err := freeBytes(srv.Cfg.DataDir); err == nil && free-before < writeReserve {
		log.Warn("not defragmenting etcd: too little disk free for the copy", "free_mib", free>>20, "db_mib", before>>20)
		d.failed(start)
		return
	}
	// The server's own call: the in-process client's maintenance
	// service has no health notifier and panics on a defragmentation.
	if err := srv.Defragment(); err != nil {
		log.Warn("defragment etcd", "err", err)
		d.failed(start)
		return
	}
	r := Defrag{At: start, BeforeBytes: before, AfterBytes: be.Size(), Took: time.Since(start)}
	d.record(r)
	log.Info("defragmented etcd", "before_mib", before>>20, "after_mib", r.AfterBytes>>20, "took", r.Took)
}

func (d *defragger) list() []Defrag {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Defrag(nil), d.done...)
}

// Defrags are the embedded member's defragmentations so far.
func (s *Store) Defrags() []Defrag { return s.defrags.list() }

// DatabaseSize is the embedded member's database file and the part of it
// in use (the rest is free pages a defragmentation gives back); ok is
// false with an external etcd.
func (s *Store) DatabaseSize() (size, inUse int64, ok bool) {
	if s.embedded == nil {
		return 0, 0, false
	}
	be := s.embedded.etcd.Server.Backend()
	return be.Size(), be.SizeInUse(), true
}

// reclaim defragments the embedded member whose database reached its
// quota once compactions freed enough of it, so that the NOSPACE alarm can
// be cleared; at most once per defragSpacing.
func (s *Store) reclaim(srv *etcdserver.EtcdServer, quota int64) {
	be := srv.Backend()
	if be.Size() < quota*9/10 || be.SizeInUse() >= quota*8/10 {
		return
	}
	s.defrags.mu.Lock()
	wait := time.Since(s.defrags.last) < defragSpacing
	s.defrags.mu.Unlock()
	if !wait {
		runDefrag(srv, &s.defrags, s.log)
	}
}

// defragLockKey is the lock the members of a cluster take to defragment,
// outside any server's prefix: a member's defragmentation stops its reads
// and writes, and two at once could leave the cluster without a quorum.
const defragLockKey = "capstan-etcd/defrag-lock"

// defragLockTTL is the lease on the lock: a member that dies holding it
// frees it after this long.
const defragLockTTL = 60

// defragOneAtATime defragments a cluster member's database when due, only
// while it holds the cluster's defragmentation lock; when another member
// holds it, it tries again after the next compaction period.
func defragOneAtATime(ctx context.Context, srv *etcdserver.EtcdServer, c *clientv3.Client, d *defragger, revs int64, period time.Duration, log *slog.Logger) {
	if !d.due(time.Now(), srv.Backend().Size(), revs, period) {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sess, err := concurrency.NewSession(c, concurrency.WithTTL(defragLockTTL), concurrency.WithContext(ctx))
	if err != nil {
		log.Warn("defragment etcd: no session for the lock", "err", err)
		return
	}
	defer sess.Close()
	mu := concurrency.NewMutex(sess, defragLockKey)
	if err := mu.TryLock(sctx); err != nil {
		if errors.Is(err, concurrency.ErrLocked) {
			log.Info("not defragmenting etcd: another member is", "member", srv.Cfg.Name)
		} else {
			log.Warn("defragment etcd: lock", "err", err)
		}
		return
	}
	log.Info("defragmenting etcd", "member", srv.Cfg.Name, "start", time.Now().Format(time.RFC3339Nano))
	runDefrag(srv, d, log.With("member", srv.Cfg.Name))
	log.Info("defragmentation over", "member", srv.Cfg.Name, "end", time.Now().Format(time.RFC3339Nano))
	uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ucancel()
	if err := mu.Unlock(uctx); err != nil {
		// The session's close below revokes the lease, freeing it anyway.
		log.Warn("defragment etcd: unlock", "err", err)
	}
}
