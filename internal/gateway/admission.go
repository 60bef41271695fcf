package gateway

import (
	"container/list"
	"context"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/cpus"
)

// admission bounds the agent messages and manifest builds in flight, their
// waits on etcd and the cache included. A fleet's sessions wake together (a
// rollout's batch, a placement's manifests); each message in flight is
// woken again by its commit and its read, and every wake queues for the
// cores ahead of the API request that came after it. Bounding only the
// messages using the cores (their waits gave the place back) left those
// wakes unbounded: at 5,000 instances an API call waited behind ~85
// goroutines in a rollout.
//
// The bound follows the scheduler (adjust): it shrinks while goroutines
// queue for the cores and grows while they do not and the places are all
// taken. A slow etcd, which leaves the cores idle, thus gets more messages
// in flight; a saturated server fewer.
type admission struct {
	mu      sync.Mutex
	limit   int
	used    int
	waiting list.List // of *ticket, first come first served
	lo, hi  int
}

// ticket is one wait for a place.
type ticket struct {
	a       *admission
	granted chan struct{}
	e       *list.Element // in the queue until granted
	back    bool          // given back, or left the queue
}

func newAdmission(limit, lo, hi int) *admission {
	return &admission{limit: limit, lo: lo, hi: hi}
}

// ask queues for a place; ready() closes when it is granted. The caller
// must end the ticket with done (granted or not).
func (a *admission) ask() *ticket {
	t := &ticket{a: a, granted: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.used < a.limit && a.waiting.Len() == 0 {
		a.used++
		close(t.granted)
		return t
	}
	t.e = a.waiting.PushBack(t)
	return t
}

func (t *ticket) ready() <-chan struct{} { return t.granted }

// done gives the place back, or leaves the queue if not granted yet.
func (t *ticket) done() {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.back {
		return
	}
	t.back = true
	if t.e != nil {
		a.waiting.Remove(t.e)
		t.e = nil
		return
	}
	a.used--
	a.grant()
}

// enter waits for a place; the returned ticket's done gives it back.
func (a *admission) enter(ctx context.Context) (*ticket, error) {
	t := a.ask()
	select {
	case <-t.granted:
		return t, nil
	case <-ctx.Done():
		t.done()
		return nil, ctx.Err()
	}
}

// grant hands free places to the first in the queue; a.mu is held.
func (a *admission) grant() {
	for a.used < a.limit && a.waiting.Len() > 0 {
		t := a.waiting.Remove(a.waiting.Front()).(*ticket)
		t.e = nil
		a.used++
		close(t.granted)
	}
}

// step moves the bound by one: down while the cores are behind, up while
// they are not and every place is taken.
func (a *admission) step(behind bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case behind && a.limit > a.lo:
		a.limit--
	case !behind && a.limit < a.hi && a.used >= a.limit && a.waiting.Len() > 0:
		a.limit++
		a.grant()
	}
}

func (a *admission) state() (limit, used, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit, a.used, a.waiting.Len()
}

// Admission bounds, per core. At least 24 places per core keep group
// commits and reads in flight while etcd answers: a message holds its
// place while its write commits, and with 8 a fleet's reports in a
// rollout that replaces instances waited seconds for places while the
// cores had room. 64 per core bound the memory of messages taken in.
const (
	placesLow     = 24
	placesHigh    = 64
	placesInitial = 24
	// queuedPerCore is how many goroutines may queue for each core before
	// the bound shrinks. At 5,000 instances an API call's p99 came to
	// about 1 ms per goroutine queued: 12 per core kept it under 50 ms in
	// rollouts, and leaves the bound room to rise.
	queuedPerCore = 12
	adjustEvery   = 2 * time.Millisecond
)

// adjust follows the scheduler's count of runnable goroutines until ctx
// ends.
func (a *admission) adjust(ctx context.Context) {
	sample := []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
	t := time.NewTicker(adjustEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return // not reported by this runtime: the bound stays
		}
		a.step(sample[0].Value.Uint64() > uint64(queuedPerCore*cpus.Cores()))
	}
}
