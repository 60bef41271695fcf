package audit

import (
	"context"
	"time"

	"github.com/capstanhq/capstan/internal/store"
)

const (
	// lookback is how far behind a cursor a listing looks for records
	// committed late (their IDs were taken before a slower write ended).
	// It must exceed writeTimeout.
	lookback = 30 * time.Second
	// pagesRead is how many pages a listing reads from the store at once.
	pagesRead = 16
	// ListOperation is the extension that reads the trail. Its own records
	// are listed only when asked for by name: a follower's every poll
	// would otherwise be the next poll's news.
	ListOperation = "ListAuditEvents"
)

// Query selects records. Zero members select everything.
type Query struct {
	// Principal is an identity's ARN or user name ("root" for the root).
	Principal   string
	AccessKeyID string
	EventName   string
	Start, End  time.Time // of eventTime, both inclusive
	ErrorsOnly  bool
	Limit       int // at most this many (0: 100)
	Cursor      Cursor
	// Wait, when nothing matches yet, waits this long for a record that
	// does.
	Wait time.Duration
}

// Result is records oldest first and the cursor to continue from (also
// when none came).
type Result struct {
	Events []Event
	Cursor Cursor
}

func (q *Query) match(ev *Event) bool {
	switch {
	case q.EventName != "" && ev.EventName != q.EventName,
		q.EventName == "" && ev.EventName == ListOperation,
		q.AccessKeyID != "" && ev.UserIdentity.AccessKeyID != q.AccessKeyID,
		q.ErrorsOnly && ev.ErrorCode == "",
		!q.Start.IsZero() && ev.EventTime.Before(q.Start),
		!q.End.IsZero() && ev.EventTime.After(q.End):
		return false
	}
	if p := q.Principal; p != "" {
		id := ev.UserIdentity
		return id.ARN == p || id.UserName == p || p == "root" && id.Type == Root
	}
	return true
}

// List returns the records after q.Cursor that match q, oldest first. The
// records handed over before the call are among them, though their writes
// were not waited for.
func (t *Trail) List(ctx context.Context, q Query) (Result, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	sctx, cancel := context.WithTimeout(ctx, writeTimeout)
	err := t.Settle(sctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	var sub *store.Subscription
	if q.Wait > 0 {
		// Before the first listing, so nothing written in between is
		// missed.
		sub = t.st.Subscribe(prefix)
		defer sub.Close()
	}
	wctx, cancel := context.WithTimeout(ctx, q.Wait)
	defer cancel()
	defer context.AfterFunc(t.ending, cancel)()
	cur := q.Cursor
	for {
		out, next, err := t.scan(ctx, &q, cur)
		if err != nil {
			return Result{}, err
		}
		cur = next
		if len(out) > 0 || q.Wait <= 0 {
			return Result{Events: out, Cursor: cur}, nil
		}
		if _, _, err := sub.Next(wctx); err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			return Result{Events: []Event{}, Cursor: cur}, nil
		}
	}
}

// scan returns, in eventID order, up to q.Limit matching records the cursor
// has not covered, and the cursor after them. It takes only records
// committed by the revision it starts at, so the new cursor is exact about
// what it covers; those committed later come next time, even one whose ID
// sorts before the cursor (within lookback).
func (t *Trail) scan(ctx context.Context, q *Query, cur Cursor) ([]Event, Cursor, error) {
	// The revision once this process's writes are in the cache, so that
	// they count as committed by it.
	if err := t.st.Sync(ctx); err != nil {
		return nil, cur, err
	}
	rev := t.st.Revision()
	var floor time.Time
	if cur.id != "" {
		// A page is keyed by its first record, and one that began before
		// the cursor's lookback may still hold records within it.
		floor = idTime(cur.id).Add(-2 * lookback)
	}
	if !q.Start.IsZero() {
		// No record is written before its call: nothing of a page begun
		// well before Start is in range.
		if f := q.Start.Add(-time.Second); f.After(floor) {
			floor = f
		}
	}
	// End bounds no page: a record retried through an etcd outage is
	// written long after its call.
	after := ""
	if !floor.IsZero() {
		after = prefix + idFloor(floor)
	}
	out := []Event{}
	last := "" // the last eventID consumed, in order
	consume := func(recs []stored) (full bool) {
		for _, s := range recs {
			id := s.ev.EventID
			if s.rev > rev || id <= cur.id && (!cur.hasRev || s.rev <= cur.rev) {
				continue // a later listing's, or already covered
			}
			if !q.match(&s.ev) {
				last = id
				continue
			}
			if len(out) == q.Limit {
				return true
			}
			out = append(out, s.ev)
			last = id
		}
		return false
	}
	var m merge
	for {
		pages, more, err := store.List[page](ctx, t.st, prefix, after, pagesRead)
		if err != nil {
			return nil, cur, err
		}
		for _, p := range pages {
			after = p.Key
			if consume(m.add(p)) {
				// Everything up to last is consumed; what follows is not.
				return out, Cursor{id: last, rev: rev, hasRev: true}, nil
			}
		}
		if !more {
			if consume(m.rest()) {
				return out, Cursor{id: last, rev: rev, hasRev: true}, nil
			}
			return out, Cursor{id: max(cur.id, last), rev: rev, hasRev: true}, nil
		}
	}
}
