// Package protocol is the agent session's wire format, shared by the server
// gateway and the agent. One websocket carries JSON messages both ways:
//
//	agent → server: hello, manifestAck, stateChange, heartbeat
//	server → agent: manifest, stateAck, heartbeat, error
//	server → agent: logRequest, logCancel; agent → server: logChunk, logEnd
//	exec (exec.go): server → agent: execStart, execInput, execResize,
//	execAck, execCancel; agent → server: execOutput, execAck, execExit
//
// The server pushes an instance's whole desired task set (a manifest) with a
// sequence number; the agent persists it before acknowledging. The agent
// reports task states in numbered batches and the server acknowledges a
// batch after writing it. Both sides may resend: a manifest with a seq the
// agent already has, or a state batch the server already wrote, changes
// nothing, so a resumed session never loses or repeats work.
package protocol

import (
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// Version is the protocol version the agent announces in its hello.
const Version = 1

// Path is the websocket endpoint on the server.
const Path = "/agent"

// Message types.
const (
	TypeHello       = "hello"
	TypeManifest    = "manifest"
	TypeManifestAck = "manifestAck"
	TypeStateChange = "stateChange"
	TypeStateAck    = "stateAck"
	TypeHeartbeat   = "heartbeat"
	TypeError       = "error"
	// Container logs (logs.go): the server asks, the agent answers in
	// chunks and ends the request.
	TypeLogRequest = "logRequest"
	TypeLogCancel  = "logCancel"
	TypeLogChunk   = "logChunk"
	TypeLogEnd     = "logEnd"
	// Exec sessions (exec.go).
	TypeExecStart  = "execStart"
	TypeExecInput  = "execInput"
	TypeExecResize = "execResize"
	TypeExecOutput = "execOutput"
	TypeExecAck    = "execAck"
	TypeExecExit   = "execExit"
	TypeExecCancel = "execCancel"
)

// Message is one frame; exactly the member named by Type is set.
type Message struct {
	Type        string       `json:"type"`
	Hello       *Hello       `json:"hello,omitempty"`
	Manifest    *Manifest    `json:"manifest,omitempty"`
	ManifestAck *ManifestAck `json:"manifestAck,omitempty"`
	StateChange *StateChange `json:"stateChange,omitempty"`
	StateAck    *StateAck    `json:"stateAck,omitempty"`
	Heartbeat   *Heartbeat   `json:"heartbeat,omitempty"`
	Error       *Error       `json:"error,omitempty"`
	LogRequest  *LogRequest  `json:"logRequest,omitempty"`
	LogCancel   *LogCancel   `json:"logCancel,omitempty"`
	LogChunk    *LogChunk    `json:"logChunk,omitempty"`
	LogEnd      *LogEnd      `json:"logEnd,omitempty"`
	ExecStart   *ExecStart   `json:"execStart,omitempty"`
	ExecInput   *ExecInput   `json:"execInput,omitempty"`
	ExecResize  *ExecResize  `json:"execResize,omitempty"`
	ExecOutput  *ExecOutput  `json:"execOutput,omitempty"`
	ExecAck     *ExecAck     `json:"execAck,omitempty"`
	ExecExit    *ExecExit    `json:"execExit,omitempty"`
	ExecCancel  *ExecCancel  `json:"execCancel,omitempty"`
}

// Hello opens a session. ManifestSeq is the last manifest the agent has
// persisted; StateID the last state batch it knows was acknowledged.
type Hello struct {
	ProtocolVersion      int    `json:"protocolVersion"`
	ContainerInstanceArn string `json:"containerInstanceArn"`
	AgentVersion         string `json:"agentVersion"`
	ManifestSeq          uint64 `json:"manifestSeq"`
	StateID              uint64 `json:"stateId"`
}

// Manifest is the complete desired task set of one instance. Tasks absent
// from it that the agent still runs must be stopped.
type Manifest struct {
	Seq   uint64 `json:"seq"`
	Tasks []Task `json:"tasks"`
}

// ManifestAck says the agent has persisted manifest Seq.
type ManifestAck struct {
	Seq uint64 `json:"seq"`
}

// Task kinds, in admission priority order.
const (
	KindDaemon     = "daemon"
	KindService    = "service"
	KindStandalone = "standalone"
)

// Task is a task the server wants on the instance.
type Task struct {
	Arn                  string `json:"arn"`
	ClusterArn           string `json:"clusterArn"`
	ContainerInstanceArn string `json:"containerInstanceArn"`
	// Kind decides admission priority: daemon, service, standalone.
	Kind          string `json:"kind"`
	Group         string `json:"group,omitempty"`
	StartedBy     string `json:"startedBy,omitempty"`
	DesiredStatus string `json:"desiredStatus"` // RUNNING or STOPPED
	// StopCode and StoppedReason explain a STOPPED desired status.
	StopCode      string `json:"stopCode,omitempty"`
	StoppedReason string `json:"stoppedReason,omitempty"`
	// Definition is the task definition to run; daemon task definitions are
	// converted to this form by the server (network mode "daemon").
	Definition shapes.TaskDefinition `json:"definition"`
	Overrides  *shapes.TaskOverride  `json:"overrides,omitempty"`
	Tags       []shapes.Tag          `json:"tags,omitempty"`
	// HostAccess is the server's grant of the host access the definition
	// asks for (privileged, host network, host volumes...): an application
	// task without it runs with all of that taken out. Daemon tasks have
	// their host access by their own actions.
	HostAccess bool      `json:"hostAccess,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	// Version changes whenever the server changes the task.
	Version int64 `json:"version"`
}

// StateChange is a batch of task states, numbered by the agent.
type StateChange struct {
	ID    uint64      `json:"id"`
	Tasks []TaskState `json:"tasks"`
}

// StateAck says the server has written state batch ID (and all before it).
type StateAck struct {
	ID uint64 `json:"id"`
}

// TaskState is what the agent knows of a task, in ECS terms.
type TaskState struct {
	Arn string `json:"arn"`
	// LastStatus is the ECS task status: PROVISIONING, PENDING, ACTIVATING,
	// RUNNING, DEACTIVATING, STOPPING, DEPROVISIONING or STOPPED.
	LastStatus    string           `json:"lastStatus"`
	HealthStatus  string           `json:"healthStatus,omitempty"` // HEALTHY, UNHEALTHY, UNKNOWN
	Containers    []ContainerState `json:"containers"`
	PullStartedAt time.Time        `json:"pullStartedAt,omitzero"`
	PullStoppedAt time.Time        `json:"pullStoppedAt,omitzero"`
	StartedAt     time.Time        `json:"startedAt,omitzero"`
	StoppingAt    time.Time        `json:"stoppingAt,omitzero"`
	StoppedAt     time.Time        `json:"stoppedAt,omitzero"`
	StopCode      string           `json:"stopCode,omitempty"`
	StoppedReason string           `json:"stoppedReason,omitempty"`
	// Attachments are the task's network attachments as ECS shows them:
	// an awsvpc task's own address on the instance's task network, as an
	// "ElasticNetworkInterface" (awsvpc.go).
	Attachments []shapes.Attachment `json:"attachments,omitempty"`
	// Seq orders states of one task: the server ignores a state older than
	// one it has written.
	Seq uint64 `json:"seq"`
}

// ContainerState is one container of a task.
type ContainerState struct {
	Name            string                  `json:"name"`
	RuntimeID       string                  `json:"runtimeId,omitempty"`
	Image           string                  `json:"image"`
	ImageDigest     string                  `json:"imageDigest,omitempty"`
	LastStatus      string                  `json:"lastStatus"` // PENDING, RUNNING, STOPPED
	ExitCode        *int                    `json:"exitCode,omitempty"`
	Reason          string                  `json:"reason,omitempty"`
	HealthStatus    string                  `json:"healthStatus,omitempty"`
	NetworkBindings []shapes.NetworkBinding `json:"networkBindings,omitempty"`
	// NetworkInterfaces is the task's address, for containers of awsvpc
	// tasks.
	NetworkInterfaces []shapes.NetworkInterface `json:"networkInterfaces,omitempty"`
}

// Heartbeat keeps the session alive both ways.
type Heartbeat struct {
	Time time.Time `json:"time"`
}

// Error is sent by the server before it closes a session it refuses, or
// about a message it rejected (the session then goes on).
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Retired, with InstanceInactive: the instance is a managed one its
	// capacity provider terminates, so the agent stops instead of
	// registering anew (its credential would be refused).
	Retired bool `json:"retired,omitempty"`
}

// Timing shared by both ends.
const (
	HeartbeatInterval = 5 * time.Second
	// SilenceLimit is how long either side waits without any message
	// before it considers the session dead.
	SilenceLimit = 15 * time.Second
)
