package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Group commit: many small independent transactions (a fleet's agents each
// reporting a task's new state) become one etcd transaction. Each costs a
// raft proposal, a WAL write and a watch event batch of its own otherwise;
// under load the next group forms while one commits, so the group grows
// with the load and an idle store adds no wait.

// groupBytes bounds one group's payload, under the smallest request limit
// an external etcd is likely to have (1.5 MiB by default).
const groupBytes = 1 << 20

// groupTimeout bounds one group's commit: the callers may have none.
const groupTimeout = 30 * time.Second

type grouper struct {
	mu      sync.Mutex
	queue   []*grouped
	leading bool
}

type grouped struct {
	t     *Txn
	bytes int
	done  chan struct{}
	rev   int64
	err   error
}

// errAlone sends a transaction back to commit on its own.
var errAlone = errors.New("store: commit alone")

// CommitGrouped commits like Commit, possibly in one etcd transaction with
// other callers' grouped transactions. All of a group commit at the same
// revision; a failed revision check of one fails none of the others; two
// that write the same key go to different groups.
func (t *Txn) CommitGrouped(ctx context.Context) (int64, error) {
	if t.err != nil || len(t.ops) == 0 {
		return t.Commit(ctx)
	}
	g := &grouped{t: t, bytes: t.size(), done: make(chan struct{})}
	if err := t.s.space.admit(int64(g.bytes), t.puts()); err != nil {
		return 0, err
	}
	if g.bytes > groupBytes || len(t.ops) > t.s.MaxTxnOps() || len(t.cmps) > t.s.MaxTxnOps() {
		return t.Commit(ctx)
	}
	gr := &t.s.group
	gr.mu.Lock()
	gr.queue = append(gr.queue, g)
	lead := !gr.leading
	gr.leading = true
	gr.mu.Unlock()
	if lead {
		t.s.lead()
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if errors.Is(g.err, errAlone) {
		return t.Commit(ctx)
	}
	if errors.Is(g.err, ErrConflict) {
		t.conflicted(ctx, g.rev)
	}
	if g.err != nil {
		return 0, g.err
	}
	t.committed(ctx, g.rev)
	return g.rev, nil
}

// lead commits the next group. The queue was empty when this caller began
// leading, so its own transaction is in the group; leading passes on to a
// new goroutine while others wait, so no caller waits for more than its
// own group.
func (s *Store) lead() {
	gr := &s.group
	gr.mu.Lock()
	batch := s.nextGroup()
	gr.mu.Unlock()
	s.commitGroup(batch)
	gr.mu.Lock()
	if len(gr.queue) == 0 {
		gr.leading = false
		gr.mu.Unlock()
		return
	}
	gr.mu.Unlock()
	go s.lead()
}

// nextGroup takes from the head of the queue what fits in one etcd
// transaction: within the operation and size limits, no key written twice.
func (s *Store) nextGroup() []*grouped {
	gr := &s.group
	limit := s.MaxTxnOps()
	written := map[string]bool{}
	ops, cmps, bytes, n := 0, 0, 0, 0
	for _, g := range gr.queue {
		if n > 0 && (ops+len(g.t.ops) > limit || cmps+len(g.t.cmps) > limit || bytes+g.bytes > groupBytes || overlaps(g.t, written)) {
			break
		}
		for _, op := range g.t.ops {
			written[string(op.KeyBytes())] = true
		}
		ops, cmps, bytes, n = ops+len(g.t.ops), cmps+len(g.t.cmps), bytes+g.bytes, n+1
	}
	batch := gr.queue[:n:n]
	gr.queue = gr.queue[n:]
	return batch
}

func overlaps(t *Txn, written map[string]bool) bool {
	for _, op := range t.ops {
		if written[string(op.KeyBytes())] {
			return true
		}
	}
	return false
}

// commitGroup commits batch as one transaction. When a revision check
// fails, the halves are tried apart, down to the transactions that failed.
func (s *Store) commitGroup(batch []*grouped) {
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for _, g := range batch {
		cmps = append(cmps, g.t.cmps...)
		ops = append(ops, g.t.ops...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	cancel()
	switch {
	case err != nil && len(batch) == 1:
		batch[0].err = fmt.Errorf("etcd txn: %w", classify(err))
		close(batch[0].done)
	case err != nil:
		// Too large after all, or etcd unavailable: each finds out alone.
		for _, g := range batch {
			g.err = errAlone
			close(g.done)
		}
	case resp.Succeeded:
		for _, g := range batch {
			g.rev = resp.Header.Revision
			close(g.done)
		}
	case len(batch) == 1:
		batch[0].rev, batch[0].err = resp.Header.Revision, ErrConflict
		close(batch[0].done)
	default:
		half := len(batch) / 2
		s.commitGroup(batch[:half])
		s.commitGroup(batch[half:])
	}
}

// puts says whether the transaction writes a value (not only deletes).
func (t *Txn) puts() bool {
	for _, op := range t.ops {
		if op.IsPut() {
			return true
		}
	}
	return false
}

// size is the transaction's payload in bytes, roughly.
func (t *Txn) size() int {
	n := 0
	for _, op := range t.ops {
		n += len(op.KeyBytes()) + len(op.ValueBytes()) + 8
	}
	return n + 32*len(t.cmps)
}
