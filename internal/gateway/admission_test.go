package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// No more than the admission's size run at once; the rest wait and all get
// their turn; a waiter whose session ends stops waiting.
func TestAdmissionBoundsWorkInFlight(t *testing.T) {
	const size = 4
	a := make(admission, size)
	var now, most, done atomic.Int32
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if err := a.enter(context.Background()); err != nil {
				t.Error(err)
				return
			}
			n := now.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(100 * time.Microsecond)
			now.Add(-1)
			a.leave()
			done.Add(1)
		})
	}
	wg.Wait()
	if most.Load() > size || done.Load() != 200 {
		t.Fatalf("%d ran at most at once (admission %d), %d of 200 done", most.Load(), size, done.Load())
	}
	for range size {
		a.enter(context.Background())
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.enter(ctx) }()
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("entered a full admission")
	}
}
