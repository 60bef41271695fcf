package gateway

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/cpus"
)

// No more than the bound run at once, waits included; the rest wait and
// all get their turn, first come first served; a waiter whose session ends
// stops waiting, and a queued ticket given up leaves the queue.
func TestAdmissionBoundsWorkInFlight(t *testing.T) {
	const size = 4
	a := newAdmission(size, size, size)
	var now, most, done atomic.Int32
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			tk, err := a.enter(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			n := now.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(100 * time.Microsecond)
			now.Add(-1)
			tk.done()
			tk.done() // a second done gives nothing back twice
			done.Add(1)
		})
	}
	wg.Wait()
	if most.Load() > size || done.Load() != 200 {
		t.Fatalf("%d ran at most at once (bound %d), %d of 200 done", most.Load(), size, done.Load())
	}
	if _, used, _ := a.state(); used != 0 {
		t.Fatalf("%d places still taken after all were given back", used)
	}

	held := make([]*ticket, size)
	for i := range held {
		held[i], _ = a.enter(context.Background())
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := a.enter(ctx); errc <- err }()
	first, second := a.ask(), a.ask()
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("entered a full admission")
	}
	first.done() // gives up its place in the queue
	first.done() // and a second done gives back nothing it never had
	held[0].done()
	select {
	case <-second.ready():
	case <-time.After(5 * time.Second):
		t.Fatal("the next in the queue was not granted the free place")
	}
	if _, used, waiting := a.state(); used != size || waiting != 0 {
		t.Fatalf("used %d, waiting %d; want %d and 0", used, waiting, size)
	}
}

// The bound falls while the cores are behind, to its floor, and rises
// only while every place is taken and work waits, granting it at once.
func TestAdmissionStepsWithTheCores(t *testing.T) {
	a := newAdmission(6, 4, 8)
	for range 10 {
		a.step(true)
	}
	if l, _, _ := a.state(); l != 4 {
		t.Fatalf("bound %d after the cores were behind, want the floor 4", l)
	}
	a.step(false)
	if l, _, _ := a.state(); l != 4 {
		t.Fatalf("bound rose to %d with nothing waiting", l)
	}
	for range 4 {
		a.enter(context.Background())
	}
	w := a.ask()
	a.step(false)
	select {
	case <-w.ready():
	default:
		t.Fatal("a rising bound did not admit the waiter")
	}
	for range 10 {
		a.ask()
		a.step(false)
	}
	if l, used, _ := a.state(); l != 8 || used != 8 {
		t.Fatalf("bound %d, used %d; want the ceiling 8, all used", l, used)
	}
}

// Against the real scheduler: goroutines queued for the cores drive the
// bound to its floor; once they are gone and work waits, it rises.
func TestAdmissionFollowsTheRunQueue(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	lo, hi := placesLow*procs, placesHigh*procs
	a := newAdmission(hi, lo, hi)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.adjust(ctx)

	var stop atomic.Bool
	var spin sync.WaitGroup
	for range 4 * queuedPerCore * procs {
		spin.Go(func() {
			for !stop.Load() {
				for i := 0; i < 1000; i++ {
				}
				runtime.Gosched()
			}
		})
	}
	waitFor := func(what string, ok func(limit int) bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; {
			l, _, _ := a.state()
			if ok(l) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("bound %d: %s", l, what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("did not fall to the floor with the cores behind", func(l int) bool { return l == lo })
	stop.Store(true)
	spin.Wait()
	for range hi + 10 {
		a.ask()
	}
	waitFor("did not rise with the cores free and work waiting", func(l int) bool { return l > 2*lo })
}

func TestAdmissionCountsCoresNotProcessors(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	want := cpus.Cores()
	runtime.GOMAXPROCS(4 * runtime.NumCPU())
	g := New(nil, nil, nil, "s", nil)
	defer g.Close()
	if limit, _, _ := g.work.state(); limit != placesInitial*want {
		t.Fatalf("admission limit %d at GOMAXPROCS %d, want %d per core (%d)", limit, runtime.GOMAXPROCS(0), placesInitial, placesInitial*want)
	}
}
