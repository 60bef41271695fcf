package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/capstanhq/capstan/internal/store"
)

// A caller who keeps calling keeps its scope while a crowd of new callers
// passes through; a caller gone quiet is forgotten, and the bound holds.
func TestScopesForgetTheLeastRecentCaller(t *testing.T) {
	st, err := store.Open(context.Background(), store.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := newScopes(st, 8)
	quiet := s.of("quiet")
	op := s.of("operator")
	for i := range 100 {
		s.of(fmt.Sprintf("instance-%d", i))
		if s.of("operator") != op {
			t.Fatalf("the operator's scope was forgotten after %d other callers", i+1)
		}
	}
	if len(s.m) != 8 || s.lru.Len() != 8 {
		t.Fatalf("%d callers remembered (%d in order), want 8", len(s.m), s.lru.Len())
	}
	if s.of("quiet") == quiet {
		t.Fatal("a caller quiet through 100 others kept its scope")
	}
}
