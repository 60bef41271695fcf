package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/capstanhq/capstan/internal/protocol"
)

func execNoun() *noun {
	return &noun{
		name:    "exec",
		summary: "Run a command in a task's container (ECS Exec); -it for an interactive terminal.",
		run: &verb{
			args:    "TASK [--container C] [-i] [-t] -- CMD [ARG...]",
			summary: "Run a command in a running task's container, relayed through its instance's agent.",
			details: `
The task must have been started with enableExecuteCommand, and the caller
needs ecs:ExecuteCommand on it. -i passes standard input to the command;
-t gives it a terminal (the local one is put in raw mode and its size
follows the window's). capstan exits with the command's exit code.`,
			bind: execRun,
		},
	}
}

func execRun(fs *flag.FlagSet) action {
	var cluster, container string
	var interactive, tty, both bool
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.StringVar(&container, "container", "", "`container` name (needed when the task has more than one)")
	fs.BoolVar(&interactive, "i", false, "pass standard input to the command")
	fs.BoolVar(&tty, "t", false, "give the command a terminal")
	fs.BoolVar(&both, "it", false, "-i and -t")
	return func(ctx context.Context, s *session, args []string) error {
		interactive, tty = interactive || both, tty || both
		if len(args) < 2 {
			return usageErrorf("want TASK -- CMD [ARG...]")
		}
		task, argv := args[0], args[1:]
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		in := &ecs.ExecuteCommandInput{Task: aws.String(task), Command: aws.String(quoteCommand(argv)), Interactive: true}
		if cluster != "" {
			in.Cluster = aws.String(cluster)
		}
		if container != "" {
			in.Container = aws.String(container)
		}
		out, err := c.ExecuteCommand(ctx, in)
		if err != nil {
			return err
		}
		if out.Session == nil {
			return errors.New("ExecuteCommand answered no session")
		}
		code, err := s.execSession(ctx, aws.ToString(out.Session.StreamUrl), aws.ToString(out.Session.TokenValue), interactive, tty)
		if err != nil {
			return err
		}
		if code != 0 {
			return &exitStatus{code: code, msg: fmt.Sprintf("command exited with code %d", code)}
		}
		return nil
	}
}

// quoteCommand joins argv into one command string the server splits back
// into the same words (single quotes where needed).
func quoteCommand(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
		}) < 0 {
			words[i] = a
			continue
		}
		words[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(words, " ")
}

// doer lends the SDK's HTTP client (which carries the CA bundle) to the
// websocket dialer.
type doer struct{ c aws.HTTPClient }

func (d doer) RoundTrip(r *http.Request) (*http.Response, error) { return d.c.Do(r) }

// execSession opens the session's websocket on the endpoint the CLI
// uses (the server that issued the token) and relays the terminal.
func (s *session) execSession(ctx context.Context, streamURL, token string, interactive, tty bool) (int, error) {
	su, err := url.Parse(streamURL)
	if err != nil {
		return 0, fmt.Errorf("ExecuteCommand's streamUrl %q: %w", streamURL, err)
	}
	wsURL := "ws" + strings.TrimPrefix(strings.TrimRight(s.conn.endpoint, "/"), "http") + su.Path
	hc := &http.Client{}
	if s.conn.aws.HTTPClient != nil {
		hc.Transport = doer{s.conn.aws.HTTPClient}
	}
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return 0, fmt.Errorf("open the exec session: %w", err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	hello := protocol.ExecFrame{Type: protocol.FrameHello, Token: token, TTY: tty}
	var inFd = -1
	if f, ok := s.stdin.(*os.File); ok {
		inFd = int(f.Fd())
	}
	if tty && inFd >= 0 {
		if ws, err := unix.IoctlGetWinsize(inFd, unix.TIOCGWINSZ); err == nil {
			hello.Rows, hello.Cols = ws.Row, ws.Col
		}
		if restore, err := rawTerminal(inFd); err == nil {
			defer restore()
		}
	}
	if err := sendFrame(ctx, conn, hello); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if tty && inFd >= 0 {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-winch:
					if ws, err := unix.IoctlGetWinsize(inFd, unix.TIOCGWINSZ); err == nil {
						sendFrame(ctx, conn, protocol.ExecFrame{Type: protocol.FrameResize, Rows: ws.Row, Cols: ws.Col})
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	if interactive {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.stdin.Read(buf)
				if n > 0 {
					if sendFrame(ctx, conn, protocol.ExecFrame{Type: protocol.FrameInput, Data: buf[:n]}) != nil {
						return
					}
				}
				if err != nil {
					sendFrame(ctx, conn, protocol.ExecFrame{Type: protocol.FrameEOF})
					return
				}
			}
		}()
	} else {
		sendFrame(ctx, conn, protocol.ExecFrame{Type: protocol.FrameEOF})
	}
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("the exec session ended without an exit code: %w", err)
		}
		var f protocol.ExecFrame
		if err := json.Unmarshal(b, &f); err != nil {
			return 0, fmt.Errorf("the exec session sent a malformed frame: %w", err)
		}
		switch f.Type {
		case protocol.FrameOutput:
			w := s.stdout
			if f.Stream == "stderr" {
				w = s.stderr
			}
			if _, err := w.Write(f.Data); err != nil {
				return 0, err
			}
		case protocol.FrameExit:
			if f.Code == nil {
				return 0, errors.New("the exec session ended without an exit code")
			}
			conn.Close(websocket.StatusNormalClosure, "")
			return *f.Code, nil
		case protocol.FrameError:
			return 0, fmt.Errorf("exec session: %s", f.Message)
		}
	}
}

func sendFrame(ctx context.Context, conn *websocket.Conn, f protocol.ExecFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

// rawTerminal puts the terminal on fd in raw mode (as cfmakeraw) and
// returns what restores it.
func rawTerminal(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
