package runtime

import (
	"context"
	"time"
)

// LogOptions selects a container's output.
type LogOptions struct {
	Since  time.Time // zero for all
	Tail   int       // the last Tail lines when positive
	Follow bool      // keep reading as the container writes
}

// LogLine is one line of output, without its newline.
type LogLine struct {
	Time   time.Time
	Stream string // stdout or stderr
	Text   string
}

// LogReader is implemented by runtimes that read output line by line with
// the time each line was written (the docker runtime).
type LogReader interface {
	// LogLines calls fn for each line, oldest first, until the output ends
	// (or, following, until ctx ends) or fn fails; it returns fn's error,
	// nil at the end, or ErrNotFound.
	LogLines(ctx context.Context, id string, opts LogOptions, fn func(LogLine) error) error
}
