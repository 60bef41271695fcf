package fleet

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// DefaultEventRetention is how long events are kept unless configured.
const DefaultEventRetention = time.Hour

// DefaultEventLimit is the most events a cluster keeps unless configured:
// a fleet of thousands emits hundreds of thousands of task events an hour,
// each a record in etcd and in every server's cache. The oldest go first.
const DefaultEventLimit = 20000

const (
	// eventBucket is how many events' worth of time share one lease.
	eventBucket = time.Minute
	// emitTimeout bounds the one write an event costs its producer.
	EmitTimeout = 5 * time.Second
	// eventLookback is how far behind the cursor a listing looks for events
	// committed late (their ID was taken before a slower write finished).
	// It must exceed emitTimeout.
	eventLookback = 30 * time.Second
	MaxEventWait  = 20
)

// Emitter records events in the store. The events of one write are one
// page (eventpages.go), attached to a lease shared by every page of the
// same minute, so events expire after the retention without a cleanup job
// and without a lease per event.
type Emitter struct {
	st        *store.Store
	log       *slog.Logger
	now       func() time.Time
	account   string
	region    string
	retention time.Duration
	limit     int
	ids       eventIDs

	mu     sync.Mutex
	leases map[int64]*store.Lease // by bucket start, unix seconds
	// emitted counts events per cluster since its last trim; trimming
	// marks clusters being trimmed.
	emitted  map[string]int
	trimming map[string]bool
	// pending events wait for the writer, which runs while there are any.
	pending []*pendingEvent
	writing bool
	// queued and settled count the events given to the writer and those
	// it has written (or given up on); settledCh is closed, and replaced,
	// whenever settled grows.
	queued, settled uint64
	settledCh       chan struct{}
	writtenRev      int64  // of the latest event write
	backlog         uint64 // maxBacklog; tests lower it

	// ending cancels long polls when the server shuts down.
	Ending context.Context
	end    context.CancelFunc
}

func newEmitter(st *store.Store, log *slog.Logger, now func() time.Time, a ARNs, retention time.Duration, limit int) *Emitter {
	if retention <= 0 {
		retention = DefaultEventRetention
	}
	if limit <= 0 {
		limit = DefaultEventLimit
	}
	ending, end := context.WithCancel(context.Background())
	return &Emitter{st: st, log: log, now: now, account: a.Account, region: a.region, retention: retention, limit: limit,
		leases: map[int64]*store.Lease{}, emitted: map[string]int{}, trimming: map[string]bool{}, Ending: ending, end: end,
		settledCh: make(chan struct{}), backlog: maxBacklog}
}

// maxBacklog bounds the events a producer may leave to the writer without
// waiting: past it, Record waits for its event's write, as Emit does.
const maxBacklog = 4096

// Events returns the service's event emitter.
func (s *State) Events() *Emitter { return s.events }

// Emit stamps ev with its ID, time, account and region and writes it under
// the cluster. The write outlives the caller's cancellation: the change the
// event reports has already happened.
func (e *Emitter) Emit(ctx context.Context, cluster string, ev events.Event) error {
	if cluster == "" {
		return errors.New("event without a cluster")
	}
	p, _ := e.enqueue(cluster, ev, false)
	return e.await(ctx, p)
}

// Record is Emit for producers whose own operation must not fail because
// an event could not be written: the writer logs a failure instead. It
// does not wait for the write unless the writer is maxBacklog behind, so
// an agent's report is not held up by its event (its state is already
// written, and a report sent again after a crash would not record the
// event either); ListEvents waits for the events recorded before it.
func (e *Emitter) Record(ctx context.Context, cluster string, ev events.Event) {
	if cluster == "" {
		e.log.Warn("event without a cluster not recorded", "detail_type", ev.DetailType)
		return
	}
	if p, full := e.enqueue(cluster, ev, true); full {
		e.await(ctx, p)
	}
}

// enqueue stamps ev with its ID, time, account and region and hands it to
// the writer; full reports a writer maxBacklog behind.
func (e *Emitter) enqueue(cluster string, ev events.Event, logFailure bool) (p *pendingEvent, full bool) {
	now := e.now()
	ev.Version, ev.Source = "0", events.Source
	ev.ID = e.ids.next(now)
	ev.Time = events.EventTime(now)
	ev.Account, ev.Region = e.account, e.region
	if ev.Resources == nil {
		ev.Resources = []string{}
	}
	p = &pendingEvent{cluster: cluster, ev: ev, bucket: now.Truncate(eventBucket).Unix(), done: make(chan error, 1), logFailure: logFailure}
	e.mu.Lock()
	e.pending = append(e.pending, p)
	e.queued++
	full = e.queued-e.settled > e.backlog
	if !e.writing {
		e.writing = true
		go e.write()
	}
	e.mu.Unlock()
	return p, full
}

// await waits for p's write. Only the write's outcome is returned: a
// caller whose context ended meanwhile still has its event written.
func (e *Emitter) await(ctx context.Context, p *pendingEvent) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), EmitTimeout)
	defer cancel()
	select {
	case err := <-p.done:
		return err
	case <-wctx.Done():
		return fmt.Errorf("record %s event: %w", p.ev.DetailType, wctx.Err())
	}
}

// Settle waits until every event recorded before the call is written (or
// given up on) and readable, or ctx ends.
func (e *Emitter) Settle(ctx context.Context) error {
	e.mu.Lock()
	upTo := e.queued
	for e.settled < upTo {
		ch := e.settledCh
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.mu.Lock()
	}
	rev := e.writtenRev
	e.mu.Unlock()
	return e.st.WaitFor(ctx, rev)
}

// pendingEvent is an event waiting for its write.
type pendingEvent struct {
	cluster    string
	ev         events.Event
	bucket     int64
	done       chan error
	logFailure bool // nobody waits for the outcome
}

// maxEventBatch bounds one event write, and so a page (~200 KB at most).
// A page is also at most a twentieth of the limit: the limit deletes whole
// pages, and keeps within a page of it.
const maxEventBatch = 100

// write commits queued events until none are left. Events that queue while
// a write is in flight go together in the next one: a busy fleet's events
// cost one transaction per batch instead of one each.
func (e *Emitter) write() {
	for {
		e.mu.Lock()
		batch := e.pending[:min(len(e.pending), maxEventBatch, max(e.limit/20, 1))]
		e.pending = e.pending[len(batch):]
		if len(batch) == 0 {
			e.pending, e.writing = nil, false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		rev, err := e.commit(batch)
		for _, p := range batch {
			p.done <- err
			if err != nil && p.logFailure {
				e.log.Warn("event not recorded", "cluster", p.cluster, "detail_type", p.ev.DetailType, "err", err)
			}
		}
		e.mu.Lock()
		e.settled += uint64(len(batch))
		e.writtenRev = max(e.writtenRev, rev)
		close(e.settledCh)
		e.settledCh = make(chan struct{})
		e.mu.Unlock()
	}
}

func (e *Emitter) commit(batch []*pendingEvent) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), EmitTimeout)
	defer cancel()
	pages := newEventPages(batch)
	for attempt := 0; ; attempt++ {
		tx := e.st.Txn()
		used := map[int64]*store.Lease{}
		for cluster, ps := range pages {
			// The newest event's bucket: every event of the page lives
			// at least the retention.
			bucket := ps[0].bucket
			page := eventPage{Events: make([]events.Event, len(ps))}
			for i, p := range ps {
				bucket = max(bucket, p.bucket)
				page.Events[i] = p.ev
			}
			l, ok := used[bucket]
			if !ok {
				var err error
				if l, err = e.lease(ctx, bucket); err != nil {
					return 0, err
				}
				used[bucket] = l
			}
			tx.PutWithLease(eventPageKey(cluster, ps[0].ev.ID, len(ps)), page, l)
		}
		rev, err := tx.Commit(ctx)
		if err == nil {
			for _, p := range batch {
				e.emittedOne(p.cluster)
			}
			return rev, nil
		}
		// A lease may have gone (etcd restored, or a long pause): new ones
		// are granted once before giving up.
		for b, l := range used {
			e.forget(b, l)
		}
		if attempt == 1 {
			return 0, fmt.Errorf("record %d events: %w", len(batch), err)
		}
	}
}

// emittedOne starts a trim of the cluster's events once every twentieth
// of the limit, in the background: the producer does not wait for it, and
// one trim at a time runs per cluster.
func (e *Emitter) emittedOne(cluster string) {
	e.mu.Lock()
	e.emitted[cluster]++
	due := e.emitted[cluster] >= max(e.limit/20, 1) && !e.trimming[cluster]
	if due {
		e.emitted[cluster], e.trimming[cluster] = 0, true
	}
	e.mu.Unlock()
	if !due {
		return
	}
	go func() {
		defer func() {
			e.mu.Lock()
			delete(e.trimming, cluster)
			e.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(e.Ending, time.Minute)
		defer cancel()
		if err := e.trim(ctx, cluster); err != nil && ctx.Err() == nil {
			e.log.Warn("trim events", "cluster", cluster, "err", err)
		}
	}()
}

// trim deletes a cluster's oldest events beyond the limit.
func (e *Emitter) trim(ctx context.Context, cluster string) error {
	prefix := store.EventPrefix(cluster)
	pages, _, err := store.Revisions(ctx, e.st, prefix, "", 0)
	if err != nil {
		return err
	}
	n := 0
	for _, p := range pages {
		n += pageCount(prefix, p.Key)
	}
	// Whole pages, oldest first, until no more than the limit are left.
	drop := 0
	for ; drop < len(pages) && n > e.limit; drop++ {
		n -= pageCount(prefix, pages[drop].Key)
	}
	old := pages[:drop]
	for chunk := range slices.Chunk(old, 100) {
		tx := e.st.Txn()
		for _, it := range chunk {
			tx.Delete(it.Key, it.Rev)
		}
		// A conflict is another server trimming the same events.
		if _, err := tx.Commit(ctx); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return nil
}

// EndWaits returns every ListEvents long poll now, and any later one at
// once, so that a server shutting down is not held up by them.
func (e *Emitter) EndWaits() { e.end() }

func (e *Emitter) lease(ctx context.Context, bucket int64) (*store.Lease, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l, ok := e.leases[bucket]; ok {
		return l, nil
	}
	// Granted at or after the bucket's start, so every event of the bucket
	// lives at least the retention.
	l, err := e.st.Grant(ctx, e.retention+eventBucket)
	if err != nil {
		return nil, fmt.Errorf("event lease: %w", err)
	}
	for b := range e.leases {
		if b < bucket-int64(2*eventBucket/time.Second) {
			delete(e.leases, b) // the lease runs out on its own
		}
	}
	e.leases[bucket] = l
	return l, nil
}

func (e *Emitter) forget(bucket int64, l *store.Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leases[bucket] == l {
		delete(e.leases, bucket)
	}
}

// taskChanged records a task state change for a task just written.
func (s *State) taskChanged(ctx context.Context, t store.Task) {
	s.events.Record(ctx, t.Cluster, events.TaskStateChangeEvent(s.TaskView(t, false), s.Now()))
}

// instanceChanged records a container instance state change for an
// instance just written.
func (s *State) InstanceChanged(ctx context.Context, ci store.ContainerInstance) {
	v := ci.ContainerInstance
	// Whether the agent is connected as the view has it now, without
	// waiting for this process's latest write: the event is recorded in
	// the order of the write it reports as nearly as can be (each wait let
	// other writers' events go first).
	s.model.mu.RLock()
	fi := fleetView{s.model}.cluster(ci.Cluster).instances[ci.ID]
	v.AgentConnected = ptr(fi != nil && fi.connected)
	s.model.mu.RUnlock()
	s.events.Record(ctx, ci.Cluster, events.ContainerInstanceStateChangeEvent(v, s.ARNs.Cluster(ci.Cluster), s.Now()))
}

// DaemonStartImpaired records that a daemon task did not start on an
// instance; failureType is events.TaskFailedToRun (taskArn names the task)
// or events.TaskCreationFailed. It fits the daemons controller's hook.
func (s *State) DaemonStartImpaired(ctx context.Context, ci store.ContainerInstance, d store.Daemon, taskArn, failureType, reason string) {
	s.events.Record(ctx, ci.Cluster, events.DaemonTaskStartImpairedEvent(events.StartFailure{
		FailureType:             failureType,
		ClusterArn:              d.ClusterArn,
		ContainerInstanceArn:    ci.ContainerInstanceArn,
		TaskArn:                 taskArn,
		DaemonArn:               d.Arn,
		DaemonRevisionArn:       d.RevisionArn,
		DaemonTaskDefinitionArn: d.Spec.TaskDefinitionArn,
		CapacityProviderName:    ci.CapacityProviderName,
		CreatedAt:               s.Now(),
		Reason:                  reason,
	}))
}

// eventIDs hands out UUIDv7s (RFC 9562): the millisecond time leads, so
// they sort by time as strings, and a counter in the next 12 bits keeps
// one process's IDs strictly increasing within a millisecond.
type eventIDs struct {
	mu    sync.Mutex
	ms    int64
	count uint16
}

func (g *eventIDs) next(now time.Time) string {
	g.mu.Lock()
	ms := now.UnixMilli()
	switch {
	case ms > g.ms:
		var b [2]byte
		rand.Read(b[:])
		g.ms, g.count = ms, binary.BigEndian.Uint16(b[:])&0x7ff // room to count up
	case g.count == 0xfff:
		g.ms, g.count = g.ms+1, 0 // borrow the next millisecond
	default:
		g.count++ // same millisecond, or the clock stepped back
	}
	ms, count := g.ms, g.count
	g.mu.Unlock()
	var b [16]byte
	rand.Read(b[8:])
	binary.BigEndian.PutUint64(b[:8], uint64(ms)<<16|0x7000|uint64(count))
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// EventIDPattern is an event ID: a UUID v7, whose first 48 bits are the
// time it was made in milliseconds.
var EventIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// EventIDFloor is a key fragment that sorts before every ID taken at or
// after t.
func EventIDFloor(t time.Time) string {
	ms := max(t.UnixMilli(), 0)
	return fmt.Sprintf("%08x-%04x", uint64(ms)>>16, uint64(ms)&0xffff)
}

// EventIDTime is when the event with that ID was made.
func EventIDTime(id string) time.Time {
	hi, _ := strconv.ParseUint(id[0:8], 16, 64)
	lo, _ := strconv.ParseUint(id[9:13], 16, 64)
	return time.UnixMilli(int64(hi<<16 | lo))
}

// eventCursor marks how far a reader has got: every event with an ID up to
// id that was committed by store revision rev has been returned (or
// filtered out). A bare event ID as cursor has no revision: everything up
// to it counts as seen.
type eventCursor struct {
	id     string
	rev    int64
	hasRev bool
}

func (c eventCursor) String() string { return c.id + "@" + strconv.FormatInt(c.rev, 10) }

func ParseEventCursor(s string) (eventCursor, error) {
	bad := fault.Invalid("after", "must be an event id or a cursor returned by ListEvents (got %q)", Clip(s))
	if s == "" {
		return eventCursor{}, nil
	}
	id, rev, hasRev := strings.Cut(s, "@")
	c := eventCursor{id: id, hasRev: hasRev}
	if id != "" && !EventIDPattern.MatchString(id) || id == "" && !hasRev {
		return c, bad
	}
	if hasRev {
		n, err := strconv.ParseInt(rev, 10, 64)
		if err != nil || n < 0 {
			return c, bad
		}
		c.rev = n
	}
	return c, nil
}

// scanEvents returns, in ID order, up to limit matching events the cursor
// has not covered, and the cursor after them. It considers only events
// committed by the revision it starts at, so the new cursor is exact about
// what it covers; events committed later come next time, even one whose ID
// sorts before the cursor (within eventLookback).
func (s *State) ScanEvents(ctx context.Context, prefix string, cur eventCursor, match func(events.Event) bool, limit int) ([]events.Event, eventCursor, error) {
	rev := s.Store.Revision()
	after := ""
	if cur.id != "" {
		// A page is keyed by its first event, and one that began before
		// the cursor's lookback may still hold events within it.
		after = prefix + EventIDFloor(EventIDTime(cur.id).Add(-2*eventLookback))
	}
	out := []events.Event{}
	last := "" // the last ID consumed, in order
	// consume takes events in ID order; it reports a full answer.
	consume := func(evs []storedEvent) bool {
		for _, se := range evs {
			id := se.ev.ID
			if se.rev > rev || id <= cur.id && (!cur.hasRev || se.rev <= cur.rev) {
				continue // a later listing's, or already covered
			}
			if !match(se.ev) {
				last = id
				continue
			}
			if len(out) == limit {
				return true
			}
			out = append(out, se.ev)
			last = id
		}
		return false
	}
	var m eventMerge
	for {
		pages, more, err := store.List[eventRecord](ctx, s.Store, prefix, after, eventPagesRead)
		if err != nil {
			return nil, cur, err
		}
		for _, p := range pages {
			after = p.Key
			if consume(m.addPage(prefix, p)) {
				// Everything up to last is consumed; what follows is not.
				return out, eventCursor{id: last, rev: rev, hasRev: true}, nil
			}
		}
		if !more {
			if consume(m.rest()) {
				return out, eventCursor{id: last, rev: rev, hasRev: true}, nil
			}
			return out, eventCursor{id: max(cur.id, last), rev: rev, hasRev: true}, nil
		}
	}
}

// eventPagesRead is how many pages a listing reads from etcd at once.
const eventPagesRead = 16
