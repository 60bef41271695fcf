package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrUnavailable is a write etcd did not answer in time or refused for
// want of a leader: the cluster has lost its quorum, or this server cannot
// reach it. The write may still be applied if a leader had it in its log.
var ErrUnavailable = errors.New("the store (etcd) is unavailable: no quorum, or not reachable from this server; the write may not have been applied, retry later")

// commitTimeout bounds one transaction, and every other call to etcd
// that does not come from the cache (direct reads, lease grants and
// revocations): etcd answers a healthy one in milliseconds and times out
// its own requests after about 7 s, but a call to a member that stopped
// answering (stopped, or cut off) would hang.
const commitTimeout = 10 * time.Second

// bounded makes one etcd call with commitTimeout, its failure for want of
// a quorum or an answer being ErrUnavailable.
func bounded[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	r, err := call(cctx)
	if err != nil && unavailable(ctx, err) {
		err = unavailableErr(err)
	}
	return r, err
}

// get reads from etcd itself, bounded as a transaction is.
func (s *Store) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return bounded(ctx, func(c context.Context) (*clientv3.GetResponse, error) { return s.client.Get(c, key, opts...) })
}

// unavailable says whether err is etcd lacking a leader or a quorum, or
// the commit's own deadline (ctx is the caller's, not yet done).
func unavailable(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrGRPCNoLeader),
		errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrGRPCTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail), errors.Is(err, rpctypes.ErrGRPCTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost):
		return true
	}
	return ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)
}

// UnavailableMessage is the message for an API caller when err is the
// store being unavailable.
func UnavailableMessage(err error) (string, bool) {
	if !errors.Is(err, ErrUnavailable) {
		return "", false
	}
	msg := err.Error()
	if i := strings.Index(msg, ErrUnavailable.Error()); i > 0 {
		msg = msg[i:]
	}
	return msg, true
}

func unavailableErr(err error) error { return fmt.Errorf("%w (%v)", ErrUnavailable, err) }
