package engine

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// onResult applies what an operation found.
func (t *task) onResult(ctx context.Context, r opResult) {
	c := r.c
	if c != nil {
		c.op, c.cancel = "", nil
	}
	now := t.e.now()
	switch r.kind {
	case opPull:
		if r.err != nil {
			if t.stopping || ctx.Err() != nil {
				return
			}
			t.e.stats.pullFailures.Add(1)
			t.fail(c, "CannotPullContainerError: "+r.err.Error())
			return
		}
		t.e.stats.pulls.Add(1)
		c.imageID, c.digest = r.img.ID, digestOf(r.img)
		if c.phase < phasePulled {
			c.phase = phasePulled
		}
		if t.pullsDone() {
			t.times.PullStopped = now
		}
	case opCreate:
		if r.err != nil {
			if ctx.Err() != nil {
				return
			}
			t.failContainer(c, "CannotCreateContainerError: "+r.err.Error())
			return
		}
		t.adopt(c, r.id)
		c.createdAt = now
		if c.phase < phaseCreated {
			c.phase = phaseCreated
		}
	case opStart:
		restart := c.phase == phaseRunning
		if r.inspected && !r.rc.StartedAt.IsZero() && (c.startedAt.IsZero() || r.rc.StartedAt.After(c.startedAt)) {
			// It started (even if the call said otherwise, e.g. timed out).
			if restart {
				c.restarts++
				t.e.stats.restarts.Add(1)
				c.restartAt = time.Time{}
			}
			c.phase = phaseCreated // let observe record the start
			c.lastOutput = r.output
			t.observe(c, r.rc)
			return
		}
		if errors.Is(r.ierr, runtime.ErrNotFound) || errors.Is(r.err, runtime.ErrNotFound) {
			t.vanished(c)
			return
		}
		if ctx.Err() != nil {
			return
		}
		msg := "CannotStartContainerError: " + errText(r.err, r.ierr)
		if restart && !t.stopping {
			// Count a failed restart as a fast exit and back off.
			_, delay, fast := restartDecision(c.def.RestartPolicy, 0, 0, c.fast)
			c.fast, c.restartAt, c.reason = fast, now.Add(delay), msg
			t.log.Warn("container restart failed", "container", c.name, "err", msg, "retryIn", delay)
			return
		}
		t.failContainer(c, msg)
	case opStop:
		switch {
		case r.inspected && r.rc.State != runtime.StateRunning && r.rc.State != runtime.StatePaused && r.rc.State != runtime.StateRestarting:
			t.observe(c, r.rc)
			if c.phase == phaseRunning && c.restartAt.IsZero() {
				// Not exited by its own times yet: look again later.
				c.failures++
				c.retryAt = now.Add(backoff(c.failures))
			} else {
				c.failures, c.retryAt = 0, time.Time{}
			}
		case errors.Is(r.ierr, runtime.ErrNotFound):
			t.vanished(c)
		default:
			c.failures++
			c.retryAt = now.Add(backoff(c.failures))
			if ctx.Err() == nil {
				t.log.Warn("cannot stop container; retrying", "container", c.name, "err", errText(r.err, r.ierr), "in", backoff(c.failures))
			}
		}
	case opInspect:
		switch {
		case r.err == nil:
			c.syncing, c.failures, c.retryAt = false, 0, time.Time{}
			c.lastOutput = r.output
			t.observe(c, r.rc)
		case errors.Is(r.err, runtime.ErrNotFound):
			c.syncing = false
			t.vanished(c)
		default:
			c.failures++
			c.retryAt, c.needInspect = now.Add(backoff(c.failures)), true
		}
	case opNetAttach, opNetDetach:
		t.onNetResult(ctx, r)
	case opCleanup:
		t.cleaning = false
		if r.err != nil {
			if ctx.Err() == nil {
				t.log.Warn("task cleanup failed; retrying", "err", r.err)
			}
			t.cleanupAt = now.Add(time.Minute)
			return
		}
		if err := t.e.cfg.Store.DeleteTask(t.arn); err != nil {
			t.log.Error("cannot delete task record", "err", err)
		}
		var ids []string
		for _, c := range t.cs {
			if c.id != "" {
				ids = append(ids, c.id)
			}
		}
		t.e.forget(t, ids)
		t.done = true
		t.log.Info("task cleaned up")
	}
}

func errText(errs ...error) string {
	for _, err := range errs {
		if err != nil {
			return err.Error()
		}
	}
	return "unknown error"
}

// failContainer handles a container that could not be created or started:
// an essential one stops the task, another just stops.
func (t *task) failContainer(c *ctr, reason string) {
	c.reason = reason
	if c.essential {
		t.fail(c, reason)
		return
	}
	if c.phase < phaseStopped && !t.stopping {
		t.log.Warn("non-essential container failed", "container", c.name, "reason", reason)
	}
	c.phase = phaseStopped
}

func backoff(failures int) time.Duration {
	d := time.Second
	for i := 1; i < failures && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

func digestOf(img runtime.Image) string {
	for _, d := range img.RepoDigests {
		if _, digest, ok := strings.Cut(d, "@"); ok {
			return digest
		}
	}
	return ""
}

func (t *task) pullsDone() bool {
	for _, c := range t.cs {
		if c.phase == phaseNone && c.op == opPull {
			return false
		}
	}
	return true
}
