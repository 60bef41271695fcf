package docker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

var _ runtime.LogReader = (*Runtime)(nil)

// maxLogLine caps one line; the engine splits longer ones at 16 KiB, so
// this only guards against a malformed stream.
const maxLogLine = 1 << 20

// LogLines reads a container's output with the engine's timestamps.
func (r *Runtime) LogLines(ctx context.Context, id string, opts runtime.LogOptions, fn func(runtime.LogLine) error) error {
	in, err := r.c.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return wrap(err, "logs of container %s", id)
	}
	lo := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true, Follow: opts.Follow}
	if opts.Tail > 0 {
		lo.Tail = strconv.Itoa(opts.Tail)
	}
	if !opts.Since.IsZero() {
		lo.Since = fmt.Sprintf("%d.%09d", opts.Since.Unix(), opts.Since.Nanosecond())
	}
	body, err := r.c.ContainerLogs(ctx, id, lo)
	if err != nil {
		return wrap(err, "logs of container %s", id)
	}
	defer body.Close()
	stop := context.AfterFunc(ctx, func() { body.Close() }) // unblock a follow
	defer stop()
	tty := in.Container.Config != nil && in.Container.Config.Tty
	if tty {
		err = scanLines(body, "stdout", fn)
	} else {
		err = demuxLines(body, fn)
	}
	var fe fnErr
	if errors.As(err, &fe) {
		return fe.err
	}
	if ctx.Err() != nil {
		return nil // a follow ends with its context
	}
	return err
}

// fnErr marks fn's error, told apart from the stream's.
type fnErr struct{ err error }

func (e fnErr) Error() string { return e.err.Error() }

// demuxLines reads the engine's framed stream: each frame an 8-byte
// header (stream, 3 zero bytes, big-endian size) and that many bytes. A
// line may span frames; it is assembled per stream.
func demuxLines(body io.Reader, fn func(runtime.LogLine) error) error {
	br := bufio.NewReaderSize(body, 32<<10)
	var hdr [8]byte
	partial := map[string]*strings.Builder{"stdout": {}, "stderr": {}}
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrClosedPipe) {
				return flushPartial(partial, fn)
			}
			return readErr(err)
		}
		stream := "stdout"
		if hdr[0] == 2 {
			stream = "stderr"
		}
		size := int(binary.BigEndian.Uint32(hdr[4:]))
		if size > maxLogLine {
			return fmt.Errorf("log frame of %d bytes", size)
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(br, buf); err != nil {
			return readErr(err)
		}
		b := partial[stream]
		for len(buf) > 0 {
			i := strings.IndexByte(string(buf), '\n')
			if i < 0 {
				if b.Len() < maxLogLine {
					b.Write(buf)
				}
				break
			}
			b.Write(buf[:i])
			line := b.String()
			b.Reset()
			buf = buf[i+1:]
			if err := emit(line, stream, fn); err != nil {
				return err
			}
		}
	}
}

func readErr(err error) error {
	if errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "use of closed") {
		return nil
	}
	return fmt.Errorf("read logs: %w", err)
}

func flushPartial(partial map[string]*strings.Builder, fn func(runtime.LogLine) error) error {
	for _, s := range []string{"stdout", "stderr"} {
		if b := partial[s]; b.Len() > 0 {
			if err := emit(b.String(), s, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// scanLines reads a TTY container's raw stream.
func scanLines(body io.Reader, stream string, fn func(runtime.LogLine) error) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 32<<10), maxLogLine)
	for sc.Scan() {
		if err := emit(strings.TrimSuffix(sc.Text(), "\r"), stream, fn); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return readErr(err)
	}
	return nil
}

// emit splits the engine's timestamp off a line.
func emit(line, stream string, fn func(runtime.LogLine) error) error {
	ts, text, _ := strings.Cut(line, " ")
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		t, text = time.Time{}, line
	}
	if err := fn(runtime.LogLine{Time: t, Stream: stream, Text: text}); err != nil {
		return fnErr{err}
	}
	return nil
}
