// Package link is one end of an agent session's websocket with its timing:
// a silence watchdog on reads, a stall watchdog on writes, and heartbeats
// only when the end has sent nothing for protocol.HeartbeatInterval.
//
// The watchdogs are two timers per connection, pushed back per message,
// rather than a context and timer per read and per write: a server holds
// thousands of sessions, and the websocket library arms a callback on every
// call given a context that can end. Any message is proof of life, so a busy
// end sends no heartbeats; the longest gap between messages is the same.
package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/protocol"
)

// WriteLimit is how long one write may block before the connection is
// given up.
const WriteLimit = 10 * time.Second

// Link wraps conn. Reads come from one goroutine at a time, and so do writes.
type Link struct {
	conn      *websocket.Conn
	silence   time.Duration
	interval  time.Duration
	writeMax  time.Duration
	readDog   *time.Timer
	writeDog  *time.Timer
	heartbeat *time.Timer
	silent    atomic.Bool
	stalled   atomic.Bool
	stop      func() bool
	peer      string
	beat      []byte // the last heartbeat's encoding, reused
	batch     Batcher
}

// ErrSilent is returned by Read after silence ends the connection.
var ErrSilent = errors.New("peer silent")

// New starts the read watchdog; ctx ending closes the connection. peer
// names the other end in errors ("agent", "server").
func New(ctx context.Context, conn *websocket.Conn, peer string) *Link {
	return newLink(ctx, conn, peer, protocol.SilenceLimit, protocol.HeartbeatInterval, WriteLimit, Options{})
}

// Options change how a link made by NewWith writes.
type Options struct {
	// Beat, if set, is called (in a goroutine of its own) when this end
	// has written nothing for the heartbeat interval, instead of
	// Heartbeat's channel firing (it is then nil): for an end with no
	// goroutine waiting on it.
	Beat func()
	// Batch, if set, gathers each message's frames into one write.
	Batch Batcher
}

// A Batcher holds what the websocket library writes for one message
// between Begin and Flush (or Discard, when the library's write failed),
// and writes it to the connection in Flush, which runs under the write
// watchdog.
type Batcher interface {
	Begin()
	Flush() error
	Discard()
}

// NewWith is New with opts.
func NewWith(ctx context.Context, conn *websocket.Conn, peer string, opts Options) *Link {
	return newLink(ctx, conn, peer, protocol.SilenceLimit, protocol.HeartbeatInterval, WriteLimit, opts)
}

func newLink(ctx context.Context, conn *websocket.Conn, peer string, silence, heartbeat, writeMax time.Duration, opts Options) *Link {
	l := &Link{conn: conn, silence: silence, interval: heartbeat, writeMax: writeMax, peer: peer, batch: opts.Batch}
	l.readDog = time.AfterFunc(silence, func() { l.silent.Store(true); conn.CloseNow() })
	l.writeDog = time.AfterFunc(time.Hour, func() { l.stalled.Store(true); conn.CloseNow() })
	l.writeDog.Stop()
	if opts.Beat != nil {
		l.heartbeat = time.AfterFunc(heartbeat, opts.Beat)
	} else {
		l.heartbeat = time.NewTimer(heartbeat)
	}
	l.stop = context.AfterFunc(ctx, func() { conn.CloseNow() })
	return l
}

// Close stops the timers; it leaves the connection to its owner.
func (l *Link) Close() {
	l.readDog.Stop()
	l.writeDog.Stop()
	l.heartbeat.Stop()
	l.stop()
}

// Heartbeat fires when this end has written nothing for the heartbeat
// interval; the caller sends one then (a write pushes it back). Nil for a
// link given Options.Beat.
func (l *Link) Heartbeat() <-chan time.Time { return l.heartbeat.C }

// Reader returns the next message's reader; every message arrived pushes
// the silence watchdog back.
func (l *Link) Reader() (io.Reader, error) {
	_, r, err := l.conn.Reader(context.Background())
	if err != nil {
		return nil, l.cause(err)
	}
	if !l.readDog.Stop() {
		// It fired as the message came: the connection is closed already.
		return nil, l.cause(errors.New("connection closed"))
	}
	l.readDog.Reset(l.silence)
	return r, nil
}

// Read reads the next message whole.
func (l *Link) Read() ([]byte, error) {
	r, err := l.Reader()
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, l.cause(err)
	}
	return b, nil
}

// Write sends one text message and pushes the heartbeat back.
func (l *Link) Write(b []byte) error {
	l.writeDog.Reset(l.writeMax)
	if l.batch != nil {
		l.batch.Begin()
	}
	err := l.conn.Write(context.Background(), websocket.MessageText, b)
	if l.batch != nil {
		if err != nil {
			l.batch.Discard()
		} else {
			err = l.batch.Flush()
		}
	}
	l.writeDog.Stop()
	if err != nil {
		return l.cause(err)
	}
	l.heartbeat.Reset(l.interval)
	return nil
}

// Send writes one protocol message.
func (l *Link) Send(m protocol.Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return l.Write(b)
}

// SendHeartbeat writes a heartbeat stamped now, encoded as json.Marshal
// would encode it but into the link's own buffer: an idle fleet's
// sessions send little else, and the message and encoding allocated per
// heartbeat were a fifth of a heartbeat's cost to the server.
func (l *Link) SendHeartbeat(now time.Time) error {
	b := append(l.beat[:0], `{"type":"`+protocol.TypeHeartbeat+`","heartbeat":{"time":"`...)
	b = now.AppendFormat(b, time.RFC3339Nano)
	l.beat = append(b, `"}}`...)
	return l.Write(l.beat)
}

// cause names a watchdog's closing over the error it caused.
func (l *Link) cause(err error) error {
	switch {
	case l.silent.Load():
		return fmt.Errorf("%s silent for %s: %w", l.peer, l.silence, ErrSilent)
	case l.stalled.Load():
		return fmt.Errorf("write to %s blocked for %s: %w", l.peer, l.writeMax, err)
	}
	return err
}
