package store

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
)

// revWaiters holds callers waiting for a revision, lowest first.
type revWaiters struct {
	mu sync.Mutex
	h  revHeap
}

type revWaiter struct {
	rev  int64
	i    int // place in the heap; -1 once woken
	done chan struct{}
}

// wait blocks until cur reaches rev or ctx ends. The advance that makes
// cur reach rev stores cur before calling reached, so checking cur under
// mu misses no wake.
func (w *revWaiters) wait(ctx context.Context, rev int64, cur *atomic.Int64) error {
	w.mu.Lock()
	if cur.Load() >= rev {
		w.mu.Unlock()
		return nil
	}
	x := &revWaiter{rev: rev, done: make(chan struct{})}
	heap.Push(&w.h, x)
	w.mu.Unlock()
	select {
	case <-x.done:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		if x.i >= 0 {
			heap.Remove(&w.h, x.i)
		}
		w.mu.Unlock()
		if cur.Load() >= rev {
			return nil
		}
		return ctx.Err()
	}
}

// reached wakes the waiters for revisions up to rev.
func (w *revWaiters) reached(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.h) > 0 && w.h[0].rev <= rev {
		x := heap.Pop(&w.h).(*revWaiter)
		close(x.done)
	}
}

// len is how many wait.
func (w *revWaiters) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.h)
}

type revHeap []*revWaiter

func (h revHeap) Len() int           { return len(h) }
func (h revHeap) Less(i, j int) bool { return h[i].rev < h[j].rev }
func (h revHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *revHeap) Push(x any) {
	w := x.(*revWaiter)
	w.i = len(*h)
	*h = append(*h, w)
}
func (h *revHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.i = -1
	return w
}
