package protocol

// Exec sessions (ECS Exec): the server asks an instance's agent to run a
// command in a task's container and relays its input and output between
// the client's websocket and the agent's session. Each direction is a
// bounded window: a side sends at most ExecWindow bytes of data the other
// has not acknowledged (execAck), so neither a fast command nor a fast
// typist can fill the session's queues or stall its other messages.
//
//	server → agent: execStart, execInput, execResize, execAck, execCancel
//	agent → server: execOutput, execAck, execExit

// Exec limits.
const (
	// ExecWindow bounds each direction's unacknowledged data.
	ExecWindow = 256 << 10
	// ExecChunk bounds one message's data.
	ExecChunk = 32 << 10
)

// ExecStart asks the agent to run Cmd in a task's container.
type ExecStart struct {
	// ID is the server's, unique within the session.
	ID        uint64   `json:"id"`
	TaskArn   string   `json:"taskArn"`
	Container string   `json:"container"`
	Cmd       []string `json:"cmd"`
	TTY       bool     `json:"tty,omitempty"`
	// Rows and Cols are the terminal's first size (TTY only).
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// ExecInput is data for the command's standard input; EOF closes it.
type ExecInput struct {
	ID   uint64 `json:"id"`
	Data []byte `json:"data,omitempty"`
	EOF  bool   `json:"eof,omitempty"`
}

// ExecResize changes the terminal's size.
type ExecResize struct {
	ID   uint64 `json:"id"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ExecOutput is data the command wrote; Stream is stdout or stderr (a
// TTY has stdout only).
type ExecOutput struct {
	ID     uint64 `json:"id"`
	Stream string `json:"stream"`
	Data   []byte `json:"data"`
}

// ExecAck says Bytes more of the other side's data were consumed, opening
// its window by as much.
type ExecAck struct {
	ID    uint64 `json:"id"`
	Bytes int    `json:"bytes"`
}

// ExecExit ends exec ID: Code is the command's exit code, or, when it
// could not run or was lost, nil with ErrorCode and Message saying why.
type ExecExit struct {
	ID        uint64 `json:"id"`
	Code      *int   `json:"code,omitempty"`
	ErrorCode string `json:"errorCode,omitempty"`
	Message   string `json:"message,omitempty"`
}

// ExecCancel tells the agent the server has given up exec ID: the
// command is killed with its connection.
type ExecCancel struct {
	ID uint64 `json:"id"`
}

// ExecPath is the prefix of the client's websocket endpoint for a
// session: ExecPath + sessionId.
const ExecPath = "/exec/"

// ExecTokenHeader may carry the session's token on the websocket's
// upgrade request; else the client's first frame does.
const ExecTokenHeader = "X-Capstan-Exec-Token"

// Client frame types on the exec websocket.
const (
	FrameHello  = "hello"  // client: token, TTY and terminal size
	FrameInput  = "input"  // client: stdin data
	FrameEOF    = "eof"    // client: stdin closed
	FrameResize = "resize" // client: terminal size
	FrameOutput = "output" // server: stdout or stderr data
	FrameExit   = "exit"   // server: the exit code; the last frame
	FrameError  = "error"  // server: why the session ended without one
)

// ExecFrame is one JSON text frame between a client and the server's
// exec endpoint; the members Type names are set.
type ExecFrame struct {
	Type    string `json:"type"`
	Token   string `json:"token,omitempty"`
	TTY     bool   `json:"tty,omitempty"`
	Rows    uint16 `json:"rows,omitempty"`
	Cols    uint16 `json:"cols,omitempty"`
	Data    []byte `json:"data,omitempty"`
	Stream  string `json:"stream,omitempty"`
	Code    *int   `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}
