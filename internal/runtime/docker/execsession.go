package docker

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

var _ runtime.SessionExecer = (*Runtime)(nil)

// ExecSession starts an interactive command in a running container,
// attached to its standard streams.
func (r *Runtime) ExecSession(ctx context.Context, id string, opts runtime.ExecOptions) (runtime.ExecProcess, error) {
	size := client.ConsoleSize{}
	if opts.TTY && opts.Rows > 0 && opts.Cols > 0 {
		size = client.ConsoleSize{Height: opts.Rows, Width: opts.Cols}
	}
	ex, err := r.c.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: opts.Cmd, TTY: opts.TTY, ConsoleSize: size,
		AttachStdin: true, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return nil, wrap(err, "exec in container %s", id)
	}
	att, err := r.c.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{TTY: opts.TTY, ConsoleSize: size})
	if err != nil {
		return nil, wrap(err, "exec in container %s", id)
	}
	p := &execProcess{r: r, id: ex.ID, container: id, tty: opts.TTY, att: att.HijackedResponse}
	if size.Height > 0 {
		// As docker exec does: the size given at the start is not always
		// the terminal's by the time the command reads it.
		p.Resize(ctx, size.Height, size.Width)
	}
	return p, nil
}

type execProcess struct {
	r         *Runtime
	id        string
	container string
	tty       bool
	att       client.HijackedResponse
}

func (p *execProcess) Stdin() io.WriteCloser { return stdin{p} }

type stdin struct{ p *execProcess }

func (s stdin) Write(b []byte) (int, error) { return s.p.att.Conn.Write(b) }
func (s stdin) Close() error                { return s.p.att.CloseWrite() }

// streamWriter hands one demultiplexed stream to fn.
type streamWriter struct {
	stream string
	fn     func(string, []byte) error
}

func (w streamWriter) Write(b []byte) (int, error) {
	if err := w.fn(w.stream, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (p *execProcess) Output(fn func(stream string, data []byte) error) error {
	if !p.tty {
		_, err := stdcopy.StdCopy(streamWriter{"stdout", fn}, streamWriter{"stderr", fn}, p.att.Reader)
		return err
	}
	_, err := io.Copy(streamWriter{"stdout", fn}, p.att.Reader)
	return err
}

func (p *execProcess) Resize(ctx context.Context, rows, cols uint) error {
	_, err := p.r.c.ExecResize(ctx, p.id, client.ExecResizeOptions{Height: rows, Width: cols})
	return wrap(err, "resize exec in container %s", p.container)
}

func (p *execProcess) Wait(ctx context.Context) (int, error) {
	// The stream can end a moment before the engine records the exit.
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		in, err := p.r.c.ExecInspect(ctx, p.id, client.ExecInspectOptions{})
		if err != nil {
			return 0, wrap(err, "exec in container %s", p.container)
		}
		if !in.Running {
			return in.ExitCode, nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return 0, fmt.Errorf("exec in container %s: %w", p.container, ctx.Err())
		}
	}
}

func (p *execProcess) Close() { p.att.Close() }
