package gateway

import (
	"context"
	"errors"
	"sync"

	"github.com/capstanhq/capstan/internal/link"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// A session writes from whichever goroutine has something to send: the
// receiver answers the agent's messages itself, the link's timer sends
// heartbeats, and a writer goroutine lives only while a manifest is owed or
// the instance's record changed. An idle session thus has one goroutine,
// its receiver, where it had a second waiting on six channels (a 4 KiB
// stack and a queue of 16 messages each: ~25 MiB at 5,000 sessions).

// outbox is a session's sending side.
type outbox struct {
	wmu sync.Mutex // one write at a time on the link

	mu      sync.Mutex // guards what follows; never held while writing
	owed    bool       // the desired tasks changed since the last manifest
	check   bool       // the instance's record changed
	running bool       // a writer goroutine is at work
	closed  bool       // the session is ending: nothing more is written
	writers sync.WaitGroup

	ctx     context.Context     // the session's
	desired *store.Subscription // the instance's desired tasks
	record  *store.Subscription // the instance's record
}

// errSessionEnding refuses a write once the session is ending.
var errSessionEnding = errors.New("session ending")

// write sends through the link unless the session is ending; a failed
// write ends the session.
func (s *session) write(send func(*link.Link) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errSessionEnding
	}
	err := send(s.link)
	if err != nil {
		s.end(err)
	}
	return err
}

// send writes one protocol message.
func (s *session) send(m protocol.Message) error {
	return s.write(func(l *link.Link) error { return l.Send(m) })
}

// heartbeat is the link's call when the session has sent nothing for the
// heartbeat interval.
func (g *Gateway) heartbeat(s *session) {
	s.write(func(l *link.Link) error { return l.SendHeartbeat(g.now()) })
}

// startWriting follows the instance's desired tasks and record, and owes
// the agent its first manifest.
func (g *Gateway) startWriting(ctx context.Context, s *session) {
	// The first writer is started here, once both subscriptions exist:
	// marked running, the session's wakes until then only note work.
	s.ctx, s.owed, s.running = ctx, true, true
	s.desired = g.st.SubscribeFunc(store.DesiredPrefix(s.cluster, s.instance), func() { g.wake(s, true, false) })
	s.record = g.st.SubscribeFunc(store.ContainerInstanceKey(s.cluster, s.instance), func() { g.wake(s, false, true) })
	s.writers.Add(1)
	go g.writeOwed(s)
}

// stopWriting waits, once the session has ended, for what it was writing.
func (g *Gateway) stopWriting(s *session) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.writers.Wait()
	// A heartbeat in flight ends (the session's end closed the connection).
	s.wmu.Lock()
	s.wmu.Unlock()
	s.desired.Close()
	s.record.Close()
}

// wake notes what the writer has to do and starts it unless it is at work.
// The store calls it under its cache's lock: it only notes and starts.
func (g *Gateway) wake(s *session, manifest, check bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owed = s.owed || manifest
	s.check = s.check || check
	if s.running || s.closed {
		return
	}
	s.running = true
	s.writers.Add(1)
	go g.writeOwed(s)
}

// writeOwed is the writer: it sends manifests and checks the instance's
// record until nothing more is owed, then ends.
func (g *Gateway) writeOwed(s *session) {
	defer s.writers.Done()
	for {
		s.mu.Lock()
		manifest, check := s.owed, s.check
		s.check = false
		if s.closed || (!manifest && !check) {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		var err error
		if check {
			err = g.checkInstance(s)
		}
		if err == nil && manifest {
			err = g.sendManifest(s)
		}
		if err != nil {
			s.end(err)
			s.mu.Lock()
			s.running = false
			s.mu.Unlock()
			return
		}
	}
}

// sendManifest waits for a place in the admission, then builds the
// instance's manifest and sends it. Changes from the moment it is granted
// on owe another: changes while it waits make one manifest.
func (g *Gateway) sendManifest(s *session) error {
	t := g.work.ask()
	defer t.done()
	select {
	case <-t.ready():
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
	s.mu.Lock()
	s.owed = false
	s.mu.Unlock()
	s.desired.Take() // the manifest is read after these
	b, err := g.svc.ManifestMessage(s.ctx, s.cluster, s.instance)
	t.done()
	if err != nil {
		return err
	}
	return s.write(func(l *link.Link) error { return l.Write(b) })
}

// checkInstance ends the session of an instance deregistered.
func (g *Gateway) checkInstance(s *session) error {
	s.record.Take()
	status, ok, err := g.svc.InstanceStatus(s.ctx, s.cluster, s.instance)
	if err == nil && (!ok || status == "INACTIVE") {
		s.send(protocol.Message{Type: protocol.TypeError, Error: inactive(s.managed)})
		return errDeregistered
	}
	return nil
}
