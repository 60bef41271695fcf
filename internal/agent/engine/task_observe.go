package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/runtime"
)

func (t *task) onEvent(ev runtime.Event) {
	if ev.Labels[LabelTaskArn] == "" && ev.Labels[LabelNetworkOf] != "" {
		t.onNetEvent(ev)
		return
	}
	c := t.byID(ev.ContainerID)
	if c == nil {
		c = t.container(ev.Labels[LabelContainerName])
		if c == nil || c.id != "" {
			return // another generation of the container, or not ours
		}
		if c.op == opCreate {
			return // the create result will say
		}
		t.adopt(c, ev.ContainerID)
	}
	switch ev.Action {
	case runtime.EventCreate:
	case runtime.EventHealth:
		if c.hasHealthCheck() && c.phase == phaseRunning && c.restartAt.IsZero() {
			c.health = healthOf(ev.Health)
		}
	default:
		c.needInspect = true
	}
}

// adopt records that runtime container id is c.
func (t *task) adopt(c *ctr, id string) {
	c.id, c.gone = id, false
	t.e.index(id, t)
}

func (t *task) onObserved(cs []runtime.Container) {
	seen := map[string]bool{}
	for _, rc := range cs {
		seen[rc.ID] = true
		c := t.byID(rc.ID)
		if c == nil {
			name := rc.Labels[LabelContainerName]
			c = t.container(name)
			switch {
			case c == nil && !t.hasDef && name != "":
				c = &ctr{name: name}
				t.cs = append(t.cs, c)
			case c == nil || c.op == opCreate:
				continue
			case c.id != "" && c.id != rc.ID:
				// Names are unique per task and container, so this is
				// a leftover; the task's cleanup removes it.
				t.log.Warn("second container for one task container", "container", name, "id", rc.ID, "kept", c.id)
				continue
			}
			t.adopt(c, rc.ID)
		}
		if c.op != "" {
			continue // the op's own result is fresher
		}
		if failed(rc) && c.phase == phaseRunning && c.restartAt.IsZero() {
			c.needInspect = true // an inspect also reads what it printed last
			continue
		}
		c.syncing = false
		t.observe(c, rc)
	}
	for _, c := range t.cs {
		if c.id != "" && !seen[c.id] && !c.gone && c.op == "" {
			c.needInspect = true // vanished, or listed just before it was made
		}
		if c.id == "" && c.op == "" {
			c.syncing = false
		}
	}
}

// healthOf maps a runtime health status to ECS terms.
func healthOf(h string) string {
	switch h {
	case runtime.HealthHealthy:
		return HealthHealthy
	case runtime.HealthUnhealthy:
		return HealthUnhealthy
	}
	return HealthUnknown
}

// observe takes in the runtime's view of a container. A run is known by
// its start time: a view of an earlier run than the one tracked is stale
// (a listing taken before an exit or a restart) and changes nothing. Phases
// only move forward, except that a container started again behind the
// engine's back is tracked again until its task has finished.
func (t *task) observe(c *ctr, rc runtime.Container) {
	now := t.e.now()
	if rc.Name != "" {
		c.runtimeName = rc.Name
	}
	if rc.ImageID != "" {
		c.imageID = rc.ImageID
	}
	if rc.Image != "" {
		c.image = rc.Image
	}
	if !rc.CreatedAt.IsZero() {
		c.createdAt = rc.CreatedAt
	}
	if rc.IPAddress != "" {
		c.ip = rc.IPAddress
	}
	stale := !rc.StartedAt.IsZero() && rc.StartedAt.Before(c.startedAt)
	newRun := !rc.StartedAt.IsZero() && rc.StartedAt.After(c.startedAt)
	switch rc.State {
	case runtime.StateRunning, runtime.StatePaused, runtime.StateRestarting:
		switch {
		case stale:
			return
		case c.phase == phaseStopped || !c.restartAt.IsZero():
			// Its last run ended; only a new one counts.
			if !newRun {
				return
			}
			if !t.times.Stopped.IsZero() {
				// Started late (a start that timed out) or by hand
				// after the task ended: stop it, report nothing.
				c.lateRun = true
				return
			}
			c.phase, c.restartAt = phaseCreated, time.Time{}
		}
		if c.phase < phaseRunning {
			c.phase, c.started = phaseRunning, true
			c.startedAt = orNow(rc.StartedAt, now)
			if c.firstStartedAt.IsZero() {
				c.firstStartedAt = c.startedAt
			}
		}
		c.ports = t.bindings(c, rc)
		if c.hasHealthCheck() {
			c.health = healthOf(rc.Health)
		}
	case runtime.StateCreated:
		if c.phase < phaseCreated {
			c.phase = phaseCreated
		}
	case runtime.StateExited, runtime.StateDead:
		if rc.StartedAt.IsZero() {
			// Never ran: a start that failed; the start result reports it.
			if c.phase < phaseCreated {
				c.phase = phaseCreated
			}
			return
		}
		if stale {
			return
		}
		if c.phase < phaseRunning || (c.phase == phaseRunning && newRun) {
			c.phase, c.started, c.restartAt = phaseRunning, true, time.Time{}
			c.startedAt = rc.StartedAt
			if c.firstStartedAt.IsZero() {
				c.firstStartedAt = c.startedAt
			}
		}
		// The engine's clock and the runtime's may disagree, and a fast
		// exit can even be stamped before its start: only the run counts.
		if c.phase == phaseRunning && c.restartAt.IsZero() {
			t.exited(c, rc)
		}
	}
}

// bindings reports the host ports a container got.
func (t *task) bindings(c *ctr, rc runtime.Container) []shapes.NetworkBinding {
	var out []shapes.NetworkBinding
	if t.netMode == "host" && c.def != nil {
		for _, pm := range c.def.PortMappings {
			if pm.ContainerPort == nil {
				continue
			}
			p := *pm.ContainerPort
			out = append(out, shapes.NetworkBinding{BindIP: "0.0.0.0", ContainerPort: &p, HostPort: &p, Protocol: protocolOf(pm.Protocol)})
		}
		return out
	}
	for _, b := range rc.Ports {
		if strings.Contains(b.HostIP, ":") {
			continue // IPv6 duplicates of the IPv4 binding, as ECS leaves them out
		}
		ip := b.HostIP
		if ip == "" {
			ip = "0.0.0.0"
		}
		cp, hp := int32(b.ContainerPort), int32(b.HostPort)
		out = append(out, shapes.NetworkBinding{BindIP: ip, ContainerPort: &cp, HostPort: &hp, Protocol: protocolOf(b.Protocol)})
	}
	return out
}

// exited handles a container that ran and stopped: restart it under its
// policy, or stop it for good and, if it was essential, the task.
func (t *task) exited(c *ctr, rc runtime.Container) {
	now := t.e.now()
	code := rc.ExitCode
	c.exitCode = &code
	c.finishedAt = orNow(rc.FinishedAt, now)
	c.ports = nil
	if c.hasHealthCheck() {
		c.health = HealthUnknown
	}
	switch {
	case rc.OOMKilled:
		c.reason = ReasonOOM
	case rc.Error != "":
		c.reason = rc.Error
	case code != 0 && c.lastOutput != "" && !t.stopping:
		// What a failing process printed last usually says why (a port
		// already bound by another daemon); otherwise only "1" is known.
		c.reason = fmt.Sprintf("exited with code %d; last output: %s", code, c.lastOutput)
	default:
		c.reason = ""
	}
	if !t.stopping && c.def != nil {
		uptime := c.finishedAt.Sub(orNow(rc.StartedAt, c.startedAt))
		if restart, delay, fast := restartDecision(c.def.RestartPolicy, code, uptime, c.fast); restart {
			c.fast, c.restartAt = fast, now.Add(delay)
			t.log.Info("container exited; restarting", "container", c.name, "exitCode", code, "ran", uptime.Round(time.Millisecond), "in", delay)
			return
		}
	}
	c.phase = phaseStopped
	t.log.Info("container exited", "container", c.name, "exitCode", code, "essential", c.essential)
	if c.essential {
		t.stop(StopEssentialContainerExited, ReasonEssentialExited)
	}
}

// vanished handles a container that no longer exists in the runtime.
func (t *task) vanished(c *ctr) {
	c.gone = true
	if c.phase == phaseStopped {
		return
	}
	t.e.stats.vanished.Add(1)
	t.log.Warn("container vanished", "container", c.name, "id", c.id)
	c.phase, c.reason, c.restartAt, c.ports = phaseStopped, ReasonVanished, time.Time{}, nil
	if c.hasHealthCheck() {
		c.health = HealthUnknown
	}
	if c.essential {
		t.stop(StopEssentialContainerExited, ReasonEssentialExited)
	}
}

func orNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}
