package controller

import (
	"sync"
	"time"
)

// Pacer spaces the passes over one key: a reconcile that reads a whole
// fleet, woken by every change of a fleet that changes many times a
// second, coalesces those changes instead of following each.
type Pacer struct {
	mu   sync.Mutex
	last map[string]time.Time // by key: when its last pass began
}

// Due reports whether key may be passed over now, at least every apart
// after its last pass (0, and the pass is counted as begun), or how long
// to wait first.
func (p *Pacer) Due(key string, every time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if since := now.Sub(p.last[key]); since < every {
		return every - since
	}
	if p.last == nil {
		p.last = map[string]time.Time{}
	}
	if len(p.last) > 1024 {
		for k, t := range p.last {
			if now.Sub(t) > every {
				delete(p.last, k) // passed long enough ago to be due anyway
			}
		}
	}
	p.last[key] = now
	return 0
}
