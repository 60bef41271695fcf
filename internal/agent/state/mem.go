package state

import (
	"errors"
	"slices"
	"sync"
)

// errStop ends a ForEach early without an error.
var errStop = errors.New("stop")

// OpenMemory returns a database that lives only in this process: the same
// buckets, checks and transactions without a file. For hollow instances,
// whose state goes with them anyway: a bbolt commit per report was a
// quarter of the CPU of thousands of simulated agents sharing the
// control plane's cores. A real agent never uses it.
func OpenMemory() *DB {
	m := &memDB{buckets: map[string]map[string][]byte{}}
	for _, b := range allBuckets {
		m.buckets[string(b)] = map[string][]byte{}
	}
	return &DB{mem: m}
}

// memDB holds buckets as maps; a write transaction sees its own writes
// and applies them only if it succeeds, as bbolt's does.
type memDB struct {
	mu      sync.RWMutex
	buckets map[string]map[string][]byte
}

func (m *memDB) view(fn func(kvTx) error) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return fn(memTx{m: m})
}

func (m *memDB) update(fn func(kvTx) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	tx := memTx{m: m, writes: map[string]map[string][]byte{}}
	if err := fn(tx); err != nil {
		return err
	}
	for name, w := range tx.writes {
		b := m.buckets[name]
		for k, v := range w {
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
		}
	}
	return nil
}

type memTx struct {
	m      *memDB
	writes map[string]map[string][]byte // nil value: deleted; nil map: read-only
}

func (t memTx) Bucket(name []byte) kvBucket {
	return memBucket{tx: t, name: string(name)}
}

type memBucket struct {
	tx   memTx
	name string
}

var errReadOnly = errors.New("write in a read-only transaction")

func (b memBucket) Get(k []byte) []byte {
	if v, ok := b.tx.writes[b.name][string(k)]; ok {
		return v
	}
	return b.tx.m.buckets[b.name][string(k)]
}

func (b memBucket) set(k, v []byte) error {
	if b.tx.writes == nil {
		return errReadOnly
	}
	w := b.tx.writes[b.name]
	if w == nil {
		w = map[string][]byte{}
		b.tx.writes[b.name] = w
	}
	w[string(k)] = v
	return nil
}

func (b memBucket) Put(k, v []byte) error {
	if len(k) == 0 {
		return errors.New("key required")
	}
	return b.set(k, append([]byte{}, v...)) // never nil: nil marks a delete
}

func (b memBucket) Delete(k []byte) error { return b.set(k, nil) }

// ForEach visits the keys in byte order, as bbolt's does.
func (b memBucket) ForEach(fn func(k, v []byte) error) error {
	keys := make([]string, 0, len(b.tx.m.buckets[b.name]))
	for k := range b.tx.m.buckets[b.name] {
		if _, ok := b.tx.writes[b.name][k]; !ok {
			keys = append(keys, k)
		}
	}
	for k, v := range b.tx.writes[b.name] {
		if v != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // strings compare bytewise
	for _, k := range keys {
		if err := fn([]byte(k), b.Get([]byte(k))); err != nil {
			return err
		}
	}
	return nil
}
