package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// recordingWriter notes whether the hijacked connection was parked.
type recordingWriter struct {
	*parkingWriter
	parked *atomic.Bool
}

func (w recordingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := w.parkingWriter.Hijack()
	_, ok := c.(*parkedConn)
	w.parked.Store(ok)
	return c, brw, err
}

// echoServer accepts websockets through parkingWriter and sends every
// message back; parked reports whether the last one's reads were parked.
func echoServer(t *testing.T, tls bool) (srv *httptest.Server, parked *atomic.Bool) {
	parked = new(atomic.Bool)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &parkingWriter{ResponseWriter: w}
		c, err := websocket.Accept(recordingWriter{pw, parked}, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for i := 0; ; i++ {
			// As a session does: wait outside the library, then read.
			if pw.conn != nil {
				pw.conn.await()
			}
			typ, b, err := c.Read(context.Background())
			if err != nil {
				return
			}
			// Every other message is gathered and flushed as a session's
			// are; the others are written through, as the library's own.
			batch := pw.conn != nil && i%2 == 0
			if batch {
				pw.conn.out.Begin()
			}
			err = c.Write(context.Background(), typ, b)
			if batch {
				if err == nil {
					err = pw.conn.out.Flush()
				} else {
					pw.conn.out.Discard()
				}
			}
			if err != nil {
				return
			}
		}
	})
	if tls {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv, parked
}

func TestParkedSessionsCarryMessagesOfEverySize(t *testing.T) {
	for _, tls := range []bool{false, true} {
		name := "tcp"
		if tls {
			name = "tls (not parked)"
		}
		t.Run(name, func(t *testing.T) {
			srv, parked := echoServer(t, tls)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, strings.Replace(srv.URL, "http", "ws", 1), &websocket.DialOptions{HTTPClient: srv.Client()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			c.SetReadLimit(1 << 20)
			// Around the 16-byte reader, the 4 KiB chunk, and larger than
			// both; all sent before any is read back, so chunks hold
			// several messages and messages span chunks.
			var msgs [][]byte
			for _, n := range []int{1, 15, 16, 17, 125, 126, 1000, 4095, 4096, 4097, 9000, 65535, 65536, 300000} {
				b := make([]byte, n)
				rand.Read(b)
				msgs = append(msgs, b)
			}
			go func() {
				for _, m := range msgs {
					if err := c.Write(ctx, websocket.MessageBinary, m); err != nil {
						return
					}
				}
			}()
			for i, want := range msgs {
				_, got, err := c.Read(ctx)
				if err != nil {
					t.Fatalf("message %d (%d bytes): %v", i, len(want), err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("message %d: got %d bytes, want %d, not the same", i, len(got), len(want))
				}
			}
			if parked.Load() == tls {
				t.Fatalf("parked %v over tls %v: only plain TCP connections park", parked.Load(), tls)
			}
		})
	}
}

// tcpPair is a connected loopback pair: the server's end parked.
func tcpPair(t *testing.T) (*parkedConn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	raw, err := sc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	pc := &parkedConn{Conn: sc, raw: raw}
	pc.lib = bufio.NewReaderSize(pc, 16)
	return pc, client
}

func TestParkedConnGivesItsChunkBackOnceRead(t *testing.T) {
	pc, client := tcpPair(t)
	if _, err := client.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4)
	if n, err := io.ReadFull(pc, p); err != nil || string(p[:n]) != "0123" {
		t.Fatalf("read %q, %v", p[:n], err)
	}
	if pc.chunk == nil {
		t.Fatal("bytes left unread but no chunk holds them")
	}
	rest := make([]byte, 6)
	if _, err := io.ReadFull(pc, rest); err != nil || string(rest) != "456789" {
		t.Fatalf("read %q, %v", rest, err)
	}
	if pc.chunk != nil || len(pc.data) != 0 {
		t.Fatal("a drained connection still holds its chunk")
	}

	// A read with nothing to read waits, and is given what comes.
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 16)
		n, err := pc.Read(b)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		t.Fatalf("read returned %q with nothing sent", s)
	case <-time.After(100 * time.Millisecond):
	}
	client.Write([]byte("late"))
	if s := <-got; s != "late" {
		t.Fatalf("waiting read got %q", s)
	}
	if pc.chunk != nil {
		t.Fatal("chunk kept after its bytes were read")
	}
}

// await must see bytes wherever they wait: in the socket, in the chunk,
// or already in the library's reader (where the socket has nothing more:
// waiting on it then would stall a session until its agent's next message).
func TestAwaitReturnsWhenAReadWouldNotWait(t *testing.T) {
	pc, client := tcpPair(t)
	returns := func(why string) {
		t.Helper()
		done := make(chan struct{})
		go func() { pc.await(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("await still waiting with %s", why)
		}
	}

	// Nothing sent: await waits, and returns with what comes.
	done := make(chan struct{})
	go func() { pc.await(); close(done) }()
	select {
	case <-done:
		t.Fatal("await returned with nothing sent")
	case <-time.After(100 * time.Millisecond):
	}
	client.Write([]byte("0123456789abcdefXYZ"))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("await still waiting after bytes came")
	}
	if len(pc.data) == 0 || pc.chunk == nil {
		t.Fatal("await returned without taking in the bytes that came")
	}

	// The library's reader takes 16, the chunk keeps 3.
	b := make([]byte, 1)
	if _, err := pc.lib.Read(b); err != nil || b[0] != '0' {
		t.Fatalf("read %q, %v", b, err)
	}
	if len(pc.data) != 3 || pc.lib.Buffered() != 15 {
		t.Fatalf("chunk holds %d, library %d; want 3 and 15", len(pc.data), pc.lib.Buffered())
	}
	returns("bytes in the chunk")
	rest := make([]byte, 15)
	if _, err := io.ReadFull(pc.lib, rest); err != nil || string(rest) != "123456789abcdef" {
		t.Fatalf("read %q, %v", rest, err)
	}

	// Bytes only in the library's reader: the socket and chunk are empty.
	if _, err := io.ReadFull(pc.lib, b); err != nil || b[0] != 'X' {
		t.Fatalf("read %q, %v", b, err)
	}
	if len(pc.data) != 0 || pc.lib.Buffered() != 2 {
		t.Fatalf("chunk holds %d, library %d; want 0 and 2", len(pc.data), pc.lib.Buffered())
	}
	returns("bytes in the library's reader")
	if _, err := io.ReadFull(pc.lib, rest[:2]); err != nil || string(rest[:2]) != "YZ" {
		t.Fatalf("read %q, %v", rest[:2], err)
	}

	// The peer's close ends the wait; the read after it says EOF.
	client.Close()
	returns("the peer gone")
	if _, err := pc.lib.Read(b); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
}

// countingConn counts the writes that reach the connection.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A gathered message reaches the socket in one write whatever the
// library's 16-byte writer does with it, and a frame that straddles Begin
// or Flush keeps its bytes in order.
func TestBatchWriterSendsAMessageInOneWrite(t *testing.T) {
	pc, client := tcpPair(t)
	cc := &countingConn{Conn: pc.Conn}
	w := &batchWriter{conn: cc}
	bw := bufio.NewWriterSize(w, 16)
	payload := bytes.Repeat([]byte("0123456789"), 300)

	w.Begin()
	bw.Write([]byte{0x81, 126, 0x0b, 0xb8}) // a frame header, as the library writes it
	bw.Write(payload)
	bw.Flush()
	if n := cc.writes.Load(); n != 0 {
		t.Fatalf("%d writes reached the socket before Flush", n)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := cc.writes.Load(); n != 1 {
		t.Fatalf("a gathered message took %d writes, want 1", n)
	}
	if w.chunk != nil {
		t.Fatal("the chunk was kept after Flush")
	}

	// Written through: a frame begun outside a batch and ended inside one,
	// then one begun inside and ended after the flush.
	bw.Write([]byte("AAAAAAAAAA"))
	bw.Write([]byte("AAAAAAAAAAAAAAAAAAAA")) // 16 through, 14 buffered
	w.Begin()
	bw.Flush() // the 14 into the chunk
	bw.Write([]byte("BBBBBBBBBBBBBBBBBBBB"))
	bw.Write([]byte("CCCCCCCCCC")) // buffered past the flush
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	bw.Flush()

	// A discarded batch sends nothing.
	w.Begin()
	bw.Write([]byte("dropped, never sent"))
	bw.Flush()
	w.Discard()
	bw.Write([]byte("end"))
	bw.Flush()

	want := append(append([]byte{0x81, 126, 0x0b, 0xb8}, payload...), "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAABBBBBBBBBBBBBBBBBBBBCCCCCCCCCCend"...)
	got := make([]byte, len(want))
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the socket got %q,\nwant %q", got[len(got)-60:], want[len(want)-60:])
	}
}

func TestParkedConnEndsAsAConnectionDoes(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		pc, _ := tcpPair(t)
		pc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := pc.Read(make([]byte, 8))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read past the deadline: %v, want a timeout", err)
		}
	})
	t.Run("peer closes", func(t *testing.T) {
		pc, client := tcpPair(t)
		client.Write([]byte("last"))
		client.Close()
		b, err := io.ReadAll(pc)
		if err != nil || string(b) != "last" {
			t.Fatalf("read %q, %v; want the last bytes, then EOF", b, err)
		}
	})
	t.Run("closed here", func(t *testing.T) {
		pc, _ := tcpPair(t)
		errc := make(chan error, 1)
		go func() { _, err := pc.Read(make([]byte, 8)); errc <- err }()
		time.Sleep(50 * time.Millisecond)
		pc.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("read still waiting after the connection closed")
		}
	})
}

// An agent may send its first frame in the same packet as the upgrade
// request; net/http has read it by the hijack, and it must not be lost.
func TestHijackKeepsBytesReadPastTheUpgrade(t *testing.T) {
	srv, _ := echoServer(t, false)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	key := make([]byte, 16)
	rand.Read(key)
	req := "GET / HTTP/1.1\r\nHost: " + srv.Listener.Addr().String() + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key) + "\r\nSec-WebSocket-Version: 13\r\n\r\n"
	payload := []byte(`{"type":"hello"}`)
	mask := [4]byte{1, 2, 3, 4}
	frame := []byte{0x81, 0x80 | byte(len(payload)), mask[0], mask[1], mask[2], mask[3]}
	for i, b := range payload {
		frame = append(frame, b^mask[i%4])
	}
	if _, err := conn.Write(append([]byte(req), frame...)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %s", resp.Status)
	}
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatalf("no echo of the frame sent with the upgrade: %v", err)
	}
	got := make([]byte, head[1]&0x7f)
	if _, err := io.ReadFull(br, got); err != nil || head[0] != 0x81 || !bytes.Equal(got, payload) {
		t.Fatalf("echo %x %q, %v; want a text frame %q", head, got, err, payload)
	}
}
