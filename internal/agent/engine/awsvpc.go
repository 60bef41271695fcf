package engine

import (
	"context"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
)

// TaskNetwork gives awsvpc tasks a network namespace each: a holder
// container with its own address on the instance's task network, whose
// namespace the task's containers join (package daemonnet makes them).
type TaskNetwork interface {
	// Attach makes the task's holder, or returns the running one it has.
	// extraHosts are "name:ip" entries for the holder's hosts file, which
	// the task's containers share.
	Attach(ctx context.Context, taskArn string, extraHosts []string) (TaskNet, error)
	// Detach removes the task's holder; none is not an error.
	Detach(ctx context.Context, taskArn string) error
}

// TaskNet is an awsvpc task's namespace.
type TaskNet struct {
	// Mode is the Docker network mode of the task's containers,
	// "container:<holder ID>".
	Mode    string `json:"mode"`
	Address string `json:"address"`
	MAC     string `json:"mac,omitempty"`
}

// LabelNetworkOf marks an awsvpc task's holder with the task's ARN. It is
// not LabelTaskArn: the holder is not one of the task's containers.
const LabelNetworkOf = "com.capstan.network-of"

// Task-level operations on the task's namespace.
const (
	opNetAttach = "net-attach"
	opNetDetach = "net-detach"
)

// networkTimeout bounds a holder's creation or removal.
const networkTimeout = 2 * time.Minute

// awsvpc reports a task that runs in a namespace of its own.
func (t *task) awsvpc() bool { return t.hasDef && t.netMode == "awsvpc" }

// attachNet asks for the task's namespace; containers are created in it
// once it is there (pulls go on meanwhile).
func (t *task) attachNet(ctx context.Context) {
	t.netOp = true
	tn, arn, hosts := t.e.cfg.TaskNetwork, t.arn, t.e.cfg.ExtraHosts
	t.do(ctx, nil, opNetAttach, func(ctx context.Context) opResult {
		ctx, cancel := context.WithTimeout(ctx, networkTimeout)
		defer cancel()
		n, err := tn.Attach(ctx, arn, hosts)
		return opResult{net: n, err: err}
	})
}

// detachNet removes the namespace once every container has stopped.
func (t *task) detachNet(ctx context.Context) {
	t.netOp = true
	tn, arn := t.e.cfg.TaskNetwork, t.arn
	t.do(ctx, nil, opNetDetach, func(ctx context.Context) opResult {
		ctx, cancel := context.WithTimeout(ctx, networkTimeout)
		defer cancel()
		return opResult{err: tn.Detach(ctx, arn)}
	})
}

// onNetResult applies an attach or detach.
func (t *task) onNetResult(ctx context.Context, r opResult) {
	t.netOp = false
	switch r.kind {
	case opNetAttach:
		if r.err != nil {
			if ctx.Err() == nil && !t.stopping {
				t.fail(nil, "ResourceInitializationError: cannot set up the task's network namespace: "+r.err.Error())
			}
			return
		}
		n := r.net
		t.tnet = &n
		t.log.Info("task network namespace ready", "address", n.Address)
	case opNetDetach:
		if r.err != nil && ctx.Err() == nil {
			// The cleanup removes it again.
			t.log.Warn("cannot remove the task's network namespace holder", "err", r.err)
		}
		t.netReleased = true
	}
}

// ReasonNetworkLost stops an awsvpc task whose holder went: its containers
// are left in a namespace with no network.
const ReasonNetworkLost = "the task's network namespace holder exited; its containers have no network"

// onNetEvent stops the task when its holder dies or is removed while the
// task runs.
func (t *task) onNetEvent(ev runtime.Event) {
	if t.tnet == nil || t.netReleased || t.netOp || t.stopping || t.tnet.Mode != "container:"+ev.ContainerID {
		return
	}
	if ev.Action == runtime.EventDie || ev.Action == runtime.EventDestroy {
		t.log.Warn("task network namespace holder went; stopping the task", "holder", ev.ContainerID, "action", ev.Action)
		t.stop(StopEssentialContainerExited, ReasonNetworkLost)
	}
}

// netAttachment is the task's attachment as reported, nil for tasks not
// in awsvpc mode.
func (t *task) netAttachment() []shapes.Attachment {
	if !t.awsvpc() {
		return nil
	}
	status, addr, mac := protocol.AttachmentPrecreated, "", ""
	if t.tnet != nil {
		status, addr, mac = protocol.AttachmentAttached, t.tnet.Address, t.tnet.MAC
	}
	if t.netReleased || (!t.times.Stopped.IsZero() && t.tnet == nil) {
		status = protocol.AttachmentDeleted
	}
	return []shapes.Attachment{protocol.Attachment(t.arn, status, addr, mac)}
}

// netInterfaces is what each container of an awsvpc task shows of its
// address.
func (t *task) netInterfaces() []shapes.NetworkInterface {
	if !t.awsvpc() || t.tnet == nil {
		return nil
	}
	return []shapes.NetworkInterface{{AttachmentId: protocol.AttachmentID(t.arn), PrivateIpv4Address: t.tnet.Address}}
}
