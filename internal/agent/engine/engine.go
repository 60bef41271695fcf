package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/agent/resources"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
)

// Store persists task records; the agent's bbolt state implements it.
type Store interface {
	PutTask(arn string, data []byte) error
	DeleteTask(arn string) error
	Tasks() (map[string][]byte, error)
}

// ImageEnsurer makes an image present locally, applying the instance's pull
// policy.
type ImageEnsurer interface {
	Ensure(ctx context.Context, image string, auth *runtime.RegistryAuth) (runtime.Image, error)
}

// Config wires an engine. Zero durations take the ECS defaults.
type Config struct {
	Runtime              runtime.Runtime
	Store                Store
	Cluster              string
	ContainerInstanceArn string // labels every container; required
	// Resources is the instance's capacity; a zero CPU or memory is not
	// accounted.
	Resources resources.Capacity

	StopTimeout  time.Duration // ECS_CONTAINER_STOP_TIMEOUT, default 30s
	StartTimeout time.Duration // ECS_CONTAINER_START_TIMEOUT, default 3m
	CleanupWait  time.Duration // ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION, default 3h

	DisablePrivileged bool         // ECS_DISABLE_PRIVILEGED, for all but daemon tasks
	Images            ImageEnsurer // nil: pull when the image is missing
	// MetadataURI gives ECS_CONTAINER_METADATA_URI_V4 (and _URI) for a
	// container; nil injects nothing.
	MetadataURI func(taskArn, container string) string
	ExtraHosts  []string // "name:ip", added to every container

	// VolumeDir holds the directories of scratch volumes and Docker volumes
	// (tasks/<task id>/<volume>, shared/<volume>). Empty refuses tasks that
	// need one.
	VolumeDir string
	// DaemonNetworkMode is the Docker network mode for tasks whose
	// networkMode is "daemon" (the instance's shared daemon namespace,
	// e.g. "container:<id>" or a network name); empty means "host".
	DaemonNetworkMode string
	// BridgeNetwork is the Docker network for tasks in bridge mode (the
	// instance's own network when the default bridge cannot reach its
	// daemons); empty means Docker's default bridge.
	BridgeNetwork string
	// TaskNetwork gives awsvpc tasks their namespaces; nil refuses them.
	TaskNetwork TaskNetwork
	// ReconcileInterval is how often the engine lists the runtime's
	// containers to catch missed events; default 30s.
	ReconcileInterval time.Duration

	Log *slog.Logger
	Now func() time.Time
}

// Defaults, as the ECS agent has them.
const (
	DefaultStopTimeout       = 30 * time.Second
	DefaultStartTimeout      = 3 * time.Minute
	DefaultCleanupWait       = 3 * time.Hour
	DefaultReconcileInterval = 30 * time.Second
)

// Engine runs the instance's tasks. Its methods are safe for concurrent use
// and never block on the runtime.
type Engine struct {
	cfg    Config
	rt     runtime.Runtime
	log    *slog.Logger
	now    func() time.Time
	ledger *resources.Ledger
	out    *outbox
	stats  counters

	wake chan struct{} // main loop

	mu         sync.Mutex
	ctx        context.Context // Run's; nil before
	started    bool
	tasks      map[string]*task
	byID       map[string]*task // runtime container ID
	queue      []*task          // waiting for admission, arrival order
	desired    []protocol.Task
	newDesired bool // desired not applied yet
	gotDesired bool // a desired set has been applied: orphans may go
	gone       map[string]bool
	removing   map[string]bool // orphan containers being removed
	// removed maps a container the engine removed to listSeq at that
	// moment: a listing with a seq no higher began before the removal and
	// may still show it.
	removed    map[string]uint64
	listSeq    uint64 // periodic listings started
	listing    bool
	listResult *listResult

	wg sync.WaitGroup // task goroutines and helpers
}

// counters are the engine's metrics.
type counters struct {
	pulls, pullFailures, restarts, vanished, orphans atomic.Uint64
}

// Stats are counts for the agent's /metrics.
type Stats struct {
	Tasks           map[string]int // by lastStatus
	WaitingForRoom  int            // tasks waiting for admission
	Pulls           uint64
	PullFailures    uint64
	Restarts        uint64 // containers restarted by restart policies
	Vanished        uint64 // containers found gone
	OrphansRemoved  uint64 // unknown containers removed
	ReservedCPU     int
	ReservedMemory  int
	ReleasingMemory int
}

// New checks cfg and returns an engine; Run starts it.
func New(cfg Config) (*Engine, error) {
	switch {
	case cfg.Runtime == nil:
		return nil, errors.New("engine: Runtime is required")
	case cfg.Store == nil:
		return nil, errors.New("engine: Store is required")
	case cfg.ContainerInstanceArn == "":
		return nil, errors.New("engine: ContainerInstanceArn is required: it labels the instance's containers")
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.CleanupWait <= 0 {
		cfg.CleanupWait = DefaultCleanupWait
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = DefaultReconcileInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Images == nil {
		cfg.Images = pullIfMissing{cfg.Runtime}
	}
	return &Engine{
		cfg:      cfg,
		rt:       cfg.Runtime,
		log:      cfg.Log,
		now:      cfg.Now,
		ledger:   resources.New(cfg.Resources),
		out:      newOutbox(),
		wake:     make(chan struct{}, 1),
		tasks:    map[string]*task{},
		byID:     map[string]*task{},
		gone:     map[string]bool{},
		removing: map[string]bool{},
		removed:  map[string]uint64{},
	}, nil
}

// pullIfMissing is the default ImageEnsurer.
type pullIfMissing struct{ rt runtime.Runtime }

func (p pullIfMissing) Ensure(ctx context.Context, image string, auth *runtime.RegistryAuth) (runtime.Image, error) {
	img, err := p.rt.Image(ctx, image)
	if err == nil {
		return img, nil
	}
	if !errors.Is(err, runtime.ErrNotFound) {
		return runtime.Image{}, err
	}
	if err := p.rt.Pull(ctx, image, auth); err != nil {
		return runtime.Image{}, err
	}
	return p.rt.Image(ctx, image)
}

// signal wakes the main loop without blocking.
func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Changes delivers every task state the engine reports, in order per task.
// The engine buffers without bound, so a slow reader delays only itself.
// The channel is closed when Run returns.
func (e *Engine) Changes() <-chan protocol.TaskState { return e.out.ch }

// SetDesired replaces the desired task set. Tasks not in it are desired
// STOPPED. It returns at once; the engine applies the set after restoring.
func (e *Engine) SetDesired(tasks []protocol.Task) {
	e.mu.Lock()
	e.desired = slices.Clone(tasks)
	e.newDesired = true
	e.mu.Unlock()
	e.signal()
}

// Snapshot returns the current state of every known task.
func (e *Engine) Snapshot() []protocol.TaskState {
	e.mu.Lock()
	ts := make([]*task, 0, len(e.tasks))
	for _, t := range e.tasks {
		ts = append(ts, t)
	}
	e.mu.Unlock()
	out := make([]protocol.TaskState, 0, len(ts))
	for _, t := range ts {
		if v := t.view.Load(); v != nil && v.reported {
			out = append(out, v.info.State)
		}
	}
	slices.SortFunc(out, func(a, b protocol.TaskState) int { return strings.Compare(a.Arn, b.Arn) })
	return out
}

// Task describes a known task for the metadata endpoint.
func (e *Engine) Task(arn string) (TaskInfo, bool) {
	e.mu.Lock()
	t := e.tasks[arn]
	e.mu.Unlock()
	if t == nil {
		return TaskInfo{}, false
	}
	v := t.view.Load()
	if v == nil {
		return TaskInfo{}, false
	}
	return v.info, true
}

// TaskByContainerID describes the task that owns a runtime container.
func (e *Engine) TaskByContainerID(runtimeID string) (TaskInfo, bool) {
	e.mu.Lock()
	t := e.byID[runtimeID]
	e.mu.Unlock()
	if t == nil {
		return TaskInfo{}, false
	}
	v := t.view.Load()
	if v == nil {
		return TaskInfo{}, false
	}
	return v.info, true
}

// Stats counts tasks by status and the engine's events.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	ts := make([]*task, 0, len(e.tasks))
	for _, t := range e.tasks {
		ts = append(ts, t)
	}
	waiting := len(e.queue)
	e.mu.Unlock()
	s := Stats{Tasks: map[string]int{}, WaitingForRoom: waiting}
	for _, t := range ts {
		if v := t.view.Load(); v != nil && v.reported {
			s.Tasks[v.info.State.LastStatus]++
		}
	}
	s.Pulls = e.stats.pulls.Load()
	s.PullFailures = e.stats.pullFailures.Load()
	s.Restarts = e.stats.restarts.Load()
	s.Vanished = e.stats.vanished.Load()
	s.OrphansRemoved = e.stats.orphans.Load()
	u := e.ledger.Usage()
	s.ReservedCPU, s.ReservedMemory, s.ReleasingMemory = u.CPU, u.MemoryMiB, u.ReleasingMemoryMiB
	return s
}

// Run restores tasks from the store and the runtime, then runs them until
// ctx ends. It never stops a container on its way out: the next Run adopts
// them.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return errors.New("engine: Run called twice")
	}
	e.started, e.ctx = true, ctx
	e.mu.Unlock()

	var pump sync.WaitGroup
	pump.Go(func() { e.out.pump(ctx) })
	defer func() {
		e.wg.Wait()
		pump.Wait()
		close(e.out.ch)
	}()

	// Watch events before listing, so nothing between the two is missed.
	e.wg.Go(func() { e.watchEvents(ctx) })
	if err := e.restore(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(e.cfg.ReconcileInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.wake:
		case <-tick.C:
			e.startList(ctx)
		}
		e.applyDesired(ctx)
		e.applyList(ctx)
		e.admit()
	}
}

// restore rebuilds tasks from their records and the runtime's containers.
func (e *Engine) restore(ctx context.Context) error {
	recs, err := e.cfg.Store.Tasks()
	if err != nil {
		// Without records the labels still say what runs; the next
		// desired set supplies the definitions.
		e.log.Error("engine: cannot read task records; rebuilding from containers", "err", err)
		recs = nil
	}
	var listed []runtime.Container
	for delay := time.Second; ; delay = min(delay*2, 30*time.Second) {
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		listed, err = e.rt.List(lctx, map[string]string{LabelInstance: e.cfg.ContainerInstanceArn})
		cancel()
		if err == nil {
			break
		}
		e.log.Warn("engine: cannot list containers; retrying", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
	byTask := map[string][]runtime.Container{}
	for _, c := range listed {
		if arn := c.Labels[LabelTaskArn]; arn != "" {
			byTask[arn] = append(byTask[arn], c)
		}
	}
	var ts []*task
	for arn, data := range recs {
		rec, err := decodeRecord(data)
		if err != nil || rec.Task.Arn != arn {
			if err == nil {
				err = fmt.Errorf("record names task %q", rec.Task.Arn)
			}
			e.log.Error("engine: dropping unreadable task record; the task is rebuilt from its containers", "task", arn, "err", err)
			if derr := e.cfg.Store.DeleteTask(arn); derr != nil {
				e.log.Error("engine: cannot delete task record", "task", arn, "err", derr)
			}
			continue
		}
		ts = append(ts, e.restoredTask(rec, byTask[arn]))
		delete(byTask, arn)
	}
	for arn, cs := range byTask {
		ts = append(ts, e.placeholderTask(arn, cs))
	}
	e.mu.Lock()
	for _, t := range ts {
		e.tasks[t.arn] = t
		for _, c := range t.cs {
			if c.id != "" {
				e.byID[c.id] = t
			}
		}
	}
	e.mu.Unlock()
	for _, t := range ts {
		e.launch(ctx, t)
	}
	if len(ts) > 0 {
		e.log.Info("engine: restored tasks", "tasks", len(ts), "containers", len(listed))
	}
	return nil
}

// launch starts a task's goroutine.
func (e *Engine) launch(ctx context.Context, t *task) {
	e.wg.Go(func() { t.run(ctx) })
}

// applyDesired turns a new desired set into task messages.
func (e *Engine) applyDesired(ctx context.Context) {
	e.mu.Lock()
	if !e.newDesired {
		e.mu.Unlock()
		return
	}
	desired := e.desired
	e.newDesired, e.desired = false, nil
	e.gotDesired = true
	in := make(map[string]bool, len(desired))
	var fresh []*task
	for _, d := range desired {
		if d.Arn == "" || in[d.Arn] {
			continue
		}
		in[d.Arn] = true
		if t := e.tasks[d.Arn]; t != nil {
			if d.DesiredStatus == StatusStopped {
				// Count its resources as coming free in this very pass.
				e.ledger.Releasing(d.Arn)
			}
			// A manifest lists every task of the instance each time one
			// changes: the others' entries, as they were, are not news.
			if k := desiredKeyOf(&d); k != t.posted {
				t.posted = k
				t.post(msgDesired{task: d})
			}
			continue
		}
		if e.gone[d.Arn] {
			continue // cleaned up; the server has yet to drop it
		}
		t := e.newTask(d)
		e.tasks[d.Arn] = t
		fresh = append(fresh, t)
	}
	for arn, t := range e.tasks {
		if !in[arn] {
			e.ledger.Releasing(arn)
			t.post(msgDesired{absent: true})
		}
	}
	// Forget cleaned-up tasks once the server no longer lists them.
	for arn := range e.gone {
		if !in[arn] {
			delete(e.gone, arn)
		}
	}
	e.mu.Unlock()
	for _, t := range fresh {
		e.launch(ctx, t)
	}
}

// requestAdmission queues t for resources.
func (e *Engine) requestAdmission(t *task) {
	e.mu.Lock()
	if !slices.Contains(e.queue, t) {
		e.queue = append(e.queue, t)
	}
	e.mu.Unlock()
	e.signal()
}

// withdraw takes t out of the admission queue.
func (e *Engine) withdraw(t *task) {
	e.mu.Lock()
	e.queue = slices.DeleteFunc(e.queue, func(q *task) bool { return q == t })
	e.mu.Unlock()
	e.signal()
}

// admit runs an admission pass over the queue.
func (e *Engine) admit() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) == 0 {
		return
	}
	reqs := make([]resources.Request, len(e.queue))
	for i, t := range e.queue {
		reqs[i] = resources.Request{Task: t.arn, Kind: t.admitKind, Need: t.need}
	}
	ds := e.ledger.Admit(reqs)
	keep := e.queue[:0:0]
	for i, d := range ds {
		t := e.queue[i]
		switch d.Verdict {
		case resources.Admit:
			t.post(msgAdmission{})
		case resources.Reject:
			t.post(msgAdmission{err: d.Err})
		default:
			keep = append(keep, t)
			t.post(msgWaiting{err: d.Err})
		}
	}
	e.queue = keep
}

// index records that runtime container id belongs to t.
func (e *Engine) index(id string, t *task) {
	e.mu.Lock()
	e.byID[id] = t
	e.mu.Unlock()
}

// forget drops a cleaned-up task.
func (e *Engine) forget(t *task, ids []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tasks[t.arn] == t {
		delete(e.tasks, t.arn)
		e.gone[t.arn] = true
	}
	for _, id := range ids {
		if e.byID[id] == t {
			delete(e.byID, id)
		}
		e.removed[id] = e.listSeq // cleanup removed them
	}
	e.queue = slices.DeleteFunc(e.queue, func(q *task) bool { return q == t })
}

// watchEvents routes runtime events to tasks, reopening the stream with
// back-off; after a break it lists at once, since events were lost.
func (e *Engine) watchEvents(ctx context.Context) {
	delay := time.Second
	for {
		evs, errc := e.rt.Events(ctx)
		opened := e.now()
		for ev := range evs {
			e.route(ev)
		}
		err := <-errc
		if ctx.Err() != nil {
			return
		}
		if e.now().Sub(opened) > time.Minute {
			delay = time.Second
		}
		e.log.Warn("engine: runtime event stream broke; reopening", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, 30*time.Second)
		e.startList(ctx)
	}
}

// route hands an event to the task that owns the container.
func (e *Engine) route(ev runtime.Event) {
	if inst, ok := ev.Labels[LabelInstance]; ok && inst != e.cfg.ContainerInstanceArn {
		return // another agent's container on a shared runtime
	}
	e.mu.Lock()
	t := e.byID[ev.ContainerID]
	if t == nil && ev.Labels[LabelInstance] == e.cfg.ContainerInstanceArn {
		arn := ev.Labels[LabelTaskArn]
		if arn == "" {
			arn = ev.Labels[LabelNetworkOf] // an awsvpc task's holder
		}
		t = e.tasks[arn]
	}
	e.mu.Unlock()
	if t != nil {
		t.post(msgEvent{ev: ev})
	}
}

// listResult is one periodic listing.
type listResult struct {
	seq uint64 // listSeq when it began
	cs  []runtime.Container
	err error
}

// startList lists the instance's containers in the background, unless a
// listing is already under way.
func (e *Engine) startList(ctx context.Context) {
	e.mu.Lock()
	if e.listing {
		e.mu.Unlock()
		return
	}
	e.listing = true
	e.listSeq++
	seq := e.listSeq
	e.mu.Unlock()
	e.wg.Go(func() {
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		cs, err := e.rt.List(lctx, map[string]string{LabelInstance: e.cfg.ContainerInstanceArn})
		cancel()
		e.mu.Lock()
		e.listing = false
		e.listResult = &listResult{seq: seq, cs: cs, err: err}
		e.mu.Unlock()
		e.signal()
	})
}

// applyList hands each task the containers seen for it, and removes
// containers of unknown tasks once a desired set has said what should run.
func (e *Engine) applyList(ctx context.Context) {
	e.mu.Lock()
	r := e.listResult
	e.listResult = nil
	if r == nil {
		e.mu.Unlock()
		return
	}
	if r.err != nil {
		e.mu.Unlock()
		if ctx.Err() == nil {
			e.log.Warn("engine: cannot list containers", "err", r.err)
		}
		return
	}
	// Listings run one at a time, in order: none from this one on began
	// before these removals, so none can show their containers.
	for id, at := range e.removed {
		if at < r.seq {
			delete(e.removed, id)
		}
	}
	byTask := map[string][]runtime.Container{}
	for _, c := range r.cs {
		if _, ok := e.removed[c.ID]; ok {
			// Listed before the engine removed it: acting on it would
			// remove it again and count an orphan that is not there.
			continue
		}
		// No task label: the instance's own plumbing (the daemon namespace
		// holder), not a task's container to adopt or remove.
		if arn := c.Labels[LabelTaskArn]; arn != "" {
			byTask[arn] = append(byTask[arn], c)
		}
		// An awsvpc task's namespace holder outlives its task only when
		// the agent lost track of it (a crash between stop and removal).
		if of := c.Labels[LabelNetworkOf]; of != "" && e.gotDesired && e.tasks[of] == nil && e.cfg.TaskNetwork != nil && !e.removing[c.ID] {
			e.removing[c.ID] = true
			id := c.ID
			e.wg.Go(func() {
				dctx, cancel := context.WithTimeout(ctx, networkTimeout)
				defer cancel()
				if err := e.cfg.TaskNetwork.Detach(dctx, of); err != nil && ctx.Err() == nil {
					e.log.Warn("engine: cannot remove the namespace holder of an unknown task", "task", of, "err", err)
				} else {
					e.log.Info("engine: removed the namespace holder of an unknown task", "task", of)
				}
				e.mu.Lock()
				delete(e.removing, id)
				e.mu.Unlock()
			})
		}
	}
	var orphans []runtime.Container
	var fresh []*task
	for arn, t := range e.tasks {
		t.post(msgObserved{cs: byTask[arn]})
		delete(byTask, arn)
	}
	for arn, cs := range byTask {
		if !e.gotDesired && arn != "" {
			// Before the server has spoken, keep what runs.
			t := e.placeholderTask(arn, cs)
			e.tasks[arn] = t
			for _, c := range cs {
				e.byID[c.ID] = t
			}
			fresh = append(fresh, t)
			continue
		}
		for _, c := range cs {
			if !e.removing[c.ID] {
				e.removing[c.ID] = true
				orphans = append(orphans, c)
			}
		}
	}
	e.mu.Unlock()
	for _, t := range fresh {
		e.launch(ctx, t)
	}
	for _, c := range orphans {
		e.wg.Go(func() { e.removeOrphan(ctx, c) })
	}
}

// removeOrphan stops and removes a container of a task nobody wants.
func (e *Engine) removeOrphan(ctx context.Context, c runtime.Container) {
	gone := false
	defer func() {
		e.mu.Lock()
		delete(e.removing, c.ID)
		if gone {
			e.removed[c.ID] = e.listSeq
		}
		e.mu.Unlock()
	}()
	e.log.Info("engine: removing container of an unknown task", "container", c.Name, "id", c.ID, "task", c.Labels[LabelTaskArn])
	sctx, cancel := context.WithTimeout(ctx, e.cfg.StopTimeout+2*time.Minute)
	defer cancel()
	if err := e.rt.Stop(sctx, c.ID, e.cfg.StopTimeout); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		e.log.Warn("engine: cannot stop orphan container", "id", c.ID, "err", err)
		return
	}
	err := e.rt.Remove(sctx, c.ID)
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		e.log.Warn("engine: cannot remove orphan container", "id", c.ID, "err", err)
		return
	}
	gone = true
	// Only a container this removal took away counts; one already gone
	// was removed by someone else.
	if err == nil {
		e.stats.orphans.Add(1)
	}
}
