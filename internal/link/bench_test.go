package link

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/protocol"
)

// The peer for these benchmarks answers nothing and reads everything.
func drain(ctx context.Context, c *websocket.Conn) {
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return
		}
	}
}

var msg = []byte(`{"type":"stateChange","stateChange":{"id":7,"tasks":[{"arn":"arn:aws:ecs:us-east-1:123456789012:task/c/0123456789abcdef","lastStatus":"RUNNING"}]}}`)

// BenchmarkWrite/link is a session's write now; /context-per-write is how
// both ends wrote before: a timeout context per write, which the websocket
// library watches with a callback of its own.
func BenchmarkWrite(b *testing.B) {
	b.Run("link", func(b *testing.B) {
		l, _ := pair(b, time.Hour, time.Hour, time.Minute, drain)
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Write(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("context-per-write", func(b *testing.B) {
		l, _ := pair(b, time.Hour, time.Hour, time.Minute, drain)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			wctx, cancel := context.WithTimeout(ctx, WriteLimit)
			err := l.conn.Write(wctx, websocket.MessageText, msg)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// flood writes msg until ctx ends.
func flood(ctx context.Context, c *websocket.Conn) {
	for c.Write(ctx, websocket.MessageText, msg) == nil {
	}
}

// BenchmarkRead/link is a session's read now; /context-per-read is the
// agent's before: a timeout context per read.
func BenchmarkRead(b *testing.B) {
	b.Run("link", func(b *testing.B) {
		l, _ := pair(b, time.Hour, time.Hour, time.Minute, flood)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Read(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("context-per-read", func(b *testing.B) {
		l, _ := pair(b, time.Hour, time.Hour, time.Minute, flood)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			rctx, cancel := context.WithTimeout(ctx, time.Hour)
			_, _, err := l.conn.Read(rctx)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHeartbeat/link is a heartbeat now; /marshal is how both ends
// sent one before: the message encoded by json.Marshal.
func BenchmarkHeartbeat(b *testing.B) {
	b.Run("link", func(b *testing.B) {
		l, _ := pair(b, time.Hour, time.Hour, time.Minute, drain)
		b.ReportAllocs()
		for b.Loop() {
			if err := l.SendHeartbeat(time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		l, _ := pair(b, time.Hour, time.Hour, time.Minute, drain)
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Send(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{Time: time.Now()}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
