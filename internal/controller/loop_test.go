package controller

import (
	"slices"
	"testing"
	"time"
)

func drain(t *testing.T, q *queue, n int) []string {
	t.Helper()
	var got []string
	for range n {
		k, _, ok := q.getAt()
		if !ok {
			t.Fatal("queue closed")
		}
		got = append(got, k)
		q.done(k)
	}
	return got
}

// Urgent keys go before background ones; a background key raised to urgent
// goes once, in the urgent order; a key is never queued twice.
func TestQueuePriorities(t *testing.T) {
	q := newQueue()
	for _, k := range []string{"r1", "r2", "r3", "r4"} {
		q.addAt(k, background)
	}
	q.add("a")
	q.addAt("r3", urgent) // raised
	q.add("a")            // already queued
	q.addAt("a", background)
	q.addAt("r1", background)
	got := drain(t, q, 5)
	if want := []string{"a", "r3", "r1", "r2", "r4"}; !slices.Equal(got, want) {
		t.Fatalf("handed out %v, want %v", got, want)
	}
	// r3's old background place is skipped, not handed out again.
	q.addAt("x", background)
	if got := drain(t, q, 1); got[0] != "x" {
		t.Fatalf("after the queue emptied: got %s, want x", got[0])
	}
	if len(q.queued) != 0 {
		t.Fatalf("still queued: %v", q.queued)
	}
}

// Keys queued first go before urgent and background ones, in their order;
// an urgent key raised to first is handed out once.
func TestQueueFirstGoesAhead(t *testing.T) {
	q := newQueue()
	q.addAt("bg", background)
	q.add("u1")
	q.add("u2")
	q.addAt("f1", first)
	q.addAt("u2", first) // raised
	q.add("f1")          // already queued higher
	got := drain(t, q, 4)
	if want := []string{"f1", "u2", "u1", "bg"}; !slices.Equal(got, want) {
		t.Fatalf("handed out %v, want %v", got, want)
	}
	if len(q.queued) != 0 || len(q.front)+len(q.order)+len(q.later) != 0 {
		t.Fatalf("left queued: %v", q.queued)
	}
}

// A key changed while a worker has it is queued again when the worker is
// done, at the highest priority asked for meanwhile.
func TestQueueRequeuesWhileProcessing(t *testing.T) {
	q := newQueue()
	q.addAt("k", background)
	q.addAt("other", background)
	k, _, _ := q.getAt()
	if k != "k" {
		t.Fatalf("got %s first", k)
	}
	q.addAt("k", background)
	q.add("k")
	q.done("k")
	if got := drain(t, q, 2); !slices.Equal(got, []string{"k", "other"}) {
		t.Fatalf("after done: %v, want k (urgent) before other", got)
	}
}

// A key is due at once, then not before the interval has passed since its
// last pass; other keys are paced on their own.
func TestPacer(t *testing.T) {
	var p Pacer
	every := 200 * time.Millisecond
	if w := p.Due("a", every); w != 0 {
		t.Fatalf("first pass waits %v", w)
	}
	w := p.Due("a", every)
	if w <= 0 || w > every {
		t.Fatalf("second pass at once: wait %v, want (0, %v]", w, every)
	}
	if w := p.Due("b", every); w != 0 {
		t.Fatalf("another key waits %v", w)
	}
	time.Sleep(w)
	if w := p.Due("a", every); w != 0 {
		t.Fatalf("after the interval: wait %v", w)
	}
}

// A resting key waits the longer of its rest and the interval; a rest of
// 0 returns it to the interval.
func TestPacerRest(t *testing.T) {
	var p Pacer
	every := 50 * time.Millisecond
	p.Due("a", every)
	p.Rest("a", time.Hour)
	if w := p.Due("a", every); w <= every || w > time.Hour {
		t.Fatalf("resting key: wait %v, want (%v, 1h]", w, every)
	}
	if w := p.Due("b", every); w != 0 {
		t.Fatalf("another key waits %v", w)
	}
	p.Rest("a", 0)
	if w := p.Due("a", every); w <= 0 || w > every {
		t.Fatalf("rest ended: wait %v, want (0, %v]", w, every)
	}
}

// Resyncs of a big key space are spaced so that they take a bounded share
// of the cores; small ones keep the configured period.
func TestResyncIntervalGrowsWithKeys(t *testing.T) {
	for _, c := range []struct {
		base time.Duration
		n    int
		want time.Duration
	}{
		{30 * time.Second, 0, 30 * time.Second},
		{30 * time.Second, 200, 30 * time.Second},
		{30 * time.Second, 1000, 30 * time.Second},
		{30 * time.Second, 5000, 150 * time.Second},
		{0, 0, time.Second},
		{15 * time.Second, 5000, 150 * time.Second},
	} {
		if got := resyncInterval(c.base, c.n); got != c.want {
			t.Errorf("resyncInterval(%s, %d) = %s, want %s", c.base, c.n, got, c.want)
		}
	}
}

// A key asked to come back keeps a first place it had; one handed out from
// the background comes back urgent, as any requeue did.
func TestRequeueKeepsItsPlace(t *testing.T) {
	q := newQueue()
	q.addAt("f", first)
	q.addAt("b", background)
	k, p, _ := q.getAt()
	if k != "f" || p != first {
		t.Fatalf("got %s at %d", k, p)
	}
	q.done(k)
	q.addAfter(k, time.Millisecond, p)
	k2, p2, _ := q.getAt()
	if k2 != "b" || p2 != background {
		t.Fatalf("got %s at %d, want b from the background", k2, p2)
	}
	q.done(k2)
	q.addAfter(k2, time.Millisecond, p2)
	q.add("u")
	for deadline := time.Now().Add(10 * time.Second); ; {
		q.mu.Lock()
		n := len(q.queued)
		q.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the requeues did not come")
		}
		time.Sleep(time.Millisecond)
	}
	if got := drain(t, q, 3); !slices.Equal(got, []string{"f", "u", "b"}) {
		t.Fatalf("after the requeues: %v, want f first, then u and b urgent in order", got)
	}
}
