package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// etcd's no-leader and timeout answers, and the commit's own deadline,
// are the store being unavailable; the caller's own deadline is not.
func TestUnavailableClassification(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{live, rpctypes.ErrGRPCNoLeader, true},
		{live, rpctypes.ErrTimeout, true},
		{live, rpctypes.ErrGRPCTimeoutDueToConnectionLost, true},
		{live, fmt.Errorf("txn: %w", context.DeadlineExceeded), true},
		{done, context.DeadlineExceeded, false},
		{live, rpctypes.ErrGRPCNoSpace, false},
		{live, errors.New("other"), false},
	} {
		if got := unavailable(c.ctx, c.err); got != c.want {
			t.Errorf("unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	err := fmt.Errorf("etcd txn: %w", unavailableErr(context.DeadlineExceeded))
	msg, ok := UnavailableMessage(err)
	if !ok || !strings.HasPrefix(msg, ErrUnavailable.Error()) {
		t.Errorf("UnavailableMessage(%v) = %q, %v", err, msg, ok)
	}
	if _, ok := UnavailableMessage(errors.New("other")); ok {
		t.Error("an unrelated error is called unavailable")
	}
}
