// Package instances provisions and terminates managed instances: it
// launches an instance when tasks of a managed-instances capacity provider
// wait for room, places them once it is ACTIVE, replaces instances whose
// agent is gone, scales in instances without application tasks, and
// terminates instances once they are deregistered.
package instances

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/provision"
	"github.com/capstanhq/capstan/internal/store"
)

// Prefix is the key space reconciled: capacity providers.
const Prefix = "capacityproviders/"

// Defaults where a launch template gives no size or scale-in delay.
const (
	DefaultCPU          = 2048
	DefaultMemoryMiB    = 2048
	DefaultScaleInAfter = 5 * time.Minute
	// RegisterTimeout is how long a launched instance may take to register.
	RegisterTimeout = 2 * time.Minute
	// UnlaunchedGrace is how long a new instance's record without a
	// launch (the provisioner refused it, or a server stopped around the
	// call) is kept before it is dropped.
	UnlaunchedGrace = 15 * time.Second
	// LostAfter is how long an instance may stay without a session (its
	// agent alive but cut off) before it is replaced: past it the
	// instance's tasks cannot be trusted to run, and its agent is stopped
	// so it cannot come back next to its replacement.
	LostAfter = protocol.SilenceLimit
)

// Reconciler reconciles one capacity provider per call.
type Reconciler struct {
	Store       *store.Store
	Svc         *fleet.State
	Provisioner provision.Provisioner
	// AgentEnv adds settings to every launched agent (e.g. image pull
	// behaviour); may be nil.
	AgentEnv map[string]string
	Now      func() time.Time
	Log      *slog.Logger

	mu sync.Mutex
	// silent is when this leader first saw an instance without a session;
	// a new leader starts the count afresh, so a server restart replaces
	// nothing by itself.
	silent map[string]time.Time
	// active is when this leader first saw an instance ACTIVE.
	active map[string]time.Time
	// failures counts instances of a capacity provider whose launch did
	// not give a working instance: the call failed, or the instance died
	// or timed out before it was ever ACTIVE. Launches back off while it
	// is high.
	failures map[string]launchFailures
	// acting are the managed instances (by ID) whose launch or termination
	// is in flight: passes go on while they are, leave them alone and count
	// a launch's room as coming.
	acting map[string]act
	// launchers and stoppers bound the launches and the terminations in
	// flight, apart: a rollout waits for launches, not for terminations.
	launchers, stoppers chan struct{}
	inFlight            sync.WaitGroup
	pacer               controller.Pacer
}

// act is a launch or termination in flight.
type act struct {
	launch bool
	// room is what a launch for waiting tasks brings before its record
	// can be read.
	room bin
}

type launchFailures struct {
	n    int
	last time.Time
}

// launchBackoff is how long to wait before the next launch after n quick
// failures in a row: 5 s doubling to 5 minutes.
func launchBackoff(n int) time.Duration {
	if n == 0 {
		return 0
	}
	return min(5*time.Second<<min(n-1, 10), 5*time.Minute)
}

func (r *Reconciler) failed(cp string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures == nil {
		r.failures = map[string]launchFailures{}
	}
	f := r.failures[cp]
	r.failures[cp] = launchFailures{n: f.n + 1, last: now}
}

// succeeded ends cp's backoff when an instance launched after its last
// failure is ACTIVE: only a later launch shows that launches work again,
// not an instance that was up before they began to fail.
func (r *Reconciler) succeeded(cp string, launchedAt time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.failures[cp]; ok && launchedAt.After(f.last) {
		delete(r.failures, cp)
	}
}

// launchFailed reports whether an instance found lost counts against its
// launch: it never was ACTIVE (dead in its boot, its registration or its
// daemon's first start). One that worked and was lost later, as many
// young ones are when a zone goes, is a loss to repair at once; counted,
// four lost together held their replacements 40 s (four failures), then
// sent them one at a time.
func launchFailed(registered bool, ci fleet.InstanceBrief) bool {
	return !registered || ci.Status == "REGISTERING"
}

// silentFor is how long the instance has been seen without a session.
func (r *Reconciler) silentFor(id string, now time.Time) time.Duration {
	return r.seenFor(&r.silent, id, now)
}

// activeFor is how long this leader has seen the instance ACTIVE.
func (r *Reconciler) activeFor(id string, now time.Time) time.Duration {
	return r.seenFor(&r.active, id, now)
}

// seenFor is how long ago id was first recorded in *seen, recording it now
// if it was not.
func (r *Reconciler) seenFor(seen *map[string]time.Time, id string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *seen == nil {
		*seen = map[string]time.Time{}
	}
	since, ok := (*seen)[id]
	if !ok {
		(*seen)[id] = now
		return 0
	}
	return now.Sub(since)
}

// heard forgets an instance's silence.
func (r *Reconciler) heard(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.silent, id)
}

// failing reports whether cp's last launches failed quickly.
func (r *Reconciler) failing(cp string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[cp].n > 0
}

// launchWait is how long launches for cp must still wait.
func (r *Reconciler) launchWait(cp string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failures[cp]
	return launchBackoff(f.n) - now.Sub(f.last)
}

// Follows maps task, instance, managed-instance and session changes to
// their capacity provider. A session's end is how a dead instance shows
// first: without it a lost instance waited for another change's pass (20
// s and more) before it was seen gone and replaced.
func (r *Reconciler) Follows() []controller.Follow {
	return []controller.Follow{
		{Prefix: "tasks/", Keys: cpOf},
		{Prefix: "containerinstances/", Keys: cpOf},
		{Prefix: "managedinstances/", Keys: cpOfManaged},
		{Prefix: "sessions/", Keys: r.cpOfSession},
	}
}

// cpOfSession maps a session record (sessions/<cluster>/<instance>) to its
// instance's capacity provider.
func (r *Reconciler) cpOfSession(_ context.Context, ch store.Change) []string {
	cluster, id, ok := strings.Cut(strings.TrimPrefix(ch.Key, "sessions/"), "/")
	if !ok {
		return nil
	}
	if cp := r.Svc.CapacityProviderOf(cluster, id); cp != "" {
		return []string{store.CapacityProviderKey(cp)}
	}
	return nil
}

func cpOf(_ context.Context, ch store.Change) []string {
	var v struct {
		CP string `json:"capacityProviderName"`
	}
	if ch.Deleted || codec.Unmarshal(ch.Value, &v) != nil || v.CP == "" {
		return nil
	}
	return []string{store.CapacityProviderKey(v.CP)}
}

func cpOfManaged(_ context.Context, ch store.Change) []string {
	var v struct {
		CP string `json:"capacityProvider"`
	}
	if ch.Deleted || codec.Unmarshal(ch.Value, &v) != nil || v.CP == "" {
		return nil
	}
	return []string{store.CapacityProviderKey(v.CP)}
}

// MinPass is the least time between the starts of two passes over one
// capacity provider; a pass that found nothing to do rests idleRest times
// its own duration, at most a second: every task change of the fleet
// wakes it. One that acted rests actRest times its duration: its cost
// grows with the fleet, not with what it finds to do, and on a busy
// server passes every MinPass took a tenth of its CPU through a
// replacement rollout; spaced by their cost, each places more waiting
// tasks at once.
const (
	MinPass  = 200 * time.Millisecond
	idleRest = 10
	actRest  = 4
)

// Reconcile acts for the capacity provider at key.
func (r *Reconciler) Reconcile(ctx context.Context, key string) (next time.Duration, err error) {
	if wait := r.pacer.Due(key, MinPass); wait > 0 {
		return wait, nil
	}
	begun := time.Now()
	acted := false
	defer func() {
		rest := controller.Spacing(actRest, time.Since(begun), time.Second)
		if !acted {
			rest = controller.Spacing(idleRest, time.Since(begun), time.Second)
		}
		r.pacer.Rest(key, rest)
	}()
	// Taken before the reads: an act that ends after this is still left
	// alone, one that ended before is in what they return.
	inflight := r.inFlightNow()
	name := strings.TrimPrefix(key, Prefix)
	cp, err := r.Svc.CapacityProvider(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if cp.Type != "MANAGED_INSTANCES" || cp.Cluster == "" {
		return 0, nil
	}
	// The pass reads thousands of records; waiting once for this process's
	// writes to reach the cache, not before each read, keeps it from
	// waiting out every agent's report in between (seconds a pass at
	// 5,000 instances). Writes below still read at the latest.
	rctx, err := r.Store.ReadOnly(ctx)
	if err != nil {
		return 0, err
	}
	// Waiting tasks are read before the instances: an instance launched for
	// them (a rollout's replacement) is then seen, and not launched twice.
	waiting, err := r.Svc.Waiting(rctx, cp.Cluster, name)
	if err != nil {
		return 0, err
	}
	managed, err := r.Svc.ManagedInstances(rctx, cp.Cluster, name)
	if err != nil {
		return 0, err
	}
	var requeue time.Duration
	later := func(d time.Duration) {
		if requeue == 0 || d < requeue {
			requeue = d
		}
	}
	now := r.Now()
	// Room on instances launched and not taking tasks yet: waiting tasks
	// that fit there wait for them instead of launching more.
	var room []bin
	// Not knowing the daemons' need holds back launches only, not the
	// instances' upkeep below.
	dc, dm, needErr := r.Svc.DaemonsNeed(rctx, cp.Cluster, name)
	starting := func(m fleet.ManagedInstance, ci fleet.InstanceBrief, registered bool) {
		b := bin{cpu: m.CPU - dc, mem: m.MemoryMiB - dm}
		if registered {
			// Tasks may be placed already; a daemon not yet placed is not
			// in the remaining resources.
			b = bin{cpu: min(b.cpu, ci.CPU), mem: min(b.mem, ci.Memory)}
		}
		room = append(room, b)
	}
	var replacements []store.Item[fleet.ManagedInstance] // requested by rollouts, to launch
	var retire []retirement
	var sizes []bin // of the instances to launch for waiting tasks
	defer func() {
		// Terminations and launches go out side by side and the pass does
		// not wait for them: each is a provisioner call and writes in
		// sequence, a rollout retires and asks for hundreds at once, and
		// waiting tasks must meet the instances that are up meanwhile.
		if n := len(retire) + len(replacements) + len(sizes); n > 0 {
			acted = true
			r.dispatch(ctx, cp.Cluster, name, retire, replacements, sizes, dc, dm, now)
			r.Log.Debug("instances pass acted", "capacity_provider", name, "terminated", len(retire), "replacements", len(replacements),
				"launched", len(sizes), "managed", len(managed))
		}
		if r.busy() && (next == 0 || next > time.Second) {
			// A failed act changes nothing that wakes the pass.
			next = time.Second
		}
	}()
	ms := make([]*fleet.ManagedInstance, len(managed))
	for i, m := range managed {
		ms[i] = &m.Value
	}
	regs, err := r.Svc.Registrations(rctx, ms)
	if err != nil {
		return 0, err
	}
	for i, shared := range managed {
		m := *shared
		ci := regs[i]
		registered := ci.ID != ""
		if a, ok := inflight[m.Value.ID]; ok {
			if a.launch {
				starting(m.Value, ci, registered)
			}
			delete(inflight, m.Value.ID)
			continue
		}
		alive, err := r.Provisioner.Alive(ctx, m.Value.Handle)
		if err != nil {
			return 0, err
		}
		if !registered || ci.Status == "INACTIVE" || ci.Connected {
			r.heard(m.Value.ID)
		}
		switch {
		case m.Value.Requested && m.Value.Handle == "" && !m.Value.Terminating && cp.Status != "INACTIVE":
			// A daemon rollout asked for this replacement.
			starting(m.Value, ci, false)
			if wait := r.launchWait(name, now); wait > 0 {
				later(wait)
				continue
			}
			replacements = append(replacements, m)
			later(time.Second)
		case cp.Status == "INACTIVE" || m.Value.Terminating || (registered && ci.Status == "INACTIVE"):
			retire = append(retire, retirement{m, registered, ci, "instance retired"})
		case m.Value.Handle == "" && !m.Value.Requested && !registered:
			// Its launch failed, or a server stopped around the call.
			// Counted as coming it would hold its tasks until the register
			// timeout; forgotten, they get an instance of a later pass.
			// The grace lets one launched just before a server stopped
			// register and be kept, not left running unknown.
			if wait := UnlaunchedGrace - now.Sub(m.Value.LaunchedAt); wait > 0 {
				starting(m.Value, ci, false)
				later(wait)
				continue
			}
			retire = append(retire, retirement{m, false, ci, "launch failed"})
		case m.Value.Handle != "" && !alive:
			// The instance is gone: its tasks cannot run any more.
			r.Log.Warn("managed instance lost", "instance", m.Value.ID, "container_instance", ci.Arn)
			if launchFailed(registered, ci) {
				r.failed(name, now)
			}
			retire = append(retire, retirement{m, registered, ci, "instance lost"})
		case !registered:
			if now.Sub(m.Value.LaunchedAt) > RegisterTimeout {
				r.Log.Warn("managed instance did not register in time", "instance", m.Value.ID)
				r.failed(name, now)
				retire = append(retire, retirement{m, false, ci, "did not register"})
				continue
			}
			starting(m.Value, ci, false)
			later(time.Second)
		case ci.Status == "REGISTERING":
			starting(m.Value, ci, true)
			later(time.Second)
		case ci.Status == "ACTIVE" && !ci.Connected && now.Sub(ci.RegisteredAt) < LostAfter:
			// Just registered, its session is not up yet: it takes tasks soon.
			starting(m.Value, ci, true)
			later(time.Second)
		case !ci.Connected && r.silentFor(m.Value.ID, now) >= LostAfter:
			r.Log.Warn("managed instance lost: its agent has no session", "instance", m.Value.ID, "container_instance", ci.Arn, "silent_for", r.silentFor(m.Value.ID, now).Round(time.Second))
			retire = append(retire, retirement{m, registered, ci, "instance lost: agent silent"})
		case !ci.Connected:
			later(LostAfter - r.silentFor(m.Value.ID, now) + 100*time.Millisecond)
		case ci.Status == "ACTIVE":
			r.succeeded(name, m.Value.LaunchedAt)
			if r.activeFor(m.Value.ID, now) < freshFor {
				// Waiting tasks may not have been placed on it yet.
				starting(m.Value, ci, true)
			}
			if err := r.scaleIn(ctx, cp, m, ci, now, later); err != nil {
				return 0, err
			}
		}
	}
	// Terminations and a rollout's replacements go out now, not after the
	// placements below: those wait on commits (seconds under a rollout's
	// load), and every instance of a rolling window waited for them before
	// its replacement was launched.
	if len(retire)+len(replacements) > 0 {
		acted = true
		r.dispatch(ctx, cp.Cluster, name, retire, replacements, nil, dc, dm, now)
		r.Log.Debug("instances pass acted", "capacity_provider", name, "terminated", len(retire), "replacements", len(replacements), "managed", len(managed))
		retire, replacements = nil, nil
	}
	if cp.Status == "INACTIVE" {
		return 0, nil
	}
	for _, a := range inflight {
		if a.launch {
			room = append(room, a.room) // launching, not recorded yet
		}
	}
	// Place waiting tasks; launch instances for what does not fit, each
	// task counted against the room of those starting and launched so far,
	// so that many waiting tasks get their instances at once and tasks
	// that share an instance do not get one each.
	launched := 0
	// After launches that failed, one instance at a time until one works.
	probing := r.failing(name)
	t0 := time.Now()
	fits, retry, err := r.Svc.PlaceWaitingTasks(ctx, cp.Cluster, waiting)
	if err != nil {
		return 0, err
	}
	if len(waiting) > 0 {
		r.Log.Debug("placed waiting tasks", "capacity_provider", name, "waiting", len(waiting), "placed", len(fits), "retry", retry, "took", time.Since(t0))
	}
	if len(fits) > 0 {
		acted = true
	}
	if retry {
		later(100 * time.Millisecond)
	}
	sizer := r.Svc.Sizer()
	for _, t := range waiting {
		if fits[t.ID] {
			continue
		}
		tc, tm, err := sizer.Need(ctx, t)
		if err == nil {
			err = needErr
		}
		if err != nil {
			r.Log.Error("size of waiting task", "capacity_provider", name, "task", t.ID, "err", err)
			later(5 * time.Second)
			continue
		}
		if fit(room, tc, tm) {
			later(time.Second) // a launched instance may take it
			continue
		}
		if launched >= MaxLaunches || (probing && len(room) > 0) {
			later(100 * time.Millisecond)
			continue
		}
		if wait := r.launchWait(name, now); wait > 0 {
			later(wait)
			continue
		}
		cpu, mem, err := r.size(ctx, name, tc+dc, tm+dm)
		if err != nil {
			r.Log.Error("launch managed instance", "capacity_provider", name, "err", err)
			later(5 * time.Second)
			continue
		}
		sizes = append(sizes, bin{cpu: cpu, mem: mem})
		launched++
		room = append(room, bin{cpu: cpu - dc - tc, mem: mem - dm - tm})
		later(time.Second)
	}
	if len(sizes) > 0 {
		r.Log.Info("launching instances for waiting tasks", "capacity_provider", name, "instances", len(sizes), "waiting", len(waiting), "coming", len(room)-len(sizes))
	}
	return requeue, nil
}

// freshFor is how long a new ACTIVE instance's room still counts as
// coming, from when this controller first saw it ACTIVE (registration can
// be long before, on a busy server): the placement of waiting tasks reads
// a fleet view that may not show it yet, and launching for them then would
// be one instance too many.
const freshFor = 30 * time.Second

// retirement is an instance to terminate, and why.
type retirement struct {
	m          store.Item[fleet.ManagedInstance]
	registered bool
	ci         fleet.InstanceBrief
	reason     string
}

// dispatch terminates instances, starts the requested replacements and
// launches instances of the given sizes in the background, at most
// launchWorkers provisioner calls for launches and as many terminations at
// a time over all passes. A provisioner that launches in batches gets the
// pass's launches up to launchBatch a call. Failed launches of one pass
// count once toward the capacity provider's launch backoff; a later pass
// tries again.
func (r *Reconciler) dispatch(ctx context.Context, cluster, cp string, retire []retirement, replacements []store.Item[fleet.ManagedInstance], sizes []bin, dc, dm int, now time.Time) {
	launchFailed := new(sync.Once)
	for _, t := range retire {
		r.run(ctx, []actOn{{id: t.m.Value.ID}}, cp, "terminate instance "+t.m.Value.ID, nil, now,
			func() error { return r.terminate(ctx, t.m, t.registered, t.ci, t.reason) })
	}
	var launches []launching
	for _, m := range replacements {
		launches = append(launches, launching{actOn: actOn{id: m.Value.ID, a: act{launch: true}},
			record: func() (store.Item[fleet.ManagedInstance], error) { return m, nil }})
	}
	for _, b := range sizes {
		id := newInstanceID()
		launches = append(launches, launching{actOn: actOn{id: id, a: act{launch: true, room: bin{cpu: b.cpu - dc, mem: b.mem - dm}}},
			record: func() (store.Item[fleet.ManagedInstance], error) {
				return r.newRecord(ctx, cluster, cp, id, b.cpu, b.mem)
			}})
	}
	size := 1
	if _, ok := r.Provisioner.(provision.BatchLauncher); ok {
		size = launchBatch
	}
	for batch := range slices.Chunk(launches, size) {
		acts := make([]actOn, len(batch))
		for i, l := range batch {
			acts[i] = l.actOn
		}
		what := "launch managed instance " + batch[0].id
		if len(batch) > 1 {
			what = fmt.Sprintf("launch %d managed instances", len(batch))
		}
		r.run(ctx, acts, cp, what, launchFailed, now, func() error { return r.start(ctx, batch) })
	}
}

// actOn is an act on one managed instance.
type actOn struct {
	id string
	a  act
}

// launching is an instance to launch and how to get its record: a
// replacement's exists, an instance for waiting tasks is recorded first.
type launching struct {
	actOn
	record func() (store.Item[fleet.ManagedInstance], error)
}

// run records acts as in flight and carries them out in the background, in
// one worker's turn.
func (r *Reconciler) run(ctx context.Context, acts []actOn, cp, what string, launchFailed *sync.Once, now time.Time, fn func() error) {
	r.mu.Lock()
	if r.acting == nil {
		r.acting = map[string]act{}
		r.launchers = make(chan struct{}, launchWorkers)
		r.stoppers = make(chan struct{}, launchWorkers)
	}
	for _, a := range acts {
		r.acting[a.id] = a.a
	}
	workers := r.stoppers
	if acts[0].a.launch {
		workers = r.launchers
	}
	r.mu.Unlock()
	r.inFlight.Go(func() {
		// Forgotten only once its writes are done: a pass that no longer
		// sees it in flight reads what it wrote.
		defer func() {
			r.mu.Lock()
			for _, a := range acts {
				delete(r.acting, a.id)
			}
			r.mu.Unlock()
		}()
		select {
		case workers <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-workers }()
		if err := fn(); err != nil {
			r.Log.Error(what, "capacity_provider", cp, "err", err)
			if launchFailed != nil {
				launchFailed.Do(func() { r.failed(cp, now) })
			}
		}
	})
}

// inFlightNow is a copy of the acts in flight.
func (r *Reconciler) inFlightNow() map[string]act {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]act, len(r.acting))
	for id, a := range r.acting {
		out[id] = a
	}
	return out
}

func (r *Reconciler) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acting) > 0
}

// Wait returns once the launches and terminations in flight have ended
// (after the loop's context is done, promptly).
func (r *Reconciler) Wait() { r.inFlight.Wait() }

// launchWorkers bounds the launches in flight, and the terminations: each
// is a provisioner call and a few writes, waiting more than working, and a
// 25% rollout of 5,000 instances asks for 1,250 of each at once.
const launchWorkers = 64

// launchBatch bounds the instances one provisioner call launches, where
// the provisioner takes batches.
const launchBatch = 50

// MaxLaunches bounds the instances one pass launches: thousands of
// waiting tasks get theirs over a few passes, each pass's writes bounded.
const MaxLaunches = 500

// bin is the room left on an instance for waiting tasks.
type bin struct{ cpu, mem int }

// fit takes room for a task from the first bin that has it.
func fit(room []bin, cpu, mem int) bool {
	for i := range room {
		if room[i].cpu >= cpu && room[i].mem >= mem {
			room[i].cpu -= cpu
			room[i].mem -= mem
			return true
		}
	}
	return false
}

// size is the instance size for a task that needs cpu and mem together
// with the capacity provider's daemons: the launch template's, grown to
// hold them.
func (r *Reconciler) size(ctx context.Context, cpName string, cpu, mem int) (int, int, error) {
	cp, err := r.Svc.CapacityProvider(ctx, cpName)
	if err != nil {
		return 0, 0, err
	}
	tcpu, tmem := DefaultCPU, DefaultMemoryMiB
	if mip := cp.ManagedInstancesProvider; mip != nil && mip.InstanceLaunchTemplate != nil && mip.InstanceLaunchTemplate.InstanceRequirements != nil {
		req := mip.InstanceLaunchTemplate.InstanceRequirements
		if req.VCpuCount != nil && req.VCpuCount.Min != nil {
			tcpu = int(*req.VCpuCount.Min) * 1024
		}
		if req.MemoryMiB != nil && req.MemoryMiB.Min != nil {
			tmem = int(*req.MemoryMiB.Min)
		}
	}
	return max(tcpu, cpu), max(tmem, mem), nil
}

func newInstanceID() string {
	var b [6]byte
	rand.Read(b[:])
	return "mi-" + hex.EncodeToString(b[:])
}

// newRecord records a managed instance to launch for waiting tasks.
func (r *Reconciler) newRecord(ctx context.Context, cluster, cp, id string, cpu, mem int) (store.Item[fleet.ManagedInstance], error) {
	m, _, err := r.Svc.NewManagedInstance(ctx, fleet.ManagedInstance{ID: id, Cluster: cluster,
		CapacityProvider: cp, Provisioner: r.Provisioner.Name(), CPU: cpu, MemoryMiB: mem})
	if err != nil {
		return store.Item[fleet.ManagedInstance]{}, err
	}
	return store.Get[fleet.ManagedInstance](ctx, r.Store, fleet.ManagedInstanceKey(cluster, m.ID))
}

// start asks the provisioner for recorded instances, in one call where it
// takes batches, and notes their handles. The error names each instance
// that did not launch; the others are launched.
func (r *Reconciler) start(ctx context.Context, batch []launching) error {
	// Records are made side by side: each is a write of its own.
	type prepared struct {
		it  store.Item[fleet.ManagedInstance]
		req provision.Request
		err error
	}
	ready := make([]prepared, len(batch))
	var wg sync.WaitGroup
	for i, l := range batch {
		wg.Go(func() {
			p := &ready[i]
			if p.it, p.err = l.record(); p.err == nil {
				p.req, p.err = r.request(ctx, p.it.Value)
			}
		})
	}
	wg.Wait()
	var errs []error
	items := make([]store.Item[fleet.ManagedInstance], 0, len(batch))
	reqs := make([]provision.Request, 0, len(batch))
	for i, p := range ready {
		if p.err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", batch[i].id, p.err))
			continue
		}
		items, reqs = append(items, p.it), append(reqs, p.req)
	}
	launched := provision.LaunchAll(ctx, r.Provisioner, reqs)
	var noted []store.Item[fleet.ManagedInstance]
	handles := map[string]string{}
	for i, it := range items {
		if err := launched[i].Err; err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", it.Value.ID, err))
			continue
		}
		noted = append(noted, it)
		handles[it.Key] = launched[i].Handle
	}
	if err := r.noteHandles(ctx, noted, handles); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// request is what the provisioner is asked for to launch m.
func (r *Reconciler) request(ctx context.Context, m fleet.ManagedInstance) (provision.Request, error) {
	cred, err := store.Get[store.AgentCredential](ctx, r.Store, store.CredentialKey(m.AccessKeyID))
	if err != nil {
		return provision.Request{}, err
	}
	env := map[string]string{
		"CAPSTAN_ENDPOINT":      r.Svc.Endpoint(),
		"ECS_CLUSTER":           m.Cluster,
		"AWS_ACCESS_KEY_ID":     cred.Value.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY": cred.Value.SecretAccessKey,
		"AWS_REGION":            "us-east-1",
		"CAPSTAN_METRICS_ADDR":  "127.0.0.1:0",
		"CAPSTAN_METADATA_ADDR": "0.0.0.0:0",
		// Managed instances refuse privileged application tasks; daemons may
		// still be privileged.
		"ECS_DISABLE_PRIVILEGED": "true",
	}
	for k, v := range r.AgentEnv {
		env[k] = v
	}
	return provision.Request{ID: m.ID, Cluster: m.Cluster, CapacityProvider: m.CapacityProvider, CPU: m.CPU, MemoryMiB: m.MemoryMiB, Env: env}, nil
}

// noteHandles records the launched instances' handles, in one transaction
// while none of the records changed since they were read, else one at a
// time. The handles must stick: without one an instance would be launched
// twice.
func (r *Reconciler) noteHandles(ctx context.Context, items []store.Item[fleet.ManagedInstance], handles map[string]string) error {
	if len(items) == 0 {
		return nil
	}
	now := r.Now()
	note := func(v fleet.ManagedInstance, key string) fleet.ManagedInstance {
		v.Handle, v.Provisioner, v.LaunchedAt = handles[key], r.Provisioner.Name(), now
		return v
	}
	if len(items) > 1 && len(items) <= r.Store.MaxTxnOps() {
		txn := r.Store.Txn()
		for _, it := range items {
			txn.Update(it.Key, it.Rev, note(it.Value, it.Key))
		}
		if _, err := txn.Commit(ctx); err == nil {
			return nil
		} else if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	var errs []error
	for _, it := range items {
		err := store.Retry(ctx, func() error {
			cur, err := store.Get[fleet.ManagedInstance](ctx, r.Store, it.Key)
			if err != nil {
				return err
			}
			_, err = r.Store.Txn().Update(cur.Key, cur.Rev, note(cur.Value, cur.Key)).Commit(ctx)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("instance %s: note handle: %w", it.Value.ID, err))
		}
	}
	return errors.Join(errs...)
}

// scaleIn drains an instance without application tasks once it has been
// idle for the capacity provider's scaleInAfter.
func (r *Reconciler) scaleIn(ctx context.Context, cp store.CapacityProvider, m store.Item[fleet.ManagedInstance], ci fleet.InstanceBrief, now time.Time, later func(time.Duration)) error {
	after := DefaultScaleInAfter
	if mip := cp.ManagedInstancesProvider; mip != nil && mip.InfrastructureOptimization != nil && mip.InfrastructureOptimization.ScaleInAfter != nil {
		v := *mip.InfrastructureOptimization.ScaleInAfter
		if v < 0 {
			return nil // scale-in disabled
		}
		after = time.Duration(v) * time.Second
	}
	busy := ci.Busy
	switch {
	case busy && !m.Value.IdleSince.IsZero():
		m.Value.IdleSince = time.Time{}
		return r.Svc.UpdateManagedInstance(ctx, m)
	case busy:
		return nil
	case m.Value.IdleSince.IsZero():
		m.Value.IdleSince = now
		later(after)
		return r.Svc.UpdateManagedInstance(ctx, m)
	case now.Sub(m.Value.IdleSince) >= after:
		r.Log.Info("scaling in idle instance", "instance", ci.Arn, "idle_for", now.Sub(m.Value.IdleSince).Round(time.Second))
		return r.Svc.SetInstanceStatus(ctx, ci.Cluster, ci.ID, "DRAINING", "scale-in: no application tasks for "+after.String())
	default:
		later(after - now.Sub(m.Value.IdleSince))
	}
	return nil
}

// terminate deregisters (forcing: its tasks are recorded STOPPED),
// terminates through the provisioner and forgets the instance.
func (r *Reconciler) terminate(ctx context.Context, m store.Item[fleet.ManagedInstance], registered bool, ci fleet.InstanceBrief, reason string) error {
	if !m.Value.Terminating {
		m.Value.Terminating, m.Value.Reason = true, reason
		if err := r.Svc.UpdateManagedInstance(ctx, m); err != nil {
			return err
		}
		cur, err := store.Get[fleet.ManagedInstance](ctx, r.Store, fleet.ManagedInstanceKey(m.Value.Cluster, m.Value.ID))
		if err != nil {
			return err
		}
		m = cur
	}
	// The agent goes first: deregistered while alive, it would register anew.
	if m.Value.Handle != "" {
		if err := r.Provisioner.Terminate(ctx, m.Value.Handle); err != nil && !errors.Is(err, provision.ErrUnknown) {
			return err
		}
	}
	if registered && ci.Status != "INACTIVE" {
		if err := r.Svc.Retire(ctx, ci.Cluster, ci.ID, "Container instance retired: "+m.Value.Reason); err != nil {
			return err
		}
	}
	r.heard(m.Value.ID)
	r.mu.Lock()
	delete(r.active, m.Value.ID)
	r.mu.Unlock()
	return r.Svc.ForgetManagedInstance(ctx, m)
}
