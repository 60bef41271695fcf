package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
)

// A session's connection spends nearly all its life waiting for the
// agent's next message. net/http hands a hijacked connection a 4 KiB read
// buffer that the websocket library keeps for the connection's life: at
// 5,000 sessions ~25 MiB of live heap holding nothing. parkedConn waits
// for readability with no buffer and takes one from readChunks only when
// bytes are there, giving it back once they are read; the websocket
// library's own reader is then the 16 bytes bufio allows at least, fed
// from that chunk. The system calls are those of a plain read: one that
// finds nothing, the wait, one that reads.

// readChunkSize is net/http's read buffer, so a read takes in as much as
// before.
const readChunkSize = 4 << 10

var readChunks = sync.Pool{New: func() any { b := make([]byte, readChunkSize); return &b }}

// parkedConn is a TCP connection whose reads hold a buffer only while
// they have bytes to give. Reads come from one goroutine at a time.
type parkedConn struct {
	net.Conn
	raw   syscall.RawConn
	chunk *[]byte // from readChunks while data is in it
	data  []byte  // unread bytes, in chunk or carried over from net/http
	lib   *bufio.Reader
	out   *batchWriter
}

// await returns once the next read of the websocket library will not wait:
// bytes are buffered here or in the library's reader, the socket has some,
// or it failed (the read that follows reports how). A session waits for its
// agent's next message here rather than deep in the library's frame reader,
// so that its parked goroutine's stack is small enough for the collector to
// shrink (Gateway.receive).
func (c *parkedConn) await() {
	if len(c.data) > 0 || c.lib.Buffered() > 0 {
		return
	}
	c.fill()
}

func (c *parkedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.data) == 0 {
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	if len(c.data) == 0 && c.chunk != nil {
		readChunks.Put(c.chunk)
		c.chunk = nil
	}
	return n, nil
}

// fill reads what the socket has into a chunk, waiting through the
// network poller (and the connection's deadline) while it has nothing.
func (c *parkedConn) fill() error {
	var n int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		b := readChunks.Get().(*[]byte)
		for {
			n, rerr = syscall.Read(int(fd), *b)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			readChunks.Put(b)
			return false // nothing yet: wait without a buffer
		}
		if rerr != nil || n <= 0 {
			readChunks.Put(b)
			return true
		}
		c.chunk, c.data = b, (*b)[:n]
		return true
	})
	if err == nil {
		err = rerr
	}
	switch {
	case err != nil:
		return &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	case n == 0:
		return io.EOF
	}
	return nil
}

// parkingWriter gives the websocket library a hijacked connection whose
// reads park without a buffer (plain TCP only: a TLS connection reads
// through its own buffers, and is handed on as net/http gives it); conn is
// that connection once hijacked.
type parkingWriter struct {
	http.ResponseWriter
	conn *parkedConn
}

func (w *parkingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *parkingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return conn, brw, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return conn, brw, nil
	}
	pc := &parkedConn{Conn: conn, raw: raw}
	// Bytes net/http read past the upgrade request are the agent's
	// first frames: they are read before the socket.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		pc.data = bytes.Clone(b)
	}
	pc.lib = bufio.NewReaderSize(pc, 16)
	pc.out = &batchWriter{conn: conn}
	w.conn = pc
	return pc, bufio.NewReadWriter(pc.lib, bufio.NewWriterSize(pc.out, 16)), nil
}

// writeChunks hold a message's frames while a session writes it.
var writeChunks = sync.Pool{New: func() any { b := make([]byte, 0, readChunkSize); return &b }}

// maxPooledChunk: the chunk of a rare large message is not kept.
const maxPooledChunk = 64 << 10

// batchWriter is what the websocket library writes through on a parked
// connection, behind a bufio.Writer of 16 bytes instead of net/http's
// 4 KiB, which the library kept for the connection's life (~20 MiB at
// 5,000 sessions). Between Begin and Flush, while the session writes a
// message (link.Batcher), it gathers the frames in a pooled chunk, and
// Flush sends them in one write as the 4 KiB buffer did; otherwise (the
// library's own close or pong frames) it writes through. Writes, through
// or flushed, hold mu, so the bytes of a frame that straddles Begin or
// Flush still reach the socket in order.
type batchWriter struct {
	conn     net.Conn
	mu       sync.Mutex
	batching bool
	chunk    *[]byte
}

func (w *batchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.batching {
		return w.conn.Write(p)
	}
	if w.chunk == nil {
		w.chunk = writeChunks.Get().(*[]byte)
	}
	*w.chunk = append(*w.chunk, p...)
	return len(p), nil
}

// Begin gathers what is written from now on.
func (w *batchWriter) Begin() {
	w.mu.Lock()
	w.batching = true
	w.mu.Unlock()
}

// Flush writes what was gathered, and writes through again.
func (w *batchWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batching = false
	c := w.chunk
	if c == nil {
		return nil
	}
	w.chunk = nil
	_, err := w.conn.Write(*c)
	putWriteChunk(c)
	return err
}

// Discard drops what was gathered (a message the library failed to
// write), and writes through again.
func (w *batchWriter) Discard() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.batching = false
	if w.chunk != nil {
		putWriteChunk(w.chunk)
		w.chunk = nil
	}
}

func putWriteChunk(c *[]byte) {
	if cap(*c) <= maxPooledChunk {
		*c = (*c)[:0]
		writeChunks.Put(c)
	}
}
