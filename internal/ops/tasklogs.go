package ops

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// TaskLogsOperation is the extension's operation name.
const TaskLogsOperation = "GetTaskLogs"

// TaskLogSource asks an instance's agent for a container's logs (the
// gateway); protocol's errors say why it could not reach the agent.
type TaskLogSource interface {
	Logs(ctx context.Context, cluster, instance string, req protocol.LogRequest, fn func([]protocol.LogLine) error) (protocol.LogEnd, error)
}

// GetTaskLogsRequest asks for a page of one container's output.
type GetTaskLogsRequest struct {
	Cluster string `json:"cluster,omitempty"`
	Task    string `json:"task"`
	// Container may be left out when the task has one container.
	Container string `json:"container,omitempty"`
	// StartTime (RFC 3339) keeps lines written at or after it; NextToken,
	// from an earlier answer, continues after its last line.
	StartTime string `json:"startTime,omitempty"`
	NextToken string `json:"nextToken,omitempty"`
	// Tail keeps only the last lines (1 to 10000).
	Tail *int32 `json:"tail,omitempty"`
	// WaitSeconds waits up to this long for a first line when there is
	// none yet (following).
	WaitSeconds *int32 `json:"waitSeconds,omitempty"`
	// MaxBytes bounds the page (1024 to 1048576; the default is the most).
	MaxBytes *int32 `json:"maxBytes,omitempty"`
}

// TaskLogEvent is one line.
type TaskLogEvent struct {
	Timestamp string `json:"timestamp"` // RFC 3339 with nanoseconds
	Stream    string `json:"stream"`    // stdout or stderr
	Message   string `json:"message"`
}

// GetTaskLogsResponse is a page of lines, oldest first.
type GetTaskLogsResponse struct {
	Container string         `json:"container"`
	Events    []TaskLogEvent `json:"events"`
	// NextToken continues after the last line (or where this page began
	// when it had none).
	NextToken string `json:"nextToken,omitempty"`
	// Truncated: the page filled before the lines ran out; ask again with
	// NextToken for the rest.
	Truncated bool `json:"truncated"`
	// TaskStatus is the task's last status: a follower stops after a
	// STOPPED task's last page.
	TaskStatus string `json:"taskStatus"`
}

// RegisterTaskLogs adds CapstanV1.GetTaskLogs, reading through src, to h.
// It is apart from Register because the agents' sessions are the server's.
func (s *Service) RegisterTaskLogs(h *api.Handler, src TaskLogSource) {
	api.RegisterExtension(h, TaskLogsOperation, taskLogs{s, src}.GetTaskLogs)
}

type taskLogs struct {
	s   *Service
	src TaskLogSource
}

const maxTaskLogWait = int32(protocol.LogMaxWait / time.Second)

func (t taskLogs) GetTaskLogs(ctx context.Context, req *GetTaskLogsRequest) (*GetTaskLogsResponse, error) {
	lr := protocol.LogRequest{MaxBytes: protocol.LogMaxBytes}
	if req.StartTime != "" && req.NextToken != "" {
		return nil, fault.Invalid("nextToken", "give startTime or nextToken, not both")
	}
	for field, v := range map[string]string{"startTime": req.StartTime, "nextToken": req.NextToken} {
		if v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return nil, fault.Invalid(field, "must be a time in RFC 3339 form, e.g. 2026-01-02T15:04:05Z (got %q)", fleet.Clip(v))
		}
		lr.Since = at
	}
	if req.Tail != nil {
		if *req.Tail < 1 || *req.Tail > 10000 {
			return nil, fault.Invalid("tail", "must be between 1 and 10000 (got %d)", *req.Tail)
		}
		lr.Tail = int(*req.Tail)
	}
	if req.WaitSeconds != nil {
		if *req.WaitSeconds < 0 || *req.WaitSeconds > maxTaskLogWait {
			return nil, fault.Invalid("waitSeconds", "must be between 0 and %d (got %d)", maxTaskLogWait, *req.WaitSeconds)
		}
		lr.Wait = time.Duration(*req.WaitSeconds) * time.Second
	}
	if req.MaxBytes != nil {
		if *req.MaxBytes < 1024 || *req.MaxBytes > protocol.LogMaxBytes {
			return nil, fault.Invalid("maxBytes", "must be between 1024 and %d (got %d)", protocol.LogMaxBytes, *req.MaxBytes)
		}
		lr.MaxBytes = int(*req.MaxBytes)
	}
	if req.Task == "" {
		return nil, fault.Invalid("task", "is required")
	}
	cl, err := t.s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	id, err := t.s.TaskID("task", cluster, req.Task)
	if err != nil {
		return nil, err
	}
	it, err := store.Get[store.Task](ctx, t.s.Store, store.TaskKey(cluster, id))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fault.Invalid("task", "no task %s in cluster %s", id, cluster)
	}
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	task := it.Value
	names := make([]string, 0, len(task.Containers))
	for _, c := range task.Containers {
		names = append(names, c.Name)
	}
	switch {
	case req.Container == "" && len(names) == 1:
		lr.Container = names[0]
	case req.Container == "":
		return nil, fault.Invalid("container", "is required: the task has containers %s", strings.Join(names, ", "))
	default:
		found := false
		for _, n := range names {
			found = found || n == req.Container
		}
		if !found {
			return nil, fault.Invalid("container", "the task has no container %q (it has %s)", fleet.Clip(req.Container), strings.Join(names, ", "))
		}
		lr.Container = req.Container
	}
	if task.InstanceID == "" {
		return nil, fault.ClientError("task %s is not placed on a container instance yet", id)
	}
	lr.TaskArn = t.s.ARNs.Task(cluster, id)
	out := &GetTaskLogsResponse{Container: lr.Container, Events: []TaskLogEvent{}, TaskStatus: task.LastStatus}
	last := lr.Since
	end, err := t.src.Logs(ctx, cluster, task.InstanceID, lr, func(lines []protocol.LogLine) error {
		for _, l := range lines {
			out.Events = append(out.Events, TaskLogEvent{Timestamp: l.Time.UTC().Format(time.RFC3339Nano), Stream: l.Stream, Message: l.Text})
			if l.Time.After(last) {
				last = l.Time
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, protocol.ErrAgentNotConnected):
		return nil, fault.ClientError("the agent of container instance %s is not connected: logs are read through it", task.InstanceID)
	case errors.Is(err, protocol.ErrAgentElsewhere):
		return nil, fault.ClientError("the agent of container instance %s is connected to another server: %v", task.InstanceID, err)
	case errors.Is(err, protocol.ErrLogsBusy):
		return nil, &fault.Error{Kind: fault.Throttled, Message: "the server is serving as many log requests as it allows; retry"}
	case err != nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if end.Code != "" {
		return nil, fault.ClientError("%s: %s", end.Code, end.Message)
	}
	out.Truncated = end.Truncated
	if len(out.Events) > 0 {
		last = last.Add(time.Nanosecond) // the next page starts after it
	}
	if !last.IsZero() {
		out.NextToken = last.UTC().Format(time.RFC3339Nano)
	}
	return out, nil
}
