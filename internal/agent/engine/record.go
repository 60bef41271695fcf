package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
)

// recordVersion is the format of persisted task records.
const recordVersion = 1

// record is what survives an agent restart for one task. The runtime's
// labels say which containers exist; the record keeps what labels cannot:
// the definition, what was reported, and why the task stops.
type record struct {
	Version    int                `json:"v"`
	Task       protocol.Task      `json:"task"`
	Defined    bool               `json:"defined"`
	Admitted   bool               `json:"admitted,omitempty"`
	Stopping   bool               `json:"stopping,omitempty"`
	StopCode   string             `json:"stopCode,omitempty"`
	StopReason string             `json:"stopReason,omitempty"`
	Orphan     bool               `json:"orphan,omitempty"`
	Status     string             `json:"status"`
	State      protocol.TaskState `json:"state"` // last reported
	Seq        uint64             `json:"seq"`
	Times      taskTimes          `json:"times"`
	Containers []containerRecord  `json:"containers"`
	Net        *netRecord         `json:"net,omitempty"` // an awsvpc task's namespace
}

type netRecord struct {
	TaskNet
	Released bool `json:"released,omitempty"`
}

type taskTimes struct {
	PullStarted time.Time `json:"pullStarted,omitzero"`
	PullStopped time.Time `json:"pullStopped,omitzero"`
	Started     time.Time `json:"started,omitzero"`
	Stopping    time.Time `json:"stopping,omitzero"`
	Stopped     time.Time `json:"stopped,omitzero"`
}

type containerRecord struct {
	Name         string                  `json:"name"`
	RuntimeID    string                  `json:"runtimeId,omitempty"`
	RuntimeName  string                  `json:"runtimeName,omitempty"`
	Phase        string                  `json:"phase"`
	Ran          bool                    `json:"ran,omitempty"`
	ExitCode     *int                    `json:"exitCode,omitempty"`
	Reason       string                  `json:"reason,omitempty"`
	Health       string                  `json:"health,omitempty"`
	ImageID      string                  `json:"imageId,omitempty"`
	ImageDigest  string                  `json:"imageDigest,omitempty"`
	Restarts     int                     `json:"restarts,omitempty"`
	FastExits    int                     `json:"fastExits,omitempty"`
	RestartAt    time.Time               `json:"restartAt,omitzero"`
	Created      time.Time               `json:"created,omitzero"`
	FirstStarted time.Time               `json:"firstStarted,omitzero"`
	StartedAt    time.Time               `json:"startedAt,omitzero"`
	Finished     time.Time               `json:"finished,omitzero"`
	Ports        []shapes.NetworkBinding `json:"ports,omitempty"`
	IP           string                  `json:"ip,omitempty"`
	Gone         bool                    `json:"gone,omitempty"`
}

func decodeRecord(data []byte) (record, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, err
	}
	if r.Version != recordVersion {
		return record{}, fmt.Errorf("record format %d, want %d", r.Version, recordVersion)
	}
	return r, nil
}

// cloneHead is a deep copy of r without its task: the saved head must not
// share the slices and pointers that the task's containers change in
// place. TestCloneHeadSharesNothing holds it to that for every field.
func (r *record) cloneHead() *record {
	c := *r
	c.Task = protocol.Task{}
	c.State.Containers = cloneEach(r.State.Containers, func(cs protocol.ContainerState) protocol.ContainerState {
		cs.ExitCode, cs.NetworkBindings = clonePtr(cs.ExitCode), cloneEach(cs.NetworkBindings, cloneBinding)
		cs.NetworkInterfaces = cloneEach(cs.NetworkInterfaces, func(n shapes.NetworkInterface) shapes.NetworkInterface { return n })
		return cs
	})
	c.Net = clonePtr(r.Net)
	c.State.Attachments = cloneEach(r.State.Attachments, cloneAttachment)
	c.Containers = cloneEach(r.Containers, func(cr containerRecord) containerRecord {
		cr.ExitCode, cr.Ports = clonePtr(cr.ExitCode), cloneEach(cr.Ports, cloneBinding)
		return cr
	})
	return &c
}

func cloneAttachment(a shapes.Attachment) shapes.Attachment {
	a.Details = cloneEach(a.Details, func(kv shapes.KeyValuePair) shapes.KeyValuePair { return kv })
	return a
}

func cloneBinding(b shapes.NetworkBinding) shapes.NetworkBinding {
	b.ContainerPort, b.HostPort = clonePtr(b.ContainerPort), clonePtr(b.HostPort)
	return b
}

// cloneEach copies s through clone, nil staying nil.
func cloneEach[T any](s []T, clone func(T) T) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(s))
	for i, v := range s {
		out[i] = clone(v)
	}
	return out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// sameHead reports whether records a and b, but for their tasks, encode
// alike. It may say no for two that do (equal times held differently),
// never yes for two that do not: a yes skips a write.
// TestSameHeadSeesEveryField holds it to that for every field.
func sameHead(a, b *record) bool {
	return a.Version == b.Version && a.Defined == b.Defined && a.Admitted == b.Admitted && a.Stopping == b.Stopping &&
		a.StopCode == b.StopCode && a.StopReason == b.StopReason && a.Orphan == b.Orphan && a.Status == b.Status &&
		a.Seq == b.Seq && a.Times == b.Times && sameTaskState(&a.State, &b.State) &&
		sameSlice(a.Containers, b.Containers, sameContainerRecord) && samePtr(a.Net, b.Net)
}

func sameTaskState(a, b *protocol.TaskState) bool {
	return a.Arn == b.Arn && a.LastStatus == b.LastStatus && a.HealthStatus == b.HealthStatus &&
		a.PullStartedAt == b.PullStartedAt && a.PullStoppedAt == b.PullStoppedAt && a.StartedAt == b.StartedAt &&
		a.StoppingAt == b.StoppingAt && a.StoppedAt == b.StoppedAt && a.StopCode == b.StopCode &&
		a.StoppedReason == b.StoppedReason && a.Seq == b.Seq && sameSlice(a.Containers, b.Containers, sameContainerState) &&
		sameSlice(a.Attachments, b.Attachments, sameAttachment)
}

func sameAttachment(a, b shapes.Attachment) bool {
	return a.Id == b.Id && a.Status == b.Status && a.Type == b.Type &&
		sameSlice(a.Details, b.Details, func(x, y shapes.KeyValuePair) bool { return x == y })
}

func sameContainerState(a, b protocol.ContainerState) bool {
	return a.Name == b.Name && a.RuntimeID == b.RuntimeID && a.Image == b.Image && a.ImageDigest == b.ImageDigest &&
		a.LastStatus == b.LastStatus && samePtr(a.ExitCode, b.ExitCode) && a.Reason == b.Reason &&
		a.HealthStatus == b.HealthStatus && sameSlice(a.NetworkBindings, b.NetworkBindings, sameBinding) &&
		sameSlice(a.NetworkInterfaces, b.NetworkInterfaces, func(x, y shapes.NetworkInterface) bool { return x == y })
}

func sameContainerRecord(a, b containerRecord) bool {
	return a.Name == b.Name && a.RuntimeID == b.RuntimeID && a.RuntimeName == b.RuntimeName && a.Phase == b.Phase &&
		a.Ran == b.Ran && samePtr(a.ExitCode, b.ExitCode) && a.Reason == b.Reason && a.Health == b.Health &&
		a.ImageID == b.ImageID && a.ImageDigest == b.ImageDigest && a.Restarts == b.Restarts && a.FastExits == b.FastExits &&
		a.RestartAt == b.RestartAt && a.Created == b.Created && a.FirstStarted == b.FirstStarted &&
		a.StartedAt == b.StartedAt && a.Finished == b.Finished && sameSlice(a.Ports, b.Ports, sameBinding) &&
		a.IP == b.IP && a.Gone == b.Gone
}

func sameBinding(a, b shapes.NetworkBinding) bool {
	return a.BindIP == b.BindIP && samePtr(a.ContainerPort, b.ContainerPort) && a.ContainerPortRange == b.ContainerPortRange &&
		samePtr(a.HostPort, b.HostPort) && a.HostPortRange == b.HostPortRange && a.Protocol == b.Protocol
}

// sameSlice tells nil from empty: one encodes as null, the other as [].
func sameSlice[T any](a, b []T, eq func(T, T) bool) bool {
	return (a == nil) == (b == nil) && slices.EqualFunc(a, b, eq)
}

func samePtr[T comparable](a, b *T) bool {
	return a == b || a != nil && b != nil && *a == *b
}
