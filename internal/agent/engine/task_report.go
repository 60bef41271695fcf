package engine

import (
	"reflect"
	"slices"

	"github.com/capstanhq/capstan/internal/protocol"
)

// views summarizes the containers for the status rules.
func (t *task) views() []cview {
	out := make([]cview, len(t.cs))
	for i, c := range t.cs {
		out[i] = cview{essential: c.essential, phase: c.phase, health: c.health}
	}
	return out
}

// buildState is the task's state in ECS terms.
func (t *task) buildState() protocol.TaskState {
	vs := t.views()
	status := taskStatus(t.status, t.admitted, t.stopping, vs)
	if status == StatusStopped && t.times.Stopped.IsZero() {
		status = StatusStopping
	}
	if status == StatusRunning && t.times.Started.IsZero() {
		t.times.Started = t.e.now()
	}
	t.status = status
	st := protocol.TaskState{
		Arn:           t.arn,
		LastStatus:    status,
		HealthStatus:  taskHealth(vs),
		PullStartedAt: t.times.PullStarted,
		PullStoppedAt: t.times.PullStopped,
		StartedAt:     t.times.Started,
		Containers:    make([]protocol.ContainerState, len(t.cs)),
	}
	if t.stopping {
		st.StoppingAt, st.StopCode, st.StoppedReason = t.times.Stopping, t.stopCode, t.stopReason
	}
	st.StoppedAt = t.times.Stopped
	st.Attachments = t.netAttachment()
	nis := t.netInterfaces()
	for i, c := range t.cs {
		cs := protocol.ContainerState{
			Name:         c.name,
			RuntimeID:    c.id,
			ImageDigest:  c.digest,
			LastStatus:   containerStatus(c.phase),
			HealthStatus: c.health,
		}
		cs.Image = c.image
		if c.def != nil {
			cs.Image = c.def.Image
		}
		switch c.phase {
		case phaseStopped:
			cs.ExitCode, cs.Reason = c.exitCode, c.reason
		case phaseRunning:
			cs.NetworkBindings = c.ports
		default:
			cs.Reason = c.reason
		}
		cs.NetworkInterfaces = nis
		st.Containers[i] = cs
	}
	return st
}

// report emits the task's state if it changed, after persisting it.
func (t *task) report() {
	// A new task would report PROVISIONING and, once the admission pass
	// answers a moment later, PENDING: two reports, each a record written
	// here and on the server, ahead of its start. It waits for the answer.
	if t.firstPass {
		return
	}
	st := t.buildState()
	emit := t.hasDef || t.stopping
	if emit {
		prev := t.state
		prev.Seq, st.Seq = 0, 0
		emit = t.announce || !(reflect.DeepEqual(prev, st) || interimOnly(prev, st))
	}
	if emit {
		t.seq++
		st.Seq = t.seq
		t.state, t.announce = st, false
	}
	if !t.done {
		t.persist()
	}
	// Publish first: whoever reads a state on Changes finds it (or a
	// newer one) in Snapshot and Task.
	t.publish()
	if emit {
		t.e.out.push(st)
	}
}

// interimOnly reports whether a pending task changed only in what is
// recorded on the way to its start (pull times, container IDs and image
// digests). That goes with the next report: each report is a write on the
// server, and these would land while the engine starts the container.
func interimOnly(prev, st protocol.TaskState) bool {
	if prev.LastStatus != StatusPending || st.LastStatus != StatusPending || len(prev.Containers) != len(st.Containers) {
		return false
	}
	prev.PullStartedAt, prev.PullStoppedAt = st.PullStartedAt, st.PullStoppedAt
	prev.Containers = slices.Clone(prev.Containers)
	for i := range prev.Containers {
		prev.Containers[i].RuntimeID, prev.Containers[i].ImageDigest = st.Containers[i].RuntimeID, st.Containers[i].ImageDigest
	}
	return reflect.DeepEqual(prev, st)
}

// specView is what publish shows of a container's spec. Its maps and slice
// are shared by every view published and must not be changed.
type specView struct {
	labels                    map[string]string
	cpuShares                 int64
	memoryMiB, reservationMiB int
	logDriver                 string
	logOptions                map[string]string
	volumes                   []VolumeInfo
}

// specView returns container i's, building them all on the first call
// after define: a spec depends only on the definition, the task's ARN and
// the engine's configuration.
func (t *task) specView(i int) specView {
	if t.specViews == nil {
		cfg := t.e.cfg
		cfg.MetadataURI = nil // not shown; no need to ask
		t.specViews = make([]specView, len(t.def.ContainerDefinitions))
		for j := range t.specViews {
			spec := buildSpec(specInput{cfg: &cfg, task: &t.desired, def: &t.def, index: j, networkMode: t.netMode, volumes: t.volumes, cpuShares: t.shares[j]})
			v := specView{labels: spec.Labels, cpuShares: spec.CPUShares, memoryMiB: int(spec.MemoryLimit >> 20),
				reservationMiB: int(spec.MemoryReservation >> 20), logDriver: spec.LogDriver, logOptions: spec.LogOptions}
			for _, m := range spec.Mounts {
				v.volumes = append(v.volumes, VolumeInfo{Source: m.Source, Destination: m.Target, ReadOnly: m.ReadOnly})
			}
			t.specViews[j] = v
		}
	}
	return t.specViews[i]
}

// publish makes the task's picture visible to other goroutines.
func (t *task) publish() {
	info := TaskInfo{
		Arn:           t.arn,
		Cluster:       t.desired.ClusterArn,
		Kind:          t.desired.Kind,
		Task:          t.desired,
		Definition:    t.def,
		DesiredStatus: StatusRunning,
		State:         t.state,
		CPU:           t.need.CPU,
		MemoryMiB:     t.need.MemoryMiB,
		NetworkMode:   t.netMode,
		Waiting:       t.waiting,
	}
	if info.Cluster == "" {
		info.Cluster = t.e.cfg.Cluster
	}
	if t.stopping {
		info.DesiredStatus = StatusStopped
	}
	for i, c := range t.cs {
		ci := ContainerInfo{
			Name:          c.name,
			RuntimeID:     c.id,
			RuntimeName:   c.runtimeName,
			ImageID:       c.imageID,
			ImageDigest:   c.digest,
			Essential:     c.essential,
			DesiredStatus: info.DesiredStatus,
			KnownStatus:   containerStatus(c.phase),
			Reason:        c.reason,
			Health:        c.health,
			Ports:         c.ports,
			IPAddress:     c.ip,
			CreatedAt:     c.createdAt,
			StartedAt:     c.startedAt,
			FinishedAt:    c.finishedAt,
			RestartCount:  c.restarts,
		}
		if c.phase == phaseStopped || !c.restartAt.IsZero() {
			ci.ExitCode = c.exitCode
		}
		if t.tnet != nil && ci.IPAddress == "" {
			ci.IPAddress = t.tnet.Address // joined: the holder has the address
		}
		ci.Image = c.image
		if d := c.def; d != nil {
			ci.Image = d.Image
			v := t.specView(i)
			ci.Labels, ci.CPUShares, ci.MemoryMiB, ci.MemoryReservationMiB = v.labels, v.cpuShares, v.memoryMiB, v.reservationMiB
			ci.LogDriver, ci.LogOptions, ci.Volumes = v.logDriver, v.logOptions, v.volumes
		}
		info.Containers = append(info.Containers, ci)
	}
	t.view.Store(&view{info: info, reported: t.state.Seq > 0})
}
