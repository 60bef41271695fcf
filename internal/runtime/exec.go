package runtime

import (
	"context"
	"io"
)

// ExecOptions starts an interactive command in a running container.
type ExecOptions struct {
	Cmd []string
	TTY bool
	// Rows and Cols are the terminal's first size (TTY only; 0 for the
	// engine's default).
	Rows, Cols uint
}

// ExecProcess is a command started by SessionExecer.
type ExecProcess interface {
	// Stdin is the command's standard input; closing it ends the input.
	Stdin() io.WriteCloser
	// Output calls fn with the command's output as it comes, stream
	// "stdout" or "stderr" (a TTY's is all stdout), until the output
	// ends; it returns fn's error or the read's.
	Output(fn func(stream string, data []byte) error) error
	// Resize changes the terminal's size.
	Resize(ctx context.Context, rows, cols uint) error
	// Wait returns the exit code once the output has ended.
	Wait(ctx context.Context) (int, error)
	// Close ends the connection to the command, which the engine then
	// ends with it when it reads its input.
	Close()
}

// SessionExecer is implemented by runtimes that run interactive commands
// in containers (the docker runtime), for exec sessions.
type SessionExecer interface {
	ExecSession(ctx context.Context, id string, opts ExecOptions) (ExecProcess, error)
}
