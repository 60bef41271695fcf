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

// Exec sessions: the server relays a client's exec through the agent's
// session (protocol/exec.go). The session's receiver never waits for the
// client: an exec's queue holds at most the output window the agent may
// send unacknowledged, and an agent that sends more ends the exec, not
// the session.

var execIDs atomic.Uint64

var errExecOverflow = errors.New("the agent sent more than the exec's output window")

// execStreams are a session's exec streams in progress.
type execStreams struct {
	mu      sync.Mutex
	streams map[uint64]*ExecStream
	done    bool // the session ended
}

// ExecStream is one exec in progress, seen from the server.
type ExecStream struct {
	s  *session
	id uint64

	wake   chan struct{} // a message queued, or the input window opened
	inWake chan struct{}
	// Under s.execs.mu:
	q      []protocol.Message // output and the exit, oldest first
	queued int                // output bytes in q
	credit int                // input bytes the agent will take now
	err    error              // why the stream ended without an exit
	exited bool
}

// Exec asks the agent of a cluster's instance to start st; the stream
// relays its input and output until Close.
func (g *Gateway) Exec(ctx context.Context, cluster, instance string, st protocol.ExecStart) (*ExecStream, error) {
	g.mu.Lock()
	s := g.sessions[cluster+"/"+instance]
	g.mu.Unlock()
	if s == nil {
		it, err := store.Get[store.Session](ctx, g.st, store.SessionKey(cluster, instance))
		if err == nil && it.Value.Server != g.server {
			return nil, fmt.Errorf("%w (%s)", protocol.ErrAgentElsewhere, it.Value.Server)
		}
		return nil, protocol.ErrAgentNotConnected
	}
	st.ID = execIDs.Add(1)
	e := &ExecStream{s: s, id: st.ID, wake: make(chan struct{}, 1), inWake: make(chan struct{}, 1), credit: protocol.ExecWindow}
	s.execs.mu.Lock()
	if s.execs.done {
		s.execs.mu.Unlock()
		return nil, protocol.ErrAgentNotConnected
	}
	if s.execs.streams == nil {
		s.execs.streams = map[uint64]*ExecStream{}
	}
	s.execs.streams[st.ID] = e
	s.execs.mu.Unlock()
	if err := s.send(protocol.Message{Type: protocol.TypeExecStart, ExecStart: &st}); err != nil {
		e.Close()
		return nil, protocol.ErrAgentNotConnected
	}
	return e, nil
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Next returns the next output or the exit (ExecOutput or ExecExit).
func (e *ExecStream) Next(ctx context.Context) (protocol.Message, error) {
	x := &e.s.execs
	for {
		x.mu.Lock()
		if len(e.q) > 0 {
			m := e.q[0]
			e.q = e.q[1:]
			if m.ExecOutput != nil {
				e.queued -= len(m.ExecOutput.Data)
			}
			x.mu.Unlock()
			return m, nil
		}
		err := e.err
		x.mu.Unlock()
		if err != nil {
			return protocol.Message{}, err
		}
		select {
		case <-e.wake:
		case <-ctx.Done():
			return protocol.Message{}, ctx.Err()
		}
	}
}

// Consumed opens the agent's output window by n bytes the client took.
func (e *ExecStream) Consumed(n int) {
	if n > 0 {
		e.s.send(protocol.Message{Type: protocol.TypeExecAck, ExecAck: &protocol.ExecAck{ID: e.id, Bytes: n}})
	}
}

// Input sends data to the command's standard input, waiting for the
// agent's input window.
func (e *ExecStream) Input(ctx context.Context, data []byte) error {
	x := &e.s.execs
	for len(data) > 0 {
		x.mu.Lock()
		n := min(len(data), protocol.ExecChunk, e.credit)
		e.credit -= n
		err := e.err
		x.mu.Unlock()
		if err != nil {
			return err
		}
		if n == 0 {
			select {
			case <-e.inWake:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		chunk := append([]byte(nil), data[:n]...)
		if err := e.s.send(protocol.Message{Type: protocol.TypeExecInput, ExecInput: &protocol.ExecInput{ID: e.id, Data: chunk}}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// CloseInput ends the command's standard input.
func (e *ExecStream) CloseInput() error {
	return e.s.send(protocol.Message{Type: protocol.TypeExecInput, ExecInput: &protocol.ExecInput{ID: e.id, EOF: true}})
}

// Resize changes the command's terminal size.
func (e *ExecStream) Resize(rows, cols uint16) error {
	return e.s.send(protocol.Message{Type: protocol.TypeExecResize, ExecResize: &protocol.ExecResize{ID: e.id, Rows: rows, Cols: cols}})
}

// Close ends the stream; an exec that has not exited is cancelled (the
// agent closes the command's connection).
func (e *ExecStream) Close() {
	x := &e.s.execs
	x.mu.Lock()
	_, live := x.streams[e.id]
	delete(x.streams, e.id)
	exited := e.exited
	if e.err == nil {
		e.err = errors.New("exec stream closed")
	}
	x.mu.Unlock()
	if live && !exited {
		e.s.send(protocol.Message{Type: protocol.TypeExecCancel, ExecCancel: &protocol.ExecCancel{ID: e.id}})
	}
}

// routeExec hands an agent's exec message to its stream; one for a
// stream that has ended is dropped.
func (s *session) routeExec(id uint64, m protocol.Message) {
	s.execs.mu.Lock()
	defer s.execs.mu.Unlock()
	e := s.execs.streams[id]
	if e == nil {
		return
	}
	switch {
	case m.ExecAck != nil:
		if m.ExecAck.Bytes > 0 {
			e.credit = min(e.credit+m.ExecAck.Bytes, protocol.ExecWindow)
			notify(e.inWake)
		}
		return
	case m.ExecOutput != nil:
		// Output past the window: the exec fails, the session goes on.
		e.queued += len(m.ExecOutput.Data)
		if e.queued > protocol.ExecWindow {
			delete(s.execs.streams, id)
			e.err = errExecOverflow
			e.q = nil
			notify(e.wake)
			notify(e.inWake)
			go s.send(protocol.Message{Type: protocol.TypeExecCancel, ExecCancel: &protocol.ExecCancel{ID: id}})
			return
		}
	case m.ExecExit != nil:
		e.exited = true
		delete(s.execs.streams, id)
		e.err = errors.New("the exec has exited")
		notify(e.inWake)
	}
	e.q = append(e.q, m)
	notify(e.wake)
}

// endExecs fails the exec streams of an ended session.
func (s *session) endExecs() {
	s.execs.mu.Lock()
	defer s.execs.mu.Unlock()
	s.execs.done = true
	for id, e := range s.execs.streams {
		e.err = fmt.Errorf("%w: its session ended during the exec", protocol.ErrAgentNotConnected)
		notify(e.wake)
		notify(e.inWake)
		delete(s.execs.streams, id)
	}
}
