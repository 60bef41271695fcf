package controller

import (
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/cpus"
)

// Pacer spaces the passes over one key: a reconcile that reads a whole
// fleet, woken by every change of a fleet that changes many times a
// second, coalesces those changes instead of following each.
type Pacer struct {
	mu   sync.Mutex
	last map[string]time.Time     // by key: when its last pass began
	rest map[string]time.Duration // by key: longer spacing after its last pass
}

// Due reports whether key may be passed over now, at least every apart
// after its last pass (0, and the pass is counted as begun), or how long
// to wait first.
func (p *Pacer) Due(key string, every time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	every = max(every, p.rest[key])
	if since := now.Sub(p.last[key]); since < every {
		return every - since
	}
	if p.last == nil {
		p.last = map[string]time.Time{}
	}
	if len(p.last) > 1024 {
		for k, t := range p.last {
			if now.Sub(t) > max(every, p.rest[k]) {
				delete(p.last, k) // passed long enough ago to be due anyway
				delete(p.rest, k)
			}
		}
	}
	p.last[key] = now
	return 0
}

// Rest spaces key's next pass at least d after the start of its last one
// (0: back to the spacing Due is given). For passes that found nothing to
// do: spaced in proportion to their cost, they take a bounded share of
// the cores however often changes wake them.
func (p *Pacer) Rest(key string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d <= 0 {
		delete(p.rest, key)
		return
	}
	if p.rest == nil {
		p.rest = map[string]time.Duration{}
	}
	p.rest[key] = d
}

// Spacing is the rest after a pass that took took: times times its
// duration, no more than most. The duration is wall time, and with more
// Go processors than cores a pass waits less in Go's run queue but runs
// at a share of a core: its wall time no longer grows with the load, so
// the rest is counted per processor on a core (cpus.PerCore) to keep the
// passes' share of the cores what it is at one per core.
func Spacing(times int, took, most time.Duration) time.Duration {
	return min(time.Duration(times*cpus.PerCore())*took, most)
}
