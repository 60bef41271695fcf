package protocol

import (
	"errors"
	"time"
)

// A log request reads one container's output through the instance's
// session. Each request is a bounded window: the agent sends at most
// MaxBytes of lines (in chunks of at most LogChunkBytes) and then ends it,
// so a noisy container never has more than one window in flight per
// request, and the session's other messages (heartbeats, state reports)
// pass between its chunks. A client that follows asks again from the
// last line's time.

// Log request limits.
const (
	// LogMaxBytes bounds one request's window.
	LogMaxBytes = 1 << 20
	// LogChunkBytes bounds one chunk message.
	LogChunkBytes = 32 << 10
	// LogMaxWait bounds how long a follow request waits for a first line.
	LogMaxWait = 20 * time.Second
)

// LogRequest asks the agent for a container's logs.
type LogRequest struct {
	// ID is the server's, unique within the session.
	ID        uint64 `json:"id"`
	TaskArn   string `json:"taskArn"`
	Container string `json:"container"`
	// Since keeps lines at or after it; zero for all.
	Since time.Time `json:"since,omitzero"`
	// Tail, when positive, keeps only the last Tail lines (before Since
	// is applied by the engine, as docker logs does).
	Tail int `json:"tail,omitempty"`
	// Wait, when positive, waits up to this long for a first line if
	// there is none yet (following), then returns what comes within a
	// short quiet period.
	Wait     time.Duration `json:"wait,omitempty"`
	MaxBytes int           `json:"maxBytes"`
}

// LogCancel tells the agent the server no longer wants request ID.
type LogCancel struct {
	ID uint64 `json:"id"`
}

// LogLine is one line of a container's output, without its newline.
type LogLine struct {
	Time   time.Time `json:"time"`
	Stream string    `json:"stream"` // stdout or stderr
	Text   string    `json:"text"`
}

// LogChunk carries lines of request ID, oldest first.
type LogChunk struct {
	ID    uint64    `json:"id"`
	Lines []LogLine `json:"lines"`
}

// LogEnd ends request ID: Code is empty on success. Truncated says the
// window filled before the lines ran out.
type LogEnd struct {
	ID        uint64 `json:"id"`
	Code      string `json:"code,omitempty"`
	Message   string `json:"message,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Errors of the server's side of a log request (the gateway's, told to
// the caller by the API).
var (
	ErrAgentNotConnected = errors.New("the instance's agent is not connected")
	ErrAgentElsewhere    = errors.New("the instance's agent is connected to another server")
	ErrLogsBusy          = errors.New("the server is serving as many log requests as it allows")
)
