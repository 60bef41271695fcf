package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// Log requests: the server asks an instance's agent over its session and
// gets lines back in chunks (protocol.LogRequest). The session's receiver
// never waits for whoever asked: a request's queue holds its whole window
// (the agent stops at MaxBytes), and an agent that sends more than that
// ends the request, not the session.

// maxLogRequests bounds a server's log requests in progress, and with
// them the memory their windows may hold (LogMaxBytes each).
const maxLogRequests = 64

// logQueue is long enough for a full window of chunks and the end.
const logQueue = protocol.LogMaxBytes/protocol.LogChunkBytes + 4

var logIDs atomic.Uint64

var errLogOverflow = errors.New("the agent sent more than the log request's window")

// logRequests are a session's log requests in progress.
type logRequests struct {
	mu   sync.Mutex
	reqs map[uint64]*logRequest
	done bool // the session ended
}

type logRequest struct {
	q        chan protocol.Message
	routed   int  // messages routed so far
	overflow bool // the agent sent more than the window; q is closed
}

// Logs asks the agent of a cluster's instance for a container's logs,
// handing each chunk's lines to fn, and returns the request's end.
func (g *Gateway) Logs(ctx context.Context, cluster, instance string, req protocol.LogRequest, fn func([]protocol.LogLine) error) (protocol.LogEnd, error) {
	g.mu.Lock()
	s := g.sessions[cluster+"/"+instance]
	g.mu.Unlock()
	if s == nil {
		it, err := store.Get[store.Session](ctx, g.st, store.SessionKey(cluster, instance))
		if err == nil && it.Value.Server != g.server {
			return protocol.LogEnd{}, fmt.Errorf("%w (%s)", protocol.ErrAgentElsewhere, it.Value.Server)
		}
		return protocol.LogEnd{}, protocol.ErrAgentNotConnected
	}
	select {
	case g.logSlots <- struct{}{}:
		defer func() { <-g.logSlots }()
	default:
		return protocol.LogEnd{}, protocol.ErrLogsBusy
	}
	req.ID = logIDs.Add(1)
	r := &logRequest{q: make(chan protocol.Message, logQueue)}
	s.logs.mu.Lock()
	if s.logs.done {
		s.logs.mu.Unlock()
		return protocol.LogEnd{}, protocol.ErrAgentNotConnected
	}
	if s.logs.reqs == nil {
		s.logs.reqs = map[uint64]*logRequest{}
	}
	s.logs.reqs[req.ID] = r
	s.logs.mu.Unlock()
	finished := false
	defer func() {
		s.logs.mu.Lock()
		delete(s.logs.reqs, req.ID)
		s.logs.mu.Unlock()
		if !finished {
			s.send(protocol.Message{Type: protocol.TypeLogCancel, LogCancel: &protocol.LogCancel{ID: req.ID}})
		}
	}()
	if err := s.send(protocol.Message{Type: protocol.TypeLogRequest, LogRequest: &req}); err != nil {
		return protocol.LogEnd{}, protocol.ErrAgentNotConnected
	}
	for {
		select {
		case <-ctx.Done():
			return protocol.LogEnd{}, ctx.Err()
		case m, ok := <-r.q:
			if !ok {
				s.logs.mu.Lock()
				overflow := r.overflow
				s.logs.mu.Unlock()
				if overflow {
					return protocol.LogEnd{}, errLogOverflow
				}
				return protocol.LogEnd{}, fmt.Errorf("%w: its session ended during the request", protocol.ErrAgentNotConnected)
			}
			switch {
			case m.LogEnd != nil:
				finished = true
				return *m.LogEnd, nil
			case m.LogChunk != nil:
				if err := fn(m.LogChunk.Lines); err != nil {
					return protocol.LogEnd{}, err
				}
			}
		}
	}
}

// route hands an agent's log message to its request; one for a request
// that has ended is dropped.
func (s *session) routeLog(id uint64, m protocol.Message) {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	r := s.logs.reqs[id]
	if r == nil {
		return
	}
	// More messages than a window's chunks and its end: the request
	// fails, the session goes on. Counted, not judged by the queue, so the
	// rule holds however fast the caller drains it, and the queue (as
	// long as the count allows) never makes the receiver wait.
	r.routed++
	if r.routed > logQueue {
		delete(s.logs.reqs, id)
		r.overflow = true
		close(r.q)
		return
	}
	r.q <- m
}

// endLogs fails the requests of an ended session.
func (s *session) endLogs() {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	s.logs.done = true
	for id, r := range s.logs.reqs {
		close(r.q)
		delete(s.logs.reqs, id)
	}
}
