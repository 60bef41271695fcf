package session

import (
	"context"
	"sync"

	"github.com/capstanhq/capstan/internal/protocol"
)

// LogServer answers log requests (package agent/logs).
type LogServer interface {
	Serve(ctx context.Context, req protocol.LogRequest, send func(protocol.LogChunk) error) protocol.LogEnd
}

// maxLogStreams bounds the log requests an agent serves at once; more are
// refused, so the session's queue is never all log chunks.
const maxLogStreams = 8

// logStreams are a session's log requests in progress.
type logStreams struct {
	mu     sync.Mutex
	cancel map[uint64]context.CancelFunc
	wg     sync.WaitGroup
}

// start serves req in its own goroutine; its chunks queue with the
// session's other messages, so one that cannot be sent waits and the
// session's reader and heartbeats go on.
func (c *Client) startLogs(ctx context.Context, ls *logStreams, req protocol.LogRequest, out chan<- protocol.Message) {
	send := func(m protocol.Message) error {
		select {
		case out <- m:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ls.mu.Lock()
	if c.cfg.Logs == nil || len(ls.cancel) >= maxLogStreams {
		ls.mu.Unlock()
		end := protocol.LogEnd{ID: req.ID, Code: "TooManyRequests", Message: "the agent is serving as many log requests as it allows; try again"}
		if c.cfg.Logs == nil {
			end.Code, end.Message = "LogsUnsupported", "this agent does not serve logs"
		}
		// From a goroutine: the reader must not wait on the queue.
		go send(protocol.Message{Type: protocol.TypeLogEnd, LogEnd: &end})
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	ls.cancel[req.ID] = cancel
	ls.wg.Add(1)
	ls.mu.Unlock()
	go func() {
		defer ls.wg.Done()
		end := c.cfg.Logs.Serve(rctx, req, func(ch protocol.LogChunk) error {
			return send(protocol.Message{Type: protocol.TypeLogChunk, LogChunk: &ch})
		})
		ls.mu.Lock()
		delete(ls.cancel, req.ID)
		ls.mu.Unlock()
		cancel()
		send(protocol.Message{Type: protocol.TypeLogEnd, LogEnd: &end})
	}()
}

func (ls *logStreams) stop(id uint64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if cancel := ls.cancel[id]; cancel != nil {
		cancel()
	}
}
