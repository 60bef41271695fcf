package control

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
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
	e := newEmitter(st, slog.New(slog.DiscardHandler), time.Now, arns{account: "123456789012", region: "us-east-1"}, time.Hour, limit)
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
	var kept []store.Item[events.Event]
	var err error
	for {
		kept, _, err = store.List[events.Event](ctx, st, store.EventPrefix("big"), "", 0)
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
	for _, it := range kept {
		ids = append(ids, it.Value.ID)
	}
	// What is kept is the newest, in order, with nothing missing between.
	if !slices.IsSorted(ids) {
		t.Fatalf("kept events out of order: %v", ids)
	}
	n := func(ev events.Event) int { v, _ := strconv.Atoi(string(ev.Detail)); return v }
	last := n(kept[len(kept)-1].Value)
	if last != 299 {
		t.Fatalf("newest kept event is %d, want 299", last)
	}
	for i, it := range kept {
		if want := 300 - len(kept) + i; n(it.Value) != want {
			t.Fatalf("event %d kept is %d, want %d", i, n(it.Value), want)
		}
	}
	small, err := st.Count(ctx, store.EventPrefix("small"))
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
	e := newEmitter(st, slog.New(slog.DiscardHandler), time.Now, arns{account: "123456789012", region: "us-east-1"}, time.Hour, 0)
	defer e.EndWaits()
	count := func() int {
		n, err := st.Count(ctx, store.EventPrefix("c"))
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

// ListEvents lists an event recorded just before it, though the producer
// did not wait for the write.
func TestListEventsSeesWhatWasRecordedBeforeIt(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s, _ := startFixture(t, st, 0, 300, 0)
	for i := range 50 {
		s.events.Record(ctx, "c", events.Event{DetailType: events.DetailTypes[0], Detail: json.RawMessage(strconv.Itoa(i))})
		out, err := s.ListEvents(ctx, &ListEventsRequest{Cluster: "c", MaxResults: ptr(int32(1000))})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Events) != i+1 {
			t.Fatalf("after %d recorded, listed %d", i+1, len(out.Events))
		}
	}
}
