package engine

import (
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (t *task) onDesired(m msgDesired) {
	if m.absent {
		if !t.hasDef {
			t.orphan = true
		}
		t.stop("", ReasonNotDesired)
		return
	}
	d := m.task
	def := t.desired.Definition
	t.desired, t.desiredJSON, t.savedHead = d, nil, nil
	if t.hasDef {
		t.desired.Definition = def // a task's definition never changes
	} else if len(d.Definition.ContainerDefinitions) > 0 {
		t.define(d)
		if code, reason := checkTask(&d, &t.def, &t.e.cfg); code != "" {
			t.stop(code, reason)
		}
		// Containers adopted from labels may have exited meanwhile.
		for _, c := range t.cs {
			if c.essential && c.phase == phaseStopped {
				t.stop(StopEssentialContainerExited, ReasonEssentialExited)
			}
		}
	}
	if d.DesiredStatus == StatusStopped {
		t.stop(d.StopCode, d.StoppedReason)
	}
	if !t.hasDef && !t.stopping {
		t.stop(StopTaskFailedToStart, "the task arrived without a task definition")
	}
}

// define sets the definition the task runs and lays out its containers,
// keeping any already known from labels.
func (t *task) define(d protocol.Task) {
	t.def = applyOverrides(d.Definition, d.Overrides)
	if d.Kind != protocol.KindDaemon && !d.HostAccess {
		var removed []string
		if t.def, removed = taskdef.WithoutHostAccess(t.def); len(removed) > 0 {
			t.e.log.Warn("task runs without the host access the server did not grant", "task", t.arn, "removed", removed)
		}
	}
	t.hasDef = true
	t.admitKind = d.Kind
	t.need = taskNeed(&t.def)
	t.netMode, _ = dockerNetworkMode(t.def.NetworkMode, t.e.cfg.DaemonNetworkMode)
	t.volumes = volumePaths(&t.def, t.arn, t.e.cfg.VolumeDir)
	t.holder = namespaceHolder(&t.def)
	t.deps = dependencies(&t.def, t.holder)
	t.blockers = stopBlockers(t.deps)
	t.shares = cpuShares(&t.def)
	t.specViews = nil
	cs := make([]*ctr, len(t.def.ContainerDefinitions))
	for i := range t.def.ContainerDefinitions {
		cd := &t.def.ContainerDefinitions[i]
		c := t.container(cd.Name)
		if c == nil {
			c = &ctr{name: cd.Name}
		} else {
			// Known from its labels: it exists, so the task was admitted.
			t.admitted = true
		}
		c.def = cd
		c.essential = cd.Essential == nil || *cd.Essential
		cs[i] = c
	}
	t.cs = cs
	if t.admitted && !t.e.ledger.Holds(t.arn) {
		t.e.ledger.Force(t.arn, t.need)
	}
}

// stop makes the task desired STOPPED; the first reason wins.
func (t *task) stop(code, reason string) {
	if t.stopping {
		return
	}
	t.stopping, t.stopCode, t.stopReason = true, code, reason
	t.times.Stopping = t.e.now()
	if t.queued {
		t.queued, t.firstPass = false, false
		t.e.withdraw(t)
	}
	if t.admitted {
		t.e.ledger.Releasing(t.arn)
		t.e.signal()
	}
	for _, c := range t.cs {
		if c.op == opPull && c.cancel != nil {
			c.cancel() // nothing will use the image
		}
	}
	t.log.Info("task stopping", "code", code, "reason", reason)
}

// fail stops the task because it cannot run.
func (t *task) fail(c *ctr, reason string) {
	if c != nil && c.reason == "" {
		c.reason = reason
	}
	t.stop(StopTaskFailedToStart, reason)
}

func (t *task) onAdmission(err error) {
	t.queued = false
	switch {
	case err != nil:
		t.log.Info("task refused", "reason", err)
		t.stop(StopTaskFailedToStart, err.Error())
	case t.stopping:
		t.e.ledger.Release(t.arn)
		t.e.signal()
	default:
		t.admitted, t.waiting = true, ""
	}
}

// desiredKey is what tells two of a task's desired entries apart: the
// server changes Version with anything it changes, and the definition,
// overrides and tags are fixed at creation.
type desiredKey struct {
	version              int64
	status, code, reason string
}

func desiredKeyOf(d *protocol.Task) desiredKey {
	return desiredKey{version: d.Version, status: d.DesiredStatus, code: d.StopCode, reason: d.StoppedReason}
}
