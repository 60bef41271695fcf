package server

import (
	"context"
	"fmt"

	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/store"
)

// reachLookup looks up access keys, and while the server cannot reach
// etcd does not call a key it does not know unrecognized: it may have been
// made since the server's view stopped (an agent of an instance the new
// leader launched). The request fails with a server error instead, which
// sends an agent on to another server of its list.
type reachLookup struct {
	auth.Lookup
	st *store.Store
}

func (l reachLookup) Credential(ctx context.Context, accessKeyID string) (auth.Credential, bool, error) {
	c, ok, err := l.Lookup.Credential(ctx, accessKeyID)
	if err == nil && !ok {
		if up, why := l.st.Reachable(); !up {
			return c, false, fmt.Errorf("%w (%s)", store.ErrUnavailable, why)
		}
	}
	return c, ok, err
}
