package server

import (
	"context"
	"fmt"
	"time"

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

// unreachableWait is how long an API call waits for etcd to answer again
// before the server refuses it: a quorum returning (a new election takes a
// few seconds) then costs a client with one endpoint nothing, while a
// server cut off for good still sends clients on sooner than a write's
// 10 s limit would.
const unreachableWait = 5 * time.Second

// reachable is st.Reachable, waiting up to unreachableWait for it to turn.
func reachable(ctx context.Context, st *store.Store) (bool, string) {
	if ok, _ := st.Reachable(); ok { // every API call: one lock, no channel
		return true, ""
	}
	changed := st.ReachChanged()
	ok, why := st.Reachable() // again, after taking the channel: no change missed
	if ok {
		return true, ""
	}
	t := time.NewTimer(unreachableWait)
	defer t.Stop()
	for {
		select {
		case <-changed:
			changed = st.ReachChanged()
			if ok, why = st.Reachable(); ok {
				return true, ""
			}
		case <-t.C:
			return false, why
		case <-ctx.Done():
			return false, why
		}
	}
}
