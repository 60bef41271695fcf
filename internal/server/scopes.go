package server

import (
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
// controllers' latest.
type scopes struct {
	st *store.Store
	mu sync.Mutex
	m  map[string]*store.Scope
}

func (s *scopes) scope(ctx context.Context, p auth.Principal, readOnly bool) context.Context {
	s.mu.Lock()
	sc, ok := s.m[p.AccessKeyID]
	if !ok {
		if len(s.m) >= maxScopes {
			for k := range s.m { // map order: an arbitrary victim
				delete(s.m, k)
				break
			}
		}
		sc = s.st.NewScope()
		s.m[p.AccessKeyID] = sc
	}
	s.mu.Unlock()
	return s.st.InScope(ctx, sc, readOnly)
}
