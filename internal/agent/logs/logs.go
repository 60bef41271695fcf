// Package logs answers the server's log requests on the agent: it finds
// a task's container by the engine's labels and reads the runtime's output
// in a bounded window (protocol.LogRequest).
package logs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
)

// Error codes of a request's end.
const (
	CodeNotFound    = "ContainerNotFound"
	CodeUnsupported = "LogsUnsupported"
	CodeFailed      = "LogsFailed"
)

// quiet ends a follow request this long after its last line: the client
// has something to show and asks again.
const quiet = 200 * time.Millisecond

// Reader serves log requests from one runtime.
type Reader struct {
	RT runtime.Runtime
}

var errFull = errors.New("window full")

// Serve reads what req asks for, sending lines through send in chunks of
// at most protocol.LogChunkBytes and at most req.MaxBytes in all, and
// returns the request's end.
func (r Reader) Serve(ctx context.Context, req protocol.LogRequest, send func(protocol.LogChunk) error) protocol.LogEnd {
	end := protocol.LogEnd{ID: req.ID}
	lr, ok := r.RT.(runtime.LogReader)
	if !ok {
		end.Code, end.Message = CodeUnsupported, "this instance's container runtime does not serve logs"
		return end
	}
	id, err := r.container(ctx, req.TaskArn, req.Container)
	if err != nil {
		end.Code, end.Message = CodeNotFound, err.Error()
		return end
	}
	limit := req.MaxBytes
	if limit <= 0 || limit > protocol.LogMaxBytes {
		limit = protocol.LogMaxBytes
	}
	w := &window{id: req.ID, limit: limit, send: send}
	opts := runtime.LogOptions{Since: req.Since, Tail: req.Tail}
	if req.Wait <= 0 {
		err = lr.LogLines(ctx, id, opts, w.add)
	} else {
		err = r.follow(ctx, lr, id, opts, min(req.Wait, protocol.LogMaxWait), w)
	}
	if err == nil || errors.Is(err, errFull) {
		err = w.flush()
	}
	switch {
	case err != nil && ctx.Err() == nil:
		end.Code, end.Message = CodeFailed, err.Error()
	case w.full:
		end.Truncated = true
	}
	return end
}

// follow reads as the container writes until the window fills, wait
// passes with no line, or lines stop coming for the quiet period.
func (r Reader) follow(ctx context.Context, lr runtime.LogReader, id string, opts runtime.LogOptions, wait time.Duration, w *window) error {
	opts.Follow = true
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := make(chan runtime.LogLine, 64)
	done := make(chan error, 1)
	go func() {
		done <- lr.LogLines(fctx, id, opts, func(l runtime.LogLine) error {
			select {
			case lines <- l:
				return nil
			case <-fctx.Done():
				return fctx.Err()
			}
		})
		close(lines)
	}()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				err := <-done
				if errors.Is(err, context.Canceled) {
					err = nil
				}
				return err
			}
			if err := w.add(l); err != nil {
				return err
			}
			deadline.Reset(quiet)
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// container finds the runtime's container of a task's container; a task
// whose container was replaced reads the newest.
func (r Reader) container(ctx context.Context, taskArn, name string) (string, error) {
	cs, err := r.RT.List(ctx, map[string]string{engine.LabelTaskArn: taskArn, engine.LabelContainerName: name})
	if err != nil {
		return "", fmt.Errorf("list containers: %w", err)
	}
	var best runtime.Container
	for _, c := range cs {
		if best.ID == "" || c.CreatedAt.After(best.CreatedAt) {
			best = c
		}
	}
	if best.ID == "" {
		return "", fmt.Errorf("task has no container %q on this instance (not created yet, or removed after the task cleanup wait, ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION)", name)
	}
	return best.ID, nil
}

// window gathers lines into chunks and counts the bytes sent.
type window struct {
	id    uint64
	limit int
	sent  int
	size  int
	lines []protocol.LogLine
	full  bool
	send  func(protocol.LogChunk) error
}

func (w *window) add(l runtime.LogLine) error {
	n := len(l.Text) + 48 // the line's JSON beyond its text
	if w.sent+w.size+n > w.limit {
		w.full = true
		return errFull
	}
	if w.size+n > protocol.LogChunkBytes {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.lines = append(w.lines, protocol.LogLine{Time: l.Time, Stream: l.Stream, Text: l.Text})
	w.size += n
	return nil
}

func (w *window) flush() error {
	if len(w.lines) == 0 {
		return nil
	}
	err := w.send(protocol.LogChunk{ID: w.id, Lines: w.lines})
	w.sent += w.size
	w.lines, w.size = nil, 0
	return err
}
