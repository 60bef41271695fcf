package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/agent/resources"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
)

// Messages a task's goroutine receives.
type (
	msgDesired struct {
		task   protocol.Task
		absent bool // not in the desired set
	}
	msgAdmission struct{ err error } // nil: admitted
	msgWaiting   struct{ err error }
	msgEvent     struct{ ev runtime.Event }
	msgObserved  struct{ cs []runtime.Container } // every container labelled for the task
	opResult     struct {
		c         *ctr // nil for task-level ops
		kind      string
		img       runtime.Image
		id        string
		rc        runtime.Container
		inspected bool   // rc is fresh
		ierr      error  // why inspecting failed
		output    string // last output line of a container that failed
		err       error
	}
)

// Operation kinds; each runs in its own goroutine and reports back.
const (
	opPull    = "pull"
	opCreate  = "create"
	opStart   = "start"
	opStop    = "stop"
	opInspect = "inspect"
	opCleanup = "cleanup"
)

// Timeouts of runtime calls the engine has no setting for.
const (
	inspectTimeout = 30 * time.Second
	removeTimeout  = 2 * time.Minute
	stopGrace      = 2 * time.Minute // beyond the stop timeout, for a slow engine
	pullTimeout    = 2 * time.Hour
	retryMax       = 30 * time.Second
)

// ctr is one container of a task, owned by the task's goroutine.
type ctr struct {
	name      string
	def       *shapes.ContainerDefinition // nil when known only from labels
	essential bool

	phase       phase
	op          string // in flight
	cancel      context.CancelFunc
	syncing     bool // restored: act only once its runtime state is known
	needInspect bool
	lateRun     bool // runs though its task has stopped
	gone        bool // no longer exists in the runtime

	id, runtimeName string
	image           string // as the runtime names it, for containers known by labels
	imageID, digest string
	started         bool
	exitCode        *int
	reason          string
	lastOutput      string // last line it printed before exiting non-zero
	health          string
	createdAt       time.Time
	firstStartedAt  time.Time
	startedAt       time.Time
	finishedAt      time.Time
	restarts, fast  int
	restartAt       time.Time // waiting to be restarted
	retryAt         time.Time // a failed runtime call is retried then
	failures        int
	ports           []shapes.NetworkBinding
	ip              string
}

func (c *ctr) hasHealthCheck() bool {
	return c.def != nil && c.def.HealthCheck != nil && len(c.def.HealthCheck.Command) > 0 && c.def.HealthCheck.Command[0] != "NONE"
}

// task is one task: a goroutine (run) owns everything below the inbox.
type task struct {
	e   *Engine
	arn string
	log *slog.Logger

	mu    sync.Mutex
	inbox []any
	wake  chan struct{}

	view atomic.Pointer[view]

	// Set before the task is queued for admission, then fixed; the engine
	// reads them under its lock.
	admitKind string
	need      resources.Need

	desired  protocol.Task
	hasDef   bool
	def      shapes.TaskDefinition
	netMode  string
	volumes  map[string]string
	deps     [][]dep
	blockers [][]int
	holder   int
	shares   []int64
	cs       []*ctr
	// specViews are the containers' spec-derived details that publish
	// shows, built once per definition (nil until then): every report
	// publishes, and rebuilding the specs each time was a third of it.
	specViews []specView

	status     string
	admitted   bool
	queued     bool
	waiting    string
	stopping   bool
	stopCode   string
	stopReason string
	orphan     bool
	times      taskTimes
	state      protocol.TaskState // last reported
	seq        uint64
	announce   bool // report once even if unchanged (after a restore)
	saved      []byte
	// savedHead is the saved record but its task, deep-copied, when the
	// saved record holds desiredJSON as it is: a step that changed neither
	// (most steps) is known to write nothing without encoding a record.
	savedHead *record
	// desiredJSON is desired encoded for the record; nil after desired
	// changes. The definition is most of a record.
	desiredJSON []byte
	// posted is what the engine last handed the task of its desired entry
	// (the engine's lock guards it).
	posted    desiredKey
	cleaning  bool
	cleanupAt time.Time
	done      bool
	ops       sync.WaitGroup
}

func (e *Engine) taskBase(arn string) *task {
	return &task{
		e:      e,
		arn:    arn,
		log:    e.log.With("task", arn),
		wake:   make(chan struct{}, 1),
		holder: -1,
		status: StatusProvisioning,
	}
}

// newTask makes a task the server just asked for; its goroutine applies the
// desired state.
func (e *Engine) newTask(d protocol.Task) *task {
	t := e.taskBase(d.Arn)
	t.desired = d
	t.posted = desiredKeyOf(&d)
	t.publish()
	t.post(msgDesired{task: d})
	return t
}

// placeholderTask stands for containers whose task has no record: it keeps
// them as they are until a desired set supplies the definition or says the
// task is not wanted.
func (e *Engine) placeholderTask(arn string, cs []runtime.Container) *task {
	t := e.taskBase(arn)
	// The lost record held the last sequence number: start above any the
	// server can have seen.
	t.seq = uint64(e.now().UnixMicro())
	t.admitted = true
	for _, rc := range cs {
		name := rc.Labels[LabelContainerName]
		if name == "" || slices.ContainsFunc(t.cs, func(c *ctr) bool { return c.name == name }) {
			continue
		}
		t.cs = append(t.cs, &ctr{name: name, id: rc.ID, phase: phaseCreated, syncing: true})
	}
	t.publish()
	t.post(msgObserved{cs: cs})
	return t
}

// restoredTask rebuilds a task from its record and the containers that
// carry its labels.
func (e *Engine) restoredTask(rec record, cs []runtime.Container) *task {
	t := e.taskBase(rec.Task.Arn)
	t.desired = rec.Task
	if rec.Defined {
		t.define(rec.Task)
	}
	t.admitted, t.stopping = rec.Admitted, rec.Stopping
	t.stopCode, t.stopReason, t.orphan = rec.StopCode, rec.StopReason, rec.Orphan
	t.status, t.state, t.seq, t.times = rec.Status, rec.State, rec.Seq, rec.Times
	if t.status == "" {
		t.status = StatusProvisioning
	}
	for _, cr := range rec.Containers {
		c := t.container(cr.Name)
		if c == nil {
			if rec.Defined {
				continue
			}
			c = &ctr{name: cr.Name}
			t.cs = append(t.cs, c)
		}
		c.id, c.runtimeName, c.phase, c.started = cr.RuntimeID, cr.RuntimeName, parsePhase(cr.Phase), cr.Ran
		c.exitCode, c.reason, c.health = cr.ExitCode, cr.Reason, cr.Health
		c.imageID, c.digest, c.restarts, c.fast, c.restartAt = cr.ImageID, cr.ImageDigest, cr.Restarts, cr.FastExits, cr.RestartAt
		c.createdAt, c.firstStartedAt, c.startedAt, c.finishedAt = cr.Created, cr.FirstStarted, cr.StartedAt, cr.Finished
		c.ports, c.ip, c.gone = cr.Ports, cr.IP, cr.Gone
		if c.phase == phasePulled {
			c.phase = phaseNone // make sure of the image again
		}
	}
	for _, c := range t.cs {
		c.syncing = c.id != "" && !c.gone || c.phase == phaseCreated || c.phase == phaseRunning
	}
	if t.admitted && t.times.Stopped.IsZero() {
		// Whatever the ledger says, what runs keeps running.
		e.ledger.Force(t.arn, t.need)
		if t.stopping {
			e.ledger.Releasing(t.arn)
		}
	}
	if !t.times.Stopped.IsZero() {
		t.cleanupAt = t.times.Stopped.Add(e.cfg.CleanupWait)
		if t.orphan {
			t.cleanupAt = t.times.Stopped
		}
	}
	t.announce = t.state.Seq > 0
	t.saved, _ = t.encodeRecord()
	t.publish()
	t.post(msgObserved{cs: cs})
	return t
}

// post delivers a message without blocking.
func (t *task) post(m any) {
	t.mu.Lock()
	t.inbox = append(t.inbox, m)
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *task) container(name string) *ctr {
	for _, c := range t.cs {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (t *task) byID(id string) *ctr {
	for _, c := range t.cs {
		if c.id == id {
			return c
		}
	}
	return nil
}

// run is the task's goroutine.
func (t *task) run(ctx context.Context) {
	defer t.ops.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		t.drain(ctx)
		next := t.step(ctx)
		t.report()
		if t.done {
			return
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(t.e.now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-timer.C:
		}
	}
}

// drain applies every queued message.
func (t *task) drain(ctx context.Context) {
	for {
		t.mu.Lock()
		msgs := t.inbox
		t.inbox = nil
		t.mu.Unlock()
		if len(msgs) == 0 {
			return
		}
		for _, m := range msgs {
			switch m := m.(type) {
			case msgDesired:
				t.onDesired(m)
			case msgAdmission:
				t.onAdmission(m.err)
			case msgWaiting:
				if m.err != nil {
					t.waiting = m.err.Error()
				}
			case msgEvent:
				t.onEvent(m.ev)
			case msgObserved:
				t.onObserved(m.cs)
			case opResult:
				t.onResult(ctx, m)
			}
		}
	}
}

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
		t.queued = false
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

func (t *task) onEvent(ev runtime.Event) {
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
	busy := false
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
	t.do(ctx, nil, opCleanup, func(ctx context.Context) opResult {
		return opResult{err: t.e.removeTask(ctx, t.arn, ids, dir)}
	})
	return time.Time{}
}

// removeTask removes a task's containers, including any the engine lost
// track of, and its scratch volumes.
func (e *Engine) removeTask(ctx context.Context, arn string, ids []string, dir string) error {
	rctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	listed, err := e.rt.List(rctx, map[string]string{LabelInstance: e.cfg.ContainerInstanceArn, LabelTaskArn: arn})
	if err != nil {
		return err
	}
	for _, c := range listed {
		if !slices.Contains(ids, c.ID) {
			ids = append(ids, c.ID)
		}
	}
	for _, id := range ids {
		if err := e.rt.Remove(rctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return err
		}
	}
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove task volumes: %w", err)
		}
	}
	return nil
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

// do runs an operation in its own goroutine and posts its result.
func (t *task) do(ctx context.Context, c *ctr, kind string, f func(ctx context.Context) opResult) {
	ctx, cancel := context.WithCancel(ctx)
	if c != nil {
		c.op, c.cancel = kind, cancel
	}
	t.ops.Go(func() {
		defer cancel()
		r := f(ctx)
		r.c, r.kind = c, kind
		t.post(r)
	})
}

func (t *task) pull(ctx context.Context, c *ctr) {
	image := c.def.Image
	t.do(ctx, c, opPull, func(ctx context.Context) opResult {
		ctx, cancel := context.WithTimeout(ctx, pullTimeout)
		defer cancel()
		img, err := t.e.cfg.Images.Ensure(ctx, image, nil)
		return opResult{img: img, err: err}
	})
}

func (t *task) create(ctx context.Context, i int) {
	c := t.cs[i]
	in := specInput{
		cfg:         &t.e.cfg,
		task:        &t.desired,
		def:         &t.def,
		index:       i,
		networkMode: t.netMode,
		volumes:     t.volumes,
		cpuShares:   t.shares[i],
	}
	if t.holder >= 0 && t.holder != i {
		in.holderID = t.cs[t.holder].id
	}
	if t.netMode == "bridge" {
		for _, l := range c.def.Links {
			name, alias, _ := strings.Cut(l, ":")
			if dc := t.container(name); dc != nil && dc.ip != "" {
				in.linkHosts = append(in.linkHosts, name+":"+dc.ip)
				if alias != "" && alias != name {
					in.linkHosts = append(in.linkHosts, alias+":"+dc.ip)
				}
			}
		}
	}
	spec := buildSpec(in)
	var dirs []string
	if vd := t.e.cfg.VolumeDir; vd != "" {
		for _, m := range spec.Mounts {
			if strings.HasPrefix(m.Source, vd+"/") {
				dirs = append(dirs, m.Source)
			}
		}
	}
	e := t.e
	t.do(ctx, c, opCreate, func(ctx context.Context) opResult {
		for _, d := range dirs {
			// Open to any container user, as a Docker volume would be.
			if err := os.MkdirAll(d, 0o777); err != nil {
				return opResult{err: fmt.Errorf("volume directory: %w", err)}
			}
			if err := os.Chmod(d, 0o777); err != nil {
				return opResult{err: fmt.Errorf("volume directory: %w", err)}
			}
		}
		ctx, cancel := context.WithTimeout(ctx, e.cfg.StartTimeout)
		defer cancel()
		id, err := e.rt.Create(ctx, spec)
		if err == nil {
			return opResult{id: id}
		}
		// Created before a crash or a timeout? Find it by its labels,
		// never by name alone, and adopt it rather than make another.
		found, lerr := e.rt.List(ctx, map[string]string{
			LabelInstance:      e.cfg.ContainerInstanceArn,
			LabelTaskArn:       spec.Labels[LabelTaskArn],
			LabelContainerName: spec.Labels[LabelContainerName],
		})
		if lerr == nil && len(found) > 0 {
			return opResult{id: found[0].ID}
		}
		return opResult{err: err}
	})
}

func (t *task) start(ctx context.Context, c *ctr) {
	id, e := c.id, t.e
	t.do(ctx, c, opStart, func(ctx context.Context) opResult {
		sctx, cancel := context.WithTimeout(ctx, e.cfg.StartTimeout)
		err := e.rt.Start(sctx, id)
		cancel()
		ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
		defer cancel()
		rc, ierr := e.rt.Inspect(ictx, id)
		var output string
		if ierr == nil && failed(rc) { // already over: a fast crash
			output = lastOutput(ictx, e.rt, id)
		}
		return opResult{err: err, rc: rc, inspected: ierr == nil, ierr: ierr, output: output}
	})
}

func (t *task) stopContainer(ctx context.Context, c *ctr) {
	id, e := c.id, t.e
	timeout := e.cfg.StopTimeout
	if c.def != nil {
		timeout = stopTimeout(c.def, timeout)
	}
	t.do(ctx, c, opStop, func(ctx context.Context) opResult {
		sctx, cancel := context.WithTimeout(ctx, timeout+stopGrace)
		err := e.rt.Stop(sctx, id, timeout)
		cancel()
		ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
		defer cancel()
		rc, ierr := e.rt.Inspect(ictx, id)
		return opResult{err: err, rc: rc, inspected: ierr == nil, ierr: ierr}
	})
}

func (t *task) inspect(ctx context.Context, c *ctr) {
	id, e := c.id, t.e
	t.do(ctx, c, opInspect, func(ctx context.Context) opResult {
		ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
		defer cancel()
		rc, err := e.rt.Inspect(ctx, id)
		var output string
		if err == nil && failed(rc) {
			output = lastOutput(ctx, e.rt, id)
		}
		return opResult{rc: rc, err: err, output: output}
	})
}

// failed reports a container that exited non-zero with no reason known
// from the runtime (out of memory, a start error). Its last output is
// wanted only when the engine did not stop it, which exited decides.
func failed(rc runtime.Container) bool {
	return (rc.State == runtime.StateExited || rc.State == runtime.StateDead) && rc.ExitCode != 0 && !rc.OOMKilled && rc.Error == ""
}

// lastOutput is the last lines a container wrote, joined; "" when its log
// cannot be read (a log driver without reads, say). Several lines, since
// stdout and stderr are not ordered against each other in the log.
func lastOutput(ctx context.Context, rt runtime.Runtime, id string) string {
	r, err := rt.Logs(ctx, id, 3)
	if err != nil {
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	out := strings.ToValidUTF8(strings.Join(lines, " | "), "?")
	if len(out) > 200 {
		// The end says most about why it exited.
		out = "..." + strings.ToValidUTF8(out[len(out)-200:], "")
	}
	return out
}

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
		st.Containers[i] = cs
	}
	return st
}

// report emits the task's state if it changed, after persisting it.
func (t *task) report() {
	st := t.buildState()
	emit := t.hasDef || t.stopping
	if emit {
		prev := t.state
		prev.Seq, st.Seq = 0, 0
		emit = t.announce || !reflect.DeepEqual(prev, st)
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

// persist writes the task record if it changed. A failed write is logged and
// retried on the next change: reporting goes on, since stalling every task
// on a broken disk would help nobody.
func (t *task) persist() {
	r := t.record()
	if t.savedHead != nil {
		// desiredJSON is as saved while savedHead is set: the rest decides.
		task := r.Task
		r.Task = protocol.Task{}
		same := sameHead(&r, t.savedHead)
		r.Task = task
		if same {
			return
		}
	}
	data, err := t.encodeRecordOf(r)
	if err != nil {
		t.log.Error("cannot encode task record", "err", err)
		return
	}
	if bytes.Equal(data, t.saved) {
		t.savedHead = r.cloneHead()
		return
	}
	for try := 0; ; try++ {
		err = t.e.cfg.Store.PutTask(t.arn, data)
		if err == nil || try == 2 {
			break
		}
	}
	if err != nil {
		t.log.Error("cannot save task record", "err", err)
		t.saved, t.savedHead = nil, nil
		return
	}
	t.saved, t.savedHead = data, r.cloneHead()
}

// encodeRecord is the task's record as persisted: record() in JSON, with
// the desired task encoded again only when it changed.
func (t *task) encodeRecord() ([]byte, error) { return t.encodeRecordOf(t.record()) }

func (t *task) encodeRecordOf(r record) ([]byte, error) {
	if t.desiredJSON == nil {
		b, err := json.Marshal(r.Task)
		if err != nil {
			return nil, err
		}
		t.desiredJSON = b
	}
	// The outer Task hides record's and is encoded last, as a placeholder
	// that the desired task's JSON then takes the place of: json.Marshal
	// would validate and compact kilobytes of RawMessage on every step.
	b, err := json.Marshal(struct {
		record
		Task json.RawMessage `json:"task"`
	}{r, recordPlaceholder})
	if err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(b, recordTail) {
		return nil, fmt.Errorf("task record ends in %q, not the task's placeholder", b[max(0, len(b)-20):])
	}
	head := b[:len(b)-len(recordPlaceholder)-1]
	out := make([]byte, 0, len(head)+len(t.desiredJSON)+1)
	out = append(append(out, head...), t.desiredJSON...)
	return append(out, '}'), nil
}

var (
	recordPlaceholder = json.RawMessage("0")
	recordTail        = []byte(`"task":0}`)
)

func (t *task) record() record {
	r := record{
		Version:    recordVersion,
		Task:       t.desired,
		Defined:    t.hasDef,
		Admitted:   t.admitted,
		Stopping:   t.stopping,
		StopCode:   t.stopCode,
		StopReason: t.stopReason,
		Orphan:     t.orphan,
		Status:     t.status,
		State:      t.state,
		Seq:        t.seq,
		Times:      t.times,
	}
	if r.Task.Arn == "" {
		r.Task.Arn = t.arn
	}
	for _, c := range t.cs {
		r.Containers = append(r.Containers, containerRecord{
			Name: c.name, RuntimeID: c.id, RuntimeName: c.runtimeName, Phase: c.phase.String(), Ran: c.started,
			ExitCode: c.exitCode, Reason: c.reason, Health: c.health, ImageID: c.imageID, ImageDigest: c.digest,
			Restarts: c.restarts, FastExits: c.fast, RestartAt: c.restartAt, Created: c.createdAt,
			FirstStarted: c.firstStartedAt, StartedAt: c.startedAt, Finished: c.finishedAt,
			Ports: c.ports, IP: c.ip, Gone: c.gone,
		})
	}
	return r
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
