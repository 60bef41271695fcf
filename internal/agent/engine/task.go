package engine

import (
	"context"
	"log/slog"
	"slices"
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
		net       TaskNet
		err       error
	}
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
	// An awsvpc task's namespace (awsvpc.go): nil until attached; netOp
	// while an attach or detach runs; netReleased once detached.
	tnet        *TaskNet
	netOp       bool
	netReleased bool
	// specViews are the containers' spec-derived details that publish
	// shows, built once per definition (nil until then): every report
	// publishes, and rebuilding the specs each time was a third of it.
	specViews []specView

	status   string
	admitted bool
	queued   bool
	// firstPass is set from the first admission request until the
	// engine's answer: the task reports nothing meanwhile.
	firstPass  bool
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
	if rec.Net != nil {
		n := *rec.Net
		t.tnet, t.netReleased = &n.TaskNet, n.Released
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
				t.firstPass = false
				t.onAdmission(m.err)
			case msgWaiting:
				t.firstPass = false
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
