package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/store"
)

// A cluster keeps its newest events up to the limit; older ones are
// deleted, another cluster's are not touched.
func TestEventLimitKeepsTheNewest(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	const limit = 40
	e := newEmitter(st, slog.New(slog.DiscardHandler), time.Now, ARNs{Account: "123456789012", region: "us-east-1"}, time.Hour, limit)
	defer e.EndWaits()
	var ids []string
	for i := range 300 {
		ev := events.Event{DetailType: "Test", Detail: json.RawMessage(strconv.Itoa(i))}
		if err := e.Emit(ctx, "big", ev); err != nil {
			t.Fatal(err)
		}
		if i < 10 {
			if err := e.Emit(ctx, "small", ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var kept []events.Event
	var err error
	for {
		kept, err = storedEvents(ctx, st, "big")
		if err != nil {
			t.Fatal(err)
		}
		if len(kept) <= limit+max(limit/20, 1) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(kept) > limit+max(limit/20, 1) {
		t.Fatalf("%d events kept, limit %d", len(kept), limit)
	}
	for _, ev := range kept {
		ids = append(ids, ev.ID)
	}
	// What is kept is the newest, in order, with nothing missing between.
	if !slices.IsSorted(ids) {
		t.Fatalf("kept events out of order: %v", ids)
	}
	n := func(ev events.Event) int { v, _ := strconv.Atoi(string(ev.Detail)); return v }
	last := n(kept[len(kept)-1])
	if last != 299 {
		t.Fatalf("newest kept event is %d, want 299", last)
	}
	for i, ev := range kept {
		if want := 300 - len(kept) + i; n(ev) != want {
			t.Fatalf("event %d kept is %d, want %d", i, n(ev), want)
		}
	}
	small, err := storedEventCount(ctx, st, "small")
	if err != nil || small != 10 {
		t.Fatalf("the other cluster kept %d events (%v), want all 10", small, err)
	}
}

// Record leaves the write to the writer and returns; Settle waits for it;
// past the backlog, Record waits for its own write. The writer is held
// busy by hand (writing set, no writer running) to tell returning from
// waiting.
func TestRecordLeavesTheWriteBehindUpToTheBacklog(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	e := newEmitter(st, slog.New(slog.DiscardHandler), time.Now, ARNs{Account: "123456789012", region: "us-east-1"}, time.Hour, 0)
	defer e.EndWaits()
	count := func() int {
		n, err := storedEventCount(ctx, st, "c")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	e.writing = true
	e.Record(ctx, "c", events.Event{DetailType: "Test", Detail: json.RawMessage(`1`)})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := e.Settle(short); err == nil {
		t.Fatal("Settle returned with the event not written")
	}
	if n := count(); n != 0 {
		t.Fatalf("%d events written with the writer held", n)
	}
	e.backlog = 1
	returned := make(chan struct{})
	go func() {
		e.Record(ctx, "c", events.Event{DetailType: "Test", Detail: json.RawMessage(`2`)})
		close(returned)
	}()
	select {
	case <-returned:
		t.Fatal("Record returned past the backlog with its event not written")
	case <-time.After(100 * time.Millisecond):
	}
	go e.write()
	<-returned
	if err := e.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d events written, want 2", n)
	}
}

// The events of one write are one page; pages that interleave (two
// servers writing at once) are listed in ID order, page after page of the
// answer, without loss or repeat; the limit deletes whole pages, oldest
// first.
func TestEventPagesListInOrder(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s, _ := startFixture(t, st, 0, 300, 0)
	// Two pages written by hand, their IDs interleaved, ten seconds ago.
	ms := time.Now().Add(-10 * time.Second).UnixMilli()
	id := func(i int) string { return fmt.Sprintf("%08x-%04x-7%03x-8000-000000000000", ms>>16, ms&0xffff, i) }
	page := func(ids ...int) eventPage {
		var p eventPage
		for _, i := range ids {
			p.Events = append(p.Events, events.Event{ID: id(i), DetailType: events.DetailTypes[0], Resources: []string{}, Detail: json.RawMessage(strconv.Itoa(i))})
		}
		return p
	}
	if _, err := st.Txn().Create(eventPageKey("c", id(1), 3), page(1, 3, 5)).Create(eventPageKey("c", id(2), 2), page(2, 4)).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Events recorded while the writer is busy go in one write: one page.
	s.events.mu.Lock()
	s.events.writing = true
	s.events.mu.Unlock()
	for i := range 7 {
		s.events.Record(ctx, "c", events.Event{DetailType: events.DetailTypes[0], Detail: json.RawMessage(strconv.Itoa(100 + i))})
	}
	go s.events.write()
	if err := s.events.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	keys, _, err := store.Keys(ctx, st, store.EventPrefix("c"), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || !strings.HasSuffix(keys[2], ".7") {
		t.Fatalf("stored keys %v, want the two pages and one of the 7 recorded", keys)
	}
	if n, err := storedEventCount(ctx, st, "c"); err != nil || n != 12 {
		t.Fatalf("%d events counted (%v), want 12", n, err)
	}
	var got []string
	var cursor eventCursor
	for range 20 {
		evs, next, err := s.ScanEvents(ctx, store.EventPrefix("c"), cursor, func(events.Event) bool { return true }, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			got = append(got, string(ev.Detail))
		}
		cursor = next
	}
	want := []string{"1", "2", "3", "4", "5", "100", "101", "102", "103", "104", "105", "106"}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	// A limit of 8 deletes the two oldest pages (5 events), not part of
	// the newest.
	// Under the lock: the writer started above reads the limit once more
	// after its last batch.
	s.events.mu.Lock()
	s.events.limit = 8
	s.events.mu.Unlock()
	if err := s.events.trim(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	kept, err := storedEvents(ctx, st, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 7 || string(kept[0].Detail) != "100" {
		t.Fatalf("kept %d events after the trim, first %s; want the 7 newest", len(kept), kept[0].Detail)
	}
}
