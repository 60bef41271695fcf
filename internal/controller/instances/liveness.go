package instances

import "time"

// silentFor is how long the instance has been seen without a session.
func (r *Reconciler) silentFor(id string, now time.Time) time.Duration {
	return r.seenFor(&r.silent, id, now)
}

// activeFor is how long this leader has seen the instance ACTIVE.
func (r *Reconciler) activeFor(id string, now time.Time) time.Duration {
	return r.seenFor(&r.active, id, now)
}

// seenFor is how long ago id was first recorded in *seen, recording it now
// if it was not.
func (r *Reconciler) seenFor(seen *map[string]time.Time, id string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *seen == nil {
		*seen = map[string]time.Time{}
	}
	since, ok := (*seen)[id]
	if !ok {
		(*seen)[id] = now
		return 0
	}
	return now.Sub(since)
}

// heard forgets an instance's silence.
func (r *Reconciler) heard(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.silent, id)
}
