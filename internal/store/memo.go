package store

import (
	"context"
	"errors"
	"strings"
	"sync"
)

// Memo keeps values decoded at their revision, so that a reader that reads
// the same records pass after pass (a controller listing thousands of
// instances) decodes only those that changed since. The values it returns
// are shared: callers must not change them.
type Memo[T any] struct {
	mu sync.Mutex
	m  map[string]*Item[T]
}

// Get is Get through the memo.
func (m *Memo[T]) Get(ctx context.Context, s *Store, key string) (*Item[T], error) {
	rev, err := Rev(ctx, s, key)
	m.mu.Lock()
	defer m.mu.Unlock()
	if errors.Is(err, ErrNotFound) {
		delete(m.m, key)
	}
	if err != nil {
		return nil, err
	}
	return m.at(ctx, s, key, rev)
}

// at returns key's value at rev, decoding it unless the memo has it; m.mu
// is held.
func (m *Memo[T]) at(ctx context.Context, s *Store, key string, rev int64) (*Item[T], error) {
	if it := m.m[key]; it != nil && it.Rev == rev {
		return it, nil
	}
	it, err := Get[T](ctx, s, key)
	if errors.Is(err, ErrNotFound) {
		delete(m.m, key)
	}
	if err != nil {
		return nil, err
	}
	if m.m == nil {
		m.m = map[string]*Item[T]{}
	}
	m.m[key] = &it
	return &it, nil
}

// List is List of a whole prefix through the memo; what the memo holds
// under prefix and the store no longer does is forgotten.
func (m *Memo[T]) List(ctx context.Context, s *Store, prefix string) ([]*Item[T], error) {
	revs, _, err := Revisions(ctx, s, prefix, "", 0)
	if err != nil {
		return nil, err
	}
	return m.only(ctx, s, prefix, revs)
}

// Read reads the named keys, all under prefix, through the memo, in
// order, leaving out those not found; what the memo holds under prefix
// besides them is forgotten.
func (m *Memo[T]) Read(ctx context.Context, s *Store, prefix string, keys []string) ([]*Item[T], error) {
	revs := make([]Item[struct{}], 0, len(keys))
	for _, k := range keys {
		rev, err := Rev(ctx, s, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		revs = append(revs, Item[struct{}]{Key: k, Rev: rev})
	}
	return m.only(ctx, s, prefix, revs)
}

// only returns the values of revs and keeps no others under prefix.
func (m *Memo[T]) only(ctx context.Context, s *Store, prefix string, revs []Item[struct{}]) ([]*Item[T], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Item[T], 0, len(revs))
	for _, r := range revs {
		it, err := m.at(ctx, s, r.Key, r.Rev)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since the scan
		}
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	if len(m.m) > len(out) {
		listed := make(map[string]bool, len(out))
		for _, it := range out {
			listed[it.Key] = true
		}
		for k := range m.m {
			if strings.HasPrefix(k, prefix) && !listed[k] {
				delete(m.m, k)
			}
		}
	}
	return out, nil
}

// Holds reports whether the memo keeps a value for key.
func (m *Memo[T]) Holds(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[key] != nil
}
