package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/store"
)

const (
	// DefaultRetention is how long records are kept unless configured.
	DefaultRetention = 24 * time.Hour
	// DefaultLimit is the most records kept unless configured: a safety
	// valve for etcd, whose database every record is in (and every
	// server's cache). The oldest go first, counted and logged.
	DefaultLimit = 200_000
	// DefaultBuffer is how many records may wait for the writer; past it
	// they are dropped (and counted) rather than hold up the API.
	DefaultBuffer = 10_000
	// maxBatch bounds a page (~100 KB of JSON, compressed in etcd).
	maxBatch = 100
	// flushAfter is how long the writer lets records gather before a
	// write: one commit per API call would double etcd's writes under a
	// read-heavy load.
	flushAfter = 200 * time.Millisecond
	// summaryGrace lets calls of a minute answered just after it end go
	// into its summary.
	summaryGrace = 5 * time.Second
	// writeTimeout bounds one page's write, and a listing's wait for the
	// records handed over before it.
	writeTimeout = 5 * time.Second
)

// Config is what a Trail needs.
type Config struct {
	Store     *store.Store
	Region    string // of records whose signature named none
	AccountID string
	Retention time.Duration // 0: DefaultRetention
	Limit     int           // 0: DefaultLimit
	Buffer    int           // 0: DefaultBuffer
	Log       *slog.Logger
	Now       func() time.Time // the writer's clock (eventIDs, summaries' minutes)
	tick      time.Duration    // how often due summaries are looked for (0: 5s); tests shorten it
}

// Trail keeps the audit records. Its writer goroutine runs from New until
// Close.
type Trail struct {
	st        *store.Store
	log       *slog.Logger
	now       func() time.Time
	account   string
	region    string
	retention time.Duration
	bucket    time.Duration // records of one bucket share a lease
	limit     int
	buffer    int
	tick      time.Duration // how often due summaries are looked for
	ids       ids
	m         metrics

	mu      sync.Mutex
	pending []api.Record
	events  []Event // built already: exec sessions (exec.go)
	closed  bool
	// queued counts records handed over, settled those a write has been
	// attempted for (or that went into a summary); settledCh is closed,
	// and replaced, whenever settled grows.
	queued, settled uint64
	settledCh       chan struct{}
	writtenRev      int64
	lastFullWarn    time.Time

	wake chan struct{} // records arrived while none waited
	kick chan struct{} // write now: a page is full, or a reader waits
	stop chan struct{}
	done chan struct{}

	// Owned by the writer goroutine.
	summaries  map[summaryKey]*summary
	unwritten  []Event
	retryAt    time.Time
	backoff    time.Duration
	leases     map[int64]*store.Lease // by bucket start, unix seconds
	sinceTrim  int
	lastWarned map[string]time.Time

	// ending ends long polls when the server shuts down.
	ending context.Context
	end    context.CancelFunc
}

// New starts a trail; Close stops it.
func New(cfg Config) *Trail {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Limit <= 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.tick <= 0 {
		cfg.tick = 5 * time.Second
	}
	ending, end := context.WithCancel(context.Background())
	t := &Trail{st: cfg.Store, log: cfg.Log, now: cfg.Now, account: cfg.AccountID, region: cfg.Region,
		retention: cfg.Retention, bucket: max(min(time.Minute, cfg.Retention), time.Second), limit: cfg.Limit, buffer: cfg.Buffer,
		tick: cfg.tick, m: newMetrics(),
		settledCh: make(chan struct{}), wake: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
		summaries: map[summaryKey]*summary{}, leases: map[int64]*store.Lease{}, lastWarned: map[string]time.Time{},
		ending: ending, end: end}
	t.m.buffered = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "capstan_audit_buffered_records",
		Help: "Audit records waiting for the writer."}, func() float64 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return float64(len(t.pending))
	})
	go t.run()
	return t
}

// Record hands over one answered call. It never waits: when the buffer is
// full the record is dropped, counted, and the first drop of a while
// logged.
func (t *Trail) Record(r api.Record) {
	t.mu.Lock()
	if t.closed || len(t.pending) >= t.buffer {
		reason := "buffer_full"
		if t.closed {
			reason = "closed"
		}
		now := time.Now()
		warn := !t.closed && now.Sub(t.lastFullWarn) >= time.Minute
		if warn {
			t.lastFullWarn = now
		}
		t.mu.Unlock()
		t.m.dropped.WithLabelValues(reason).Inc()
		if warn {
			t.log.Warn("audit buffer full: records are dropped (capstan_audit_records_dropped_total counts them)", "buffer", t.buffer)
		}
		return
	}
	t.pending = append(t.pending, r)
	t.queued++
	n := len(t.pending)
	t.mu.Unlock()
	switch n {
	case 1:
		signal(t.wake)
	case maxBatch:
		signal(t.kick)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Settle waits until every record handed over before the call has been
// written (or its write given up on, or it went into a summary) and is
// readable, or ctx ends.
func (t *Trail) Settle(ctx context.Context) error {
	t.mu.Lock()
	upTo := t.queued
	if t.settled < upTo {
		signal(t.kick)
	}
	for t.settled < upTo {
		ch := t.settledCh
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.done:
			return errors.New("audit trail closed")
		}
		t.mu.Lock()
	}
	rev := t.writtenRev
	t.mu.Unlock()
	return t.st.WaitFor(ctx, rev)
}

// EndWaits returns every long poll now, and any later one at once, so that
// a server shutting down is not held up by them.
func (t *Trail) EndWaits() { t.end() }

// Close stops taking records, writes what is buffered (open summaries
// too) and stops the writer; ctx bounds the wait.
func (t *Trail) Close(ctx context.Context) error {
	t.mu.Lock()
	closed := t.closed
	t.closed = true
	t.mu.Unlock()
	if !closed {
		close(t.stop)
		t.end()
	}
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("audit trail: %w", ctx.Err())
	}
}

// run is the writer: it writes what is pending once flushAfter has passed
// since the first of it arrived (at once when a page is full or a reader
// waits), and summaries once their minute is over.
func (t *Trail) run() {
	defer close(t.done)
	tick := time.NewTicker(t.tick)
	defer tick.Stop()
	for {
		select {
		case <-t.wake:
			t.linger()
		case <-t.kick:
		case <-tick.C:
		case <-t.stop:
			t.flush(true)
			return
		}
		t.flush(false)
	}
}

func (t *Trail) linger() {
	timer := time.NewTimer(flushAfter)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.kick:
	case <-t.stop:
	}
}

// flush writes the pending records and the summaries that are due (all of
// them when final), with the records an earlier write failed on first.
func (t *Trail) flush(final bool) {
	t.mu.Lock()
	recs, events := t.pending, t.events
	t.pending, t.events = nil, nil
	t.mu.Unlock()
	t.unwritten = append(t.unwritten, events...)
	now := t.now()
	for _, r := range recs {
		if r.Principal.Role == auth.RoleAgent {
			t.summarise(r)
			if r.ErrorCode == "" {
				continue
			}
		}
		t.unwritten = append(t.unwritten, t.event(r))
	}
	t.unwritten = append(t.unwritten, t.dueSummaries(now, final)...)
	t.write(now, final)
	t.mu.Lock()
	t.settled += uint64(len(recs) + len(events))
	close(t.settledCh)
	t.settledCh = make(chan struct{})
	t.mu.Unlock()
}

// write commits the unwritten records, a page at a time. After a failure
// the rest wait for a later flush, backing off; the oldest are dropped
// past the buffer's size, and all of them at the final flush.
func (t *Trail) write(now time.Time, final bool) {
	if len(t.unwritten) == 0 || !final && time.Now().Before(t.retryAt) {
		return
	}
	size := min(maxBatch, max(t.limit/20, 1))
	for len(t.unwritten) > 0 {
		batch := t.unwritten[:min(len(t.unwritten), size)]
		rev, err := t.commit(batch, now)
		if err != nil {
			t.warn("write", "audit records not written; retrying", "records", len(t.unwritten), "err", err)
			lost := len(t.unwritten) - t.buffer
			if final {
				lost = len(t.unwritten)
			}
			if lost > 0 {
				t.m.dropped.WithLabelValues("write_failed").Add(float64(lost))
				t.unwritten = slices.Delete(t.unwritten, 0, lost)
			}
			t.backoff = min(max(2*t.backoff, time.Second), 30*time.Second)
			t.retryAt = time.Now().Add(t.backoff)
			return
		}
		t.unwritten = t.unwritten[len(batch):]
		t.m.written.Add(float64(len(batch)))
		t.mu.Lock()
		t.writtenRev = max(t.writtenRev, rev)
		t.mu.Unlock()
		t.trimIfDue(len(batch))
	}
	t.unwritten, t.backoff = nil, 0
}

// commit writes one page. Its records get their eventIDs here, in order,
// so that a page retried later sorts after what readers have seen.
func (t *Trail) commit(batch []Event, now time.Time) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	bucket := now.Truncate(t.bucket).Unix()
	for attempt := 0; ; attempt++ {
		for i := range batch {
			batch[i].EventID = t.ids.next(now)
		}
		l, err := t.lease(ctx, bucket)
		if err != nil {
			return 0, err
		}
		rev, err := t.st.Txn().PutWithLease(pageKey(batch[0].EventID, len(batch)), page{Records: batch}, l).Commit(ctx)
		if err == nil {
			return rev, nil
		}
		// The lease may have gone (etcd restored, or a long pause): a new
		// one is granted once before giving up.
		delete(t.leases, bucket)
		if attempt == 1 || ctx.Err() != nil {
			return 0, fmt.Errorf("write %d audit records: %w", len(batch), err)
		}
	}
}

// lease is the bucket's lease: every page written in it expires together,
// at least the retention after its records were written.
func (t *Trail) lease(ctx context.Context, bucket int64) (*store.Lease, error) {
	if l, ok := t.leases[bucket]; ok {
		return l, nil
	}
	l, err := t.st.Grant(ctx, t.retention+t.bucket)
	if err != nil {
		return nil, fmt.Errorf("audit lease: %w", err)
	}
	for b := range t.leases {
		if b < bucket {
			delete(t.leases, b) // runs out on its own
		}
	}
	t.leases[bucket] = l
	return l, nil
}

// trimIfDue deletes the oldest pages beyond the limit once every
// twentieth of the limit written.
func (t *Trail) trimIfDue(n int) {
	t.sinceTrim += n
	if t.sinceTrim < max(t.limit/20, 1) {
		return
	}
	t.sinceTrim = 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := t.trim(ctx); err != nil {
		t.warn("trim", "trim audit records", "err", err)
	}
}

func (t *Trail) trim(ctx context.Context) error {
	pages, _, err := store.Revisions(ctx, t.st, prefix, "", 0)
	if err != nil {
		return err
	}
	n := 0
	for _, p := range pages {
		_, c := pageOf(p.Key[len(prefix):])
		n += c
	}
	drop, dropped := 0, 0
	for ; drop < len(pages) && n > t.limit; drop++ {
		_, c := pageOf(pages[drop].Key[len(prefix):])
		n -= c
		dropped += c
	}
	if drop == 0 {
		return nil
	}
	for chunk := range slices.Chunk(pages[:drop], 100) {
		tx := t.st.Txn()
		for _, it := range chunk {
			tx.Delete(it.Key, it.Rev)
		}
		// A conflict is another server trimming the same pages.
		if _, err := tx.Commit(ctx); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	t.m.trimmed.Add(float64(dropped))
	t.warn("limit", "audit records beyond the limit deleted, oldest first", "limit", t.limit, "deleted", dropped)
	return nil
}

// warn logs at most once a minute per kind: a failing etcd or a full trail
// would otherwise log on every write.
func (t *Trail) warn(kind, msg string, args ...any) {
	now := time.Now()
	if now.Sub(t.lastWarned[kind]) < time.Minute {
		return
	}
	t.lastWarned[kind] = now
	t.log.Warn(msg, args...)
}

// summaryKey is what one summary stands for: an agent credential's calls
// of one operation in one minute.
type summaryKey struct {
	accessKeyID string
	operation   string
	minute      int64
}

type summary struct {
	ev    Event
	sum   Summary
	first time.Time
}

// summarise counts an agent's call into its minute's summary.
func (t *Trail) summarise(r api.Record) {
	t.m.summarised.Inc()
	at := r.Time.UTC().Truncate(time.Millisecond)
	k := summaryKey{r.Principal.AccessKeyID, r.Operation, at.Truncate(time.Minute).Unix()}
	s := t.summaries[k]
	if s == nil {
		ev := t.event(r)
		ev.ErrorCode, ev.ErrorMessage, ev.RequestID = "", "", ""
		s = &summary{ev: ev, sum: Summary{FirstEventTime: at, LastEventTime: at}}
		t.summaries[k] = s
	}
	s.sum.CallCount++
	if r.ErrorCode != "" {
		s.sum.ErrorCount++
	}
	if at.Before(s.sum.FirstEventTime) {
		s.sum.FirstEventTime = at
	}
	if at.After(s.sum.LastEventTime) {
		s.sum.LastEventTime = at
	}
	s.ev.Resources = addResources(s.ev.Resources, r.Resources)
}

// dueSummaries takes the summaries whose minute (and grace) is over, or
// all of them, oldest first.
func (t *Trail) dueSummaries(now time.Time, all bool) []Event {
	var out []Event
	for k, s := range t.summaries {
		if !all && now.Before(time.Unix(k.minute, 0).Add(time.Minute+summaryGrace)) {
			continue
		}
		delete(t.summaries, k)
		if s.sum.CallCount == s.sum.ErrorCount {
			continue // each is recorded on its own
		}
		ev := s.ev
		sum := s.sum
		ev.EventTime, ev.AdditionalEventData = sum.FirstEventTime, &sum
		out = append(out, ev)
	}
	slices.SortFunc(out, func(a, b Event) int { return a.EventTime.Compare(b.EventTime) })
	return out
}

type metrics struct {
	written    prometheus.Counter
	summarised prometheus.Counter
	dropped    *prometheus.CounterVec
	trimmed    prometheus.Counter
	buffered   prometheus.GaugeFunc
}

func newMetrics() metrics {
	m := metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_audit_records_written_total",
			Help: "Audit records written to the store (a summary of agent calls is one)."}),
		summarised: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_audit_agent_calls_summarised_total",
			Help: "Agent calls counted into per-minute summaries instead of recorded one by one."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_audit_records_dropped_total",
			Help: "Audit records lost: buffer_full (the writer fell behind), write_failed (etcd refused them), closed (after shutdown began)."},
			[]string{"reason"}),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_audit_records_trimmed_total",
			Help: "Audit records deleted before their retention because the trail held more than its limit."}),
	}
	for _, r := range []string{"buffer_full", "write_failed", "closed"} {
		m.dropped.WithLabelValues(r)
	}
	return m
}

// Collectors returns the trail's metrics for a Prometheus registry.
func (t *Trail) Collectors() []prometheus.Collector {
	return []prometheus.Collector{t.m.written, t.m.summarised, t.m.dropped, t.m.trimmed, t.m.buffered}
}
