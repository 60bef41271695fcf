package store

import (
	"bytes"
	"maps"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// WriteCount is what the store's watch saw written under one kind of
// record (a key's first segment: "tasks", "desired", ...) since it opened:
// every writer's, this process's or another server's sharing the etcd.
type WriteCount struct {
	Puts    int64 `json:"puts"`
	Deletes int64 `json:"deletes"`
	// Bytes is the values put, keys not counted: what etcd logs, applies
	// and keeps in its history.
	Bytes int64 `json:"bytes"`
}

// writeCounts tallies the watch's changes by kind. Each watch response
// takes the lock once, so the tally costs no contention per change.
type writeCounts struct {
	mu sync.Mutex
	m  map[string]*WriteCount
}

func (w *writeCounts) add(prefix string, events []*clientv3.Event) {
	if len(events) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*WriteCount{}
	}
	for _, ev := range events {
		// On the watch's path: the kind is looked up in the key's bytes,
		// without a string per change.
		kind := ev.Kv.Key[min(len(prefix), len(ev.Kv.Key)):]
		if i := bytes.IndexByte(kind, '/'); i >= 0 {
			kind = kind[:i]
		}
		c := w.m[string(kind)]
		if c == nil {
			c = &WriteCount{}
			w.m[string(kind)] = c
		}
		if ev.Type == mvccpb.DELETE {
			c.Deletes++
			continue
		}
		c.Puts++
		c.Bytes += int64(len(ev.Kv.Value))
	}
}

func (w *writeCounts) snapshot() map[string]WriteCount {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]WriteCount, len(w.m))
	for k, c := range w.m {
		out[k] = *c
	}
	return out
}

// Writes is what was written by kind of record since the store opened, as
// its watch saw it (the initial load not counted).
func (s *Store) Writes() map[string]WriteCount { return s.cache.writes.snapshot() }

// WritesSince is the writes by kind between two snapshots of Writes;
// kinds without a write in between are left out.
func WritesSince(before, after map[string]WriteCount) map[string]WriteCount {
	out := maps.Clone(after)
	for k, a := range out {
		b := before[k]
		d := WriteCount{Puts: a.Puts - b.Puts, Deletes: a.Deletes - b.Deletes, Bytes: a.Bytes - b.Bytes}
		if d == (WriteCount{}) {
			delete(out, k)
			continue
		}
		out[k] = d
	}
	return out
}
