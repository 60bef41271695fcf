package audit

import (
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
)

// ExecSessionEvent is the eventName of an exec session's record, written
// when the session ends (the ExecuteCommand call that opened it has its
// own record).
const ExecSessionEvent = "ExecuteCommandSession"

// Ways an exec session ends, in ExecSession.Ended.
const (
	ExecExited       = "exited"       // the command exited: ExitCode is set
	ExecClientClosed = "clientClosed" // the client went away first
	ExecAgentLost    = "agentLost"    // the agent's session ended first
	ExecFailed       = "failed"       // the command could not run
)

// ExecSession is what an exec session's record says of it, in its
// serviceEventDetails.
type ExecSession struct {
	SessionID string    `json:"sessionId"`
	Cluster   string    `json:"cluster"`
	TaskArn   string    `json:"taskArn"`
	Container string    `json:"container"`
	Command   string    `json:"command"`
	TTY       bool      `json:"tty"`
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
	ExitCode  *int      `json:"exitCode,omitempty"`
	Ended     string    `json:"ended"`
	Message   string    `json:"message,omitempty"`
}

// RecordExecSession hands over an ended exec session of p's; like Record
// it never waits.
func (t *Trail) RecordExecSession(p auth.Principal, sourceIP, userAgent string, s ExecSession) {
	s.Command = clip(s.Command, maxMessage)
	s.Message = clip(s.Message, maxMessage)
	r := api.Record{Time: s.EndTime, Principal: p, AccessKeyID: p.AccessKeyID, SourceIP: sourceIP, UserAgent: userAgent,
		Operation: ExecSessionEvent, Checked: api.Checked{Action: "ecs:ExecuteCommand", Resources: []string{s.TaskArn}}}
	if s.Ended != ExecExited {
		r.ErrorCode, r.ErrorMessage = s.Ended, s.Message
	}
	ev := t.event(r)
	ev.ServiceEventDetails = &s
	t.mu.Lock()
	if t.closed || len(t.pending)+len(t.events) >= t.buffer {
		t.mu.Unlock()
		t.m.dropped.WithLabelValues("buffer_full").Inc()
		return
	}
	t.events = append(t.events, ev)
	t.queued++
	t.mu.Unlock()
	signal(t.wake)
}
