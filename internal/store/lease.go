package store

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lease is an etcd lease: keys written with it vanish when it is not renewed
// within its TTL. Renewals are not writes to the etcd log, which makes
// leases the cheap way to track liveness.
type Lease struct {
	s  *Store
	id clientv3.LeaseID
}

// Grant creates a lease with the given TTL.
func (s *Store) Grant(ctx context.Context, ttl time.Duration) (*Lease, error) {
	r, err := bounded(ctx, func(c context.Context) (*clientv3.LeaseGrantResponse, error) {
		return s.client.Grant(c, int64(max(ttl/time.Second, 1)))
	})
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", classify(err))
	}
	return &Lease{s: s, id: r.ID}, nil
}

// Keep renews the lease over one stream until ctx ends. The returned
// channel closes when the lease is lost: expired (etcd unreachable for its
// TTL), revoked, or ctx ended.
func (l *Lease) Keep(ctx context.Context) (<-chan struct{}, error) {
	ch, err := l.s.client.KeepAlive(ctx, l.id)
	if err != nil {
		return nil, fmt.Errorf("keep lease: %w", err)
	}
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		for range ch {
		}
	}()
	return lost, nil
}

// Revoke ends the lease now, deleting its keys.
func (l *Lease) Revoke(ctx context.Context) error {
	rev, err := bounded(ctx, func(c context.Context) (*clientv3.LeaseRevokeResponse, error) { return l.s.client.Revoke(c, l.id) })
	if err != nil {
		return fmt.Errorf("revoke lease: %w", err)
	}
	l.s.noteWrite(rev.Header.Revision)
	return nil
}

// PutWithLease writes key unconditionally, attached to the lease.
func (t *Txn) PutWithLease(key string, v any, l *Lease) *Txn {
	if b, ok := t.encode(key, v); ok {
		t.ops = append(t.ops, clientv3.OpPut(t.s.prefix+key, b, clientv3.WithLease(l.id)))
	}
	return t
}

// Put writes key whatever its revision; only for keys owned by one writer.
func (t *Txn) Put(key string, v any) *Txn {
	t.put(key, v)
	return t
}
