package engine

import (
	"context"
	"fmt"
	"path"
	"time"
)

// step moves the task towards its desired status and returns when it
// next needs to look again (zero: only on a message).
func (t *task) step(ctx context.Context) time.Time {
	if t.done {
		return time.Time{}
	}
	now := t.e.now()
	var next time.Time
	for _, c := range t.cs {
		if c.lateRun && c.op == "" {
			c.lateRun = false
			t.stopContainer(ctx, c)
		}
		switch {
		case c.op != "" || !c.needInspect || c.id == "":
		case now.Before(c.retryAt):
			next = earliest(next, c.retryAt)
		default:
			c.needInspect = false
			t.inspect(ctx, c)
		}
	}
	switch {
	case !t.times.Stopped.IsZero():
		return earliest(next, t.stepCleanup(ctx, now))
	case t.stopping:
	case !t.hasDef:
		return next // known from labels only: wait for the desired set
	case !t.admitted:
		if !t.queued {
			t.firstPass = t.seq == 0 // never reported
			t.queued = true
			t.e.requestAdmission(t)
		}
		return next
	default:
		next = earliest(next, t.stepRun(ctx, now))
	}
	if t.stopping {
		next = earliest(next, t.stepStop(ctx, now))
	}
	return next
}

// stepRun starts what can start.
func (t *task) stepRun(ctx context.Context, now time.Time) time.Time {
	var next time.Time
	if t.awsvpc() && t.tnet == nil && !t.netOp && !t.stopping {
		t.attachNet(ctx)
	}
	for i, c := range t.cs {
		if c.op != "" || c.syncing || t.stopping {
			continue
		}
		switch c.phase {
		case phaseNone:
			if t.times.PullStarted.IsZero() {
				t.times.PullStarted = now
			}
			t.pull(ctx, c)
		case phasePulled, phaseCreated:
			ready, failed, deadline := t.depsReady(i, now)
			switch {
			case failed != "":
				t.fail(c, fmt.Sprintf("DependencyError: container %s: %s", c.name, failed))
				return next
			case !ready:
				next = earliest(next, deadline)
			case c.phase == phasePulled && t.awsvpc() && t.tnet == nil:
				// Created in the task's namespace, once it is there.
			case c.phase == phasePulled:
				t.create(ctx, i)
			default:
				t.start(ctx, c)
			}
		case phaseRunning:
			if c.restartAt.IsZero() {
				continue
			}
			if now.Before(c.restartAt) {
				next = earliest(next, c.restartAt)
				continue
			}
			t.start(ctx, c)
		}
	}
	return next
}

// depsReady resolves container i's dependencies.
func (t *task) depsReady(i int, now time.Time) (ready bool, failed string, deadline time.Time) {
	ready = true
	for _, d := range t.deps[i] {
		dc := t.cs[d.container]
		met, why := resolve(d.condition, depState{
			name:      dc.name,
			phase:     dc.phase,
			started:   dc.started,
			exitCode:  dc.exitCode,
			health:    dc.health,
			restart:   !dc.restartAt.IsZero(),
			startedAt: dc.firstStartedAt,
		})
		if why != "" {
			return false, why, time.Time{}
		}
		if met {
			continue
		}
		ready = false
		dl := waitDeadline(d.condition, dc.firstStartedAt, startTimeout(dc.def, t.e.cfg.StartTimeout))
		if !dl.IsZero() && !now.Before(dl) {
			return false, fmt.Sprintf("dependency %s did not reach %s within %s", dc.name, d.condition, dl.Sub(dc.firstStartedAt)), time.Time{}
		}
		deadline = earliest(deadline, dl)
	}
	return ready, "", deadline
}

// stepStop stops containers, dependents first, and finishes the task when
// all have stopped.
func (t *task) stepStop(ctx context.Context, now time.Time) time.Time {
	var next time.Time
	for _, c := range t.cs {
		if c.op != "" || c.syncing {
			continue
		}
		switch {
		case c.phase < phaseRunning:
			c.phase = phaseStopped // never started
		case c.phase == phaseRunning && !c.restartAt.IsZero():
			c.phase, c.restartAt = phaseStopped, time.Time{} // exited, waiting for a restart
		}
	}
	busy := t.netOp
	for i, c := range t.cs {
		if c.op != "" || c.syncing {
			busy = true
			continue
		}
		if c.phase != phaseRunning {
			continue
		}
		busy = true
		if t.blockedStop(i) {
			continue
		}
		if now.Before(c.retryAt) {
			next = earliest(next, c.retryAt)
			continue
		}
		t.stopContainer(ctx, c)
	}
	if !busy && t.tnet != nil && !t.netReleased {
		// The namespace goes once nothing runs in it.
		t.detachNet(ctx)
		return next
	}
	if !busy {
		t.finish(now)
		return t.cleanupAt
	}
	return next
}

// blockedStop reports whether containers that depend on container i still
// run.
func (t *task) blockedStop(i int) bool {
	if i >= len(t.blockers) {
		return false
	}
	for _, j := range t.blockers[i] {
		if c := t.cs[j]; c.phase != phaseStopped || c.op != "" {
			return true
		}
	}
	return false
}

// finish marks the task stopped and frees its resources.
func (t *task) finish(now time.Time) {
	t.times.Stopped = now
	t.cleanupAt = now.Add(t.e.cfg.CleanupWait)
	if t.orphan {
		t.cleanupAt = now
	}
	t.e.ledger.Release(t.arn)
	t.e.signal()
	t.log.Info("task stopped", "reason", t.stopReason)
}

// stepCleanup removes a stopped task's containers once the wait is over and
// its STOPPED state has been reported.
func (t *task) stepCleanup(ctx context.Context, now time.Time) time.Time {
	if t.cleaning {
		return time.Time{}
	}
	if t.state.LastStatus != StatusStopped {
		return now // report first
	}
	if now.Before(t.cleanupAt) {
		return t.cleanupAt
	}
	for _, c := range t.cs {
		if c.op != "" {
			return time.Time{}
		}
	}
	t.cleaning = true
	var ids []string
	for _, c := range t.cs {
		if c.id != "" && !c.gone {
			ids = append(ids, c.id)
		}
	}
	var dir string
	if t.e.cfg.VolumeDir != "" {
		dir = path.Join(t.e.cfg.VolumeDir, "tasks", sanitize(taskID(t.arn)))
	}
	// Again for awsvpc tasks, in case the detach at the stop failed, and
	// for placeholders, which may have had a namespace.
	tn := t.e.cfg.TaskNetwork
	if t.hasDef && !t.awsvpc() {
		tn = nil
	}
	t.do(ctx, nil, opCleanup, func(ctx context.Context) opResult {
		err := t.e.removeTask(ctx, t.arn, ids, dir)
		if err == nil && tn != nil {
			err = tn.Detach(ctx, t.arn)
		}
		return opResult{err: err}
	})
	return time.Time{}
}

func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}
