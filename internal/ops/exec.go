package ops

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/audit"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// Exec sessions (ECS Exec): ExecuteCommand checks the call and issues a
// one-time token for a session; the client opens the session's websocket
// (protocol.ExecPath) on the server that issued it, which relays the
// command's input and output through the instance's agent.

// execNotEnabled is ECS's answer for a task run without execute command.
const execNotEnabled = "The execute command failed because execute command was not enabled when the task was run or the execute command agent isn’t running. Wait and try again or run a new task with execute command enabled and try again."

// ExecTokenTTL is how long a session's token may be used.
const ExecTokenTTL = 60 * time.Second

// maxExecGrants bounds the tokens a server holds unused.
const maxExecGrants = 4096

// ExecConn is one exec relayed through an agent (the gateway's stream).
type ExecConn interface {
	Next(ctx context.Context) (protocol.Message, error)
	Consumed(n int)
	Input(ctx context.Context, data []byte) error
	CloseInput() error
	Resize(rows, cols uint16) error
	Close()
}

// ExecRelay starts execs on instances' agents.
type ExecRelay interface {
	OpenExec(ctx context.Context, cluster, instance string, st protocol.ExecStart) (ExecConn, error)
}

// ExecConfig wires exec sessions.
type ExecConfig struct {
	Relay ExecRelay
	// StreamURL is the base of the streamUrl answered: ws:// or wss://
	// and the server's address.
	StreamURL string
	// Record, when set, is given each session once it ends.
	Record func(p auth.Principal, sourceIP, userAgent string, s audit.ExecSession)
	Now    func() time.Time
}

// execGrant is an issued, unused session token and what it allows.
type execGrant struct {
	tokenHash [32]byte
	principal auth.Principal
	sourceIP  string
	cluster   string
	instance  string
	taskArn   string
	container string
	command   string
	cmd       []string
	expires   time.Time
}

type execOps struct {
	s   *Service
	cfg ExecConfig

	mu     sync.Mutex
	grants map[string]*execGrant // by session ID
}

// RegisterExec adds ExecuteCommand to h and returns the handler of the
// sessions' websocket endpoint (GET protocol.ExecPath + "{id}").
func (s *Service) RegisterExec(h *api.Handler, cfg ExecConfig) http.Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &execOps{s: s, cfg: cfg, grants: map[string]*execGrant{}}
	api.Register(h, "ExecuteCommand", e.ExecuteCommand)
	return e
}

func (e *execOps) ExecuteCommand(ctx context.Context, req *shapes.ExecuteCommandRequest) (*shapes.ExecuteCommandResponse, error) {
	if req.Task == "" {
		return nil, fault.Invalid("task", "is required")
	}
	if req.Command == "" {
		return nil, fault.Invalid("command", "is required")
	}
	if len(req.Command) > 4096 {
		return nil, fault.Invalid("command", "must be at most 4096 characters")
	}
	if req.Interactive == nil || !*req.Interactive {
		return nil, fault.Invalid("interactive", "Interactive is the only mode supported currently.")
	}
	cmd, err := SplitCommand(req.Command)
	if err != nil {
		return nil, fault.Invalid("command", "%v", err)
	}
	cl, err := e.s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	id, err := e.s.TaskID("task", cluster, req.Task)
	if err != nil {
		return nil, err
	}
	it, err := store.Get[store.Task](ctx, e.s.Store, store.TaskKey(cluster, id))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fault.Invalid("task", "task %s not found in cluster %s", id, cluster)
	}
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	task := it.Value
	var ctr *shapes.Container
	names := make([]string, 0, len(task.Containers))
	for i, c := range task.Containers {
		names = append(names, c.Name)
		if c.Name == req.Container || req.Container == "" && len(task.Containers) == 1 {
			ctr = &task.Containers[i]
		}
	}
	switch {
	case ctr == nil && req.Container == "":
		return nil, fault.Invalid("container", "is required: the task has containers %s", strings.Join(names, ", "))
	case ctr == nil:
		return nil, fault.Invalid("container", "the task has no container %q (it has %s)", fleet.Clip(req.Container), strings.Join(names, ", "))
	}
	if task.EnableExecuteCommand == nil || !*task.EnableExecuteCommand {
		return nil, fault.Invalid("", "%s", execNotEnabled)
	}
	if task.LastStatus != "RUNNING" || task.InstanceID == "" {
		return nil, fault.Invalid("", "The execute command failed because the task is not running (its last status is %s). Wait and try again.", task.LastStatus)
	}
	p, _ := api.Caller(ctx)
	sessionID, token := "ecs-execute-command-"+randomHex(16), base64.RawURLEncoding.EncodeToString(randomBytes(32))
	g := &execGrant{tokenHash: sha256.Sum256([]byte(token)), principal: p, sourceIP: api.SourceIP(ctx), cluster: cluster,
		instance: task.InstanceID, taskArn: task.TaskArn, container: ctr.Name, command: req.Command, cmd: cmd,
		expires: e.cfg.Now().Add(ExecTokenTTL)}
	e.mu.Lock()
	now := e.cfg.Now()
	for k, old := range e.grants {
		if now.After(old.expires) {
			delete(e.grants, k)
		}
	}
	if len(e.grants) >= maxExecGrants {
		e.mu.Unlock()
		return nil, &fault.Error{Kind: fault.Throttled, Message: "the server holds as many unused exec sessions as it allows; retry"}
	}
	e.grants[sessionID] = g
	e.mu.Unlock()
	return &shapes.ExecuteCommandResponse{ClusterArn: task.ClusterArn, ContainerArn: ctr.ContainerArn, ContainerName: ctr.Name,
		Interactive: ptr(true), TaskArn: task.TaskArn,
		Session: &shapes.Session{SessionId: sessionID, StreamUrl: strings.TrimRight(e.cfg.StreamURL, "/") + protocol.ExecPath + sessionID, TokenValue: token}}, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func randomHex(n int) string { return hex.EncodeToString(randomBytes(n)) }

// claim takes the grant of a session ID whose token is token: once only,
// before it expires.
func (e *execOps) claim(id, token string) (*execGrant, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.grants[id]
	sum := sha256.Sum256([]byte(token))
	if g == nil || token == "" || subtle.ConstantTimeCompare(sum[:], g.tokenHash[:]) != 1 {
		return nil, errors.New("the session's token is not valid (each token opens its session once, on the server that issued it)")
	}
	delete(e.grants, id)
	if e.cfg.Now().After(g.expires) {
		return nil, fmt.Errorf("the session's token expired (it is valid for %s after ExecuteCommand)", ExecTokenTTL)
	}
	return g, nil
}

// ServeHTTP serves a session's websocket: the token (in the
// protocol.ExecTokenHeader header or the first frame) opens it once.
func (e *execOps) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, protocol.ExecPath)
	var g *execGrant
	if tok := r.Header.Get(protocol.ExecTokenHeader); tok != "" {
		var err error
		if g, err = e.claim(id, tok); err != nil {
			w.Header().Set("X-Amzn-ErrorType", "AccessDeniedException")
			http.Error(w, "AccessDeniedException: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	ctx := r.Context()
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	hello, err := readFrame(hctx, conn)
	cancel()
	if err != nil || hello.Type != protocol.FrameHello {
		refuse(ctx, conn, "the first frame must be a hello")
		return
	}
	if g == nil {
		if g, err = e.claim(id, hello.Token); err != nil {
			refuse(ctx, conn, "AccessDeniedException: "+err.Error())
			return
		}
	}
	rec := audit.ExecSession{SessionID: id, Cluster: g.cluster, TaskArn: g.taskArn, Container: g.container, Command: g.command,
		TTY: hello.TTY, StartTime: e.cfg.Now()}
	rec.Ended, rec.ExitCode, rec.Message = e.relay(ctx, conn, g, hello)
	rec.EndTime = e.cfg.Now()
	if e.cfg.Record != nil {
		e.cfg.Record(g.principal, g.sourceIP, r.UserAgent(), rec)
	}
}

func readFrame(ctx context.Context, conn *websocket.Conn) (protocol.ExecFrame, error) {
	var f protocol.ExecFrame
	_, b, err := conn.Read(ctx)
	if err != nil {
		return f, err
	}
	err = json.Unmarshal(b, &f)
	return f, err
}

func writeFrame(ctx context.Context, conn *websocket.Conn, f protocol.ExecFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

func refuse(ctx context.Context, conn *websocket.Conn, msg string) {
	writeFrame(ctx, conn, protocol.ExecFrame{Type: protocol.FrameError, Message: msg})
	conn.Close(websocket.StatusPolicyViolation, truncateReason(msg))
}

func truncateReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

// relay runs the session until the command exits or either side goes,
// and says how it ended.
func (e *execOps) relay(ctx context.Context, conn *websocket.Conn, g *execGrant, hello protocol.ExecFrame) (string, *int, string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := protocol.ExecStart{TaskArn: g.taskArn, Container: g.container, Cmd: g.cmd, TTY: hello.TTY, Rows: hello.Rows, Cols: hello.Cols}
	ec, err := e.cfg.Relay.OpenExec(ctx, g.cluster, g.instance, st)
	if err != nil {
		msg := fmt.Sprintf("the agent of container instance %s could not be reached: %v", g.instance, err)
		refuse(ctx, conn, msg)
		return audit.ExecAgentLost, nil, msg
	}
	defer ec.Close()
	clientGone := make(chan struct{})
	go func() {
		defer close(clientGone)
		inputOver := false // the exec took no more: the rest is dropped, its output and exit still go out
		for {
			f, err := readFrame(ctx, conn)
			if err != nil {
				return
			}
			switch f.Type {
			case protocol.FrameInput:
				if !inputOver && ec.Input(ctx, f.Data) != nil {
					inputOver = true
				}
			case protocol.FrameEOF:
				ec.CloseInput()
			case protocol.FrameResize:
				if f.Rows > 0 && f.Cols > 0 {
					ec.Resize(f.Rows, f.Cols)
				}
			}
		}
	}()
	go func() {
		<-clientGone
		cancel()
	}()
	for {
		m, err := ec.Next(ctx)
		if err != nil {
			select {
			case <-clientGone:
				return audit.ExecClientClosed, nil, "the client closed the session"
			default:
			}
			msg := err.Error()
			refuse(ctx, conn, msg)
			return audit.ExecAgentLost, nil, msg
		}
		if o := m.ExecOutput; o != nil {
			if err := writeFrame(ctx, conn, protocol.ExecFrame{Type: protocol.FrameOutput, Stream: o.Stream, Data: o.Data}); err != nil {
				return audit.ExecClientClosed, nil, "the client closed the session"
			}
			ec.Consumed(len(o.Data))
			continue
		}
		x := m.ExecExit
		if x == nil {
			continue
		}
		if x.Code == nil {
			msg := x.ErrorCode + ": " + x.Message
			refuse(ctx, conn, msg)
			return audit.ExecFailed, nil, msg
		}
		writeFrame(ctx, conn, protocol.ExecFrame{Type: protocol.FrameExit, Code: x.Code})
		conn.Close(websocket.StatusNormalClosure, "")
		return audit.ExecExited, x.Code, ""
	}
}

// SplitCommand splits an ExecuteCommand command into its words as a
// POSIX shell would, quotes and backslashes included (no expansions).
func SplitCommand(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("has an unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			inWord = true
			closed := false
			for i++; i < len(s); i++ {
				if s[i] == '"' {
					closed = true
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if !closed {
				return nil, errors.New("has an unterminated double quote")
			}
		case c == '\\':
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("has no words")
	}
	return words, nil
}

// execContainer sets ecs:container-name: the container asked for, or a
// one-container task's only one (the operation refuses a call that names
// none of a task with more).
func (b *authBuild) execContainer(taskArn, name string) error {
	if name == "" {
		_, path, _ := b.s.ARNs.Resource(taskArn)
		if cluster, id, ok := strings.Cut(path, "/"); ok {
			it, err := store.Get[store.Task](b.ctx, b.s.Store, store.TaskKey(cluster, id))
			if err == nil && len(it.Value.Containers) == 1 {
				name = it.Value.Containers[0].Name
			}
		}
	}
	b.set(condContainerName, name)
	return nil
}
