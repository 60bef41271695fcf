package engine

import (
	"context"
	"sync"

	"github.com/capstanhq/capstan/internal/protocol"
)

// outbox is an unbounded FIFO in front of the Changes channel: tasks push
// without ever waiting for the reader.
type outbox struct {
	ch   chan protocol.TaskState
	mu   sync.Mutex
	q    []protocol.TaskState
	wake chan struct{}
}

func newOutbox() *outbox {
	return &outbox{ch: make(chan protocol.TaskState), wake: make(chan struct{}, 1)}
}

func (o *outbox) push(s protocol.TaskState) {
	o.mu.Lock()
	o.q = append(o.q, s)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// pump delivers queued states until ctx ends.
func (o *outbox) pump(ctx context.Context) {
	for {
		o.mu.Lock()
		var next protocol.TaskState
		have := len(o.q) > 0
		if have {
			next = o.q[0]
		}
		o.mu.Unlock()
		if !have {
			select {
			case <-ctx.Done():
				return
			case <-o.wake:
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case o.ch <- next:
			o.mu.Lock()
			o.q[0] = protocol.TaskState{}
			o.q = o.q[1:]
			if len(o.q) == 0 {
				o.q = nil // let the backing array go
			}
			o.mu.Unlock()
		}
	}
}
