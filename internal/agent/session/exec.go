package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
)

// ExecServer starts the commands of exec sessions.
type ExecServer interface {
	Start(ctx context.Context, st protocol.ExecStart) (runtime.ExecProcess, error)
}

// Exec end codes.
const (
	CodeExecUnsupported = "ExecUnsupported"
	CodeExecNotFound    = "ContainerNotFound"
	CodeExecFailed      = "ExecFailed"
	CodeExecBusy        = "TooManyRequests"
)

// errNoContainer is a task's container that is not running here.
var errNoContainer = errors.New("no running container")

// ContainerExec runs exec commands in the running container of a task's
// container, found by the engine's labels.
type ContainerExec struct {
	RT runtime.Runtime
}

func (e ContainerExec) Start(ctx context.Context, st protocol.ExecStart) (runtime.ExecProcess, error) {
	se, ok := e.RT.(runtime.SessionExecer)
	if !ok {
		return nil, fmt.Errorf("%w: this instance's container runtime does not run exec sessions", errors.ErrUnsupported)
	}
	cs, err := e.RT.List(ctx, map[string]string{engine.LabelTaskArn: st.TaskArn, engine.LabelContainerName: st.Container})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var best runtime.Container
	for _, c := range cs {
		if c.State == runtime.StateRunning && (best.ID == "" || c.CreatedAt.After(best.CreatedAt)) {
			best = c
		}
	}
	if best.ID == "" {
		return nil, fmt.Errorf("%w %q of task %s on this instance", errNoContainer, st.Container, st.TaskArn)
	}
	return se.ExecSession(ctx, best.ID, runtime.ExecOptions{Cmd: st.Cmd, TTY: st.TTY, Rows: uint(st.Rows), Cols: uint(st.Cols)})
}

// maxExecs bounds the exec sessions an agent runs at once.
const maxExecs = 16

// execRuns are a session's exec commands in progress.
type execRuns struct {
	mu   sync.Mutex
	runs map[uint64]*execRun
	wg   sync.WaitGroup
}

type execRun struct {
	cancel  context.CancelFunc
	inWake  chan struct{} // input queued
	outWake chan struct{} // output window opened
	// Under execRuns.mu:
	proc   runtime.ExecProcess  // once started
	size   *protocol.ExecResize // a resize that came before the start
	input  [][]byte
	queued int  // bytes in input
	eof    bool // the input ends after what is queued
	credit int  // output bytes the server will take now
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// startExec runs st in its own goroutine. Its output waits for the
// server's window and its messages queue with the session's others, so
// the reader never waits on it.
func (c *Client) startExec(ctx context.Context, es *execRuns, st protocol.ExecStart, out chan<- protocol.Message) {
	send := func(m protocol.Message) error {
		select {
		case out <- m:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	es.mu.Lock()
	if c.cfg.Exec == nil || len(es.runs) >= maxExecs || es.runs[st.ID] != nil {
		es.mu.Unlock()
		exit := protocol.ExecExit{ID: st.ID, ErrorCode: CodeExecBusy, Message: "the agent is running as many exec sessions as it allows; try again"}
		if c.cfg.Exec == nil {
			exit.ErrorCode, exit.Message = CodeExecUnsupported, "this agent does not run exec sessions"
		}
		go send(protocol.Message{Type: protocol.TypeExecExit, ExecExit: &exit})
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &execRun{cancel: cancel, inWake: make(chan struct{}, 1), outWake: make(chan struct{}, 1), credit: protocol.ExecWindow}
	es.runs[st.ID] = r
	es.wg.Add(1)
	es.mu.Unlock()
	go func() {
		defer es.wg.Done()
		exit := c.runExec(rctx, es, r, st, send)
		es.mu.Lock()
		delete(es.runs, st.ID)
		es.mu.Unlock()
		cancel()
		send(protocol.Message{Type: protocol.TypeExecExit, ExecExit: &exit})
	}()
}

func (c *Client) runExec(ctx context.Context, es *execRuns, r *execRun, st protocol.ExecStart, send func(protocol.Message) error) protocol.ExecExit {
	exit := protocol.ExecExit{ID: st.ID}
	proc, err := c.cfg.Exec.Start(ctx, st)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		exit.ErrorCode, exit.Message = CodeExecUnsupported, err.Error()
		return exit
	case errors.Is(err, errNoContainer) || errors.Is(err, runtime.ErrNotFound):
		exit.ErrorCode, exit.Message = CodeExecNotFound, err.Error()
		return exit
	case err != nil:
		exit.ErrorCode, exit.Message = CodeExecFailed, err.Error()
		return exit
	}
	defer proc.Close()
	stop := context.AfterFunc(ctx, proc.Close) // unblocks the output's read
	defer stop()
	es.mu.Lock()
	r.proc = proc
	size := r.size
	es.mu.Unlock()
	if size != nil {
		es.resize(*size)
	}
	go c.execInput(ctx, es, r, st.ID, proc, send)
	err = proc.Output(func(stream string, data []byte) error {
		for len(data) > 0 {
			n, err := es.take(ctx, r, min(len(data), protocol.ExecChunk))
			if err != nil {
				return err
			}
			chunk := append([]byte(nil), data[:n]...)
			if err := send(protocol.Message{Type: protocol.TypeExecOutput, ExecOutput: &protocol.ExecOutput{ID: st.ID, Stream: stream, Data: chunk}}); err != nil {
				return err
			}
			data = data[n:]
		}
		return nil
	})
	if ctx.Err() != nil {
		exit.ErrorCode, exit.Message = CodeExecFailed, "the exec session was ended by the server"
		return exit
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	code, werr := proc.Wait(wctx)
	if werr != nil {
		if err == nil {
			err = werr
		}
		exit.ErrorCode, exit.Message = CodeExecFailed, err.Error()
		return exit
	}
	exit.Code = &code
	return exit
}

// take waits for the output window to hold a byte and takes up to n.
func (es *execRuns) take(ctx context.Context, r *execRun, n int) (int, error) {
	for {
		es.mu.Lock()
		if r.credit > 0 {
			n = min(n, r.credit)
			r.credit -= n
			es.mu.Unlock()
			return n, nil
		}
		es.mu.Unlock()
		select {
		case <-r.outWake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// execInput writes queued input to the command and tells the server how
// much it took, opening the server's input window.
func (c *Client) execInput(ctx context.Context, es *execRuns, r *execRun, id uint64, proc runtime.ExecProcess, send func(protocol.Message) error) {
	w := proc.Stdin()
	for {
		es.mu.Lock()
		in, eof := r.input, r.eof && len(r.input) == 0
		r.input = nil
		es.mu.Unlock()
		if eof {
			w.Close()
			return
		}
		n := 0
		for _, b := range in {
			if _, err := w.Write(b); err != nil {
				return
			}
			n += len(b)
		}
		if n > 0 {
			es.mu.Lock()
			r.queued -= n
			es.mu.Unlock()
			if send(protocol.Message{Type: protocol.TypeExecAck, ExecAck: &protocol.ExecAck{ID: id, Bytes: n}}) != nil {
				return
			}
			continue
		}
		select {
		case <-r.inWake:
		case <-ctx.Done():
			return
		}
	}
}

// input queues the server's input; a server that sends past its window
// ends the exec, not the session.
func (es *execRuns) input(in protocol.ExecInput) {
	es.mu.Lock()
	defer es.mu.Unlock()
	r := es.runs[in.ID]
	if r == nil {
		return
	}
	if len(in.Data) > 0 {
		r.queued += len(in.Data)
		if r.queued > protocol.ExecWindow {
			r.cancel()
			return
		}
		r.input = append(r.input, in.Data)
	}
	r.eof = r.eof || in.EOF
	signal(r.inWake)
}

func (es *execRuns) ack(a protocol.ExecAck) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if r := es.runs[a.ID]; r != nil && a.Bytes > 0 {
		r.credit = min(r.credit+a.Bytes, protocol.ExecWindow)
		signal(r.outWake)
	}
}

func (es *execRuns) stop(id uint64) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if r := es.runs[id]; r != nil {
		r.cancel()
	}
}

// resize changes a command's terminal size, apart from the reader, which
// must not wait on the engine.
func (es *execRuns) resize(rs protocol.ExecResize) {
	es.mu.Lock()
	defer es.mu.Unlock()
	r := es.runs[rs.ID]
	if r == nil {
		return
	}
	if r.proc == nil {
		r.size = &rs
		return
	}
	proc := r.proc
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		proc.Resize(ctx, uint(rs.Rows), uint(rs.Cols))
	}()
}
