package server

import (
	"container/list"
	"context"
	"sync"

	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/store"
)

// maxScopes bounds the callers remembered; a forgotten caller's next call
// starts a scope that has seen every write so far, so forgetting costs a
// wait, never a stale read of the caller's own write.
const maxScopes = 4096

// scopes gives each API caller (access key) its own consistency scope:
// read-only calls see the caller's writes without waiting for the
// controllers' latest. The least recently seen caller is forgotten first:
// a fleet of instances registering with keys of their own, each calling a
// few times, must not take an operator's scope away at random.
type scopes struct {
	st  *store.Store
	max int
	mu  sync.Mutex
	m   map[string]*list.Element // of scopeEntry
	lru list.List                // most recent first
}

type scopeEntry struct {
	key string
	sc  *store.Scope
}

func newScopes(st *store.Store, max int) *scopes {
	return &scopes{st: st, max: max, m: map[string]*list.Element{}}
}

func (s *scopes) scope(ctx context.Context, p auth.Principal, readOnly bool) context.Context {
	return s.st.InScope(ctx, s.of(p.AccessKeyID), readOnly)
}

// of is key's scope, started now if key was not seen or was forgotten.
func (s *scopes) of(key string) *store.Scope {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[key]; ok {
		s.lru.MoveToFront(e)
		return e.Value.(scopeEntry).sc
	}
	if s.lru.Len() >= s.max {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.m, old.Value.(scopeEntry).key)
	}
	sc := s.st.NewScope()
	s.m[key] = s.lru.PushFront(scopeEntry{key, sc})
	return sc
}
