// Package instances provisions and terminates managed instances: it
// launches an instance when tasks of a managed-instances capacity provider
// wait for room, places them once it is ACTIVE, replaces instances whose
// agent is gone, scales in instances without application tasks, and
// terminates instances once they are deregistered.
package instances

import (
	"context"
	"errors"
	"log/slog"
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
	Store *store.Store
	Svc   *fleet.State
	// Provisioner launches and terminates instances; nil when the server
	// has none: the providers' instances are then machines that joined,
	// and the reconciler only places waiting tasks on them.
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
	if r.Provisioner == nil {
		return r.placeOnly(ctx, cp.Cluster, waiting, &acted)
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
		if adopted, err := r.adopt(ctx, m); err != nil {
			return 0, err
		} else if adopted {
			starting(m.Value, ci, registered)
			later(100 * time.Millisecond)
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
			// One whose provisioner has forgotten it was ended on purpose
			// (capstan dev ends its instances when it stops): expected.
			lvl := slog.LevelWarn
			if k, ok := r.Provisioner.(interface{ Known(string) bool }); ok && !k.Known(m.Value.Handle) {
				lvl = slog.LevelInfo
			}
			r.Log.Log(ctx, lvl, "managed instance lost", "instance", m.Value.ID, "container_instance", ci.Arn)
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

// placeOnly places the waiting tasks of a provider whose instances Capstan
// cannot launch (there is no provisioner): a task that found no room
// waits until an instance of the provider has it, one that joins or is
// ACTIVE again (an in-place daemon change, an operator's activation);
// those instance changes wake the pass.
func (r *Reconciler) placeOnly(ctx context.Context, cluster string, waiting []*store.Task, acted *bool) (time.Duration, error) {
	if len(waiting) == 0 {
		return 0, nil
	}
	fits, retry, err := r.Svc.PlaceWaitingTasks(ctx, cluster, waiting)
	if err != nil {
		return 0, err
	}
	*acted = len(fits) > 0
	if retry {
		return 100 * time.Millisecond, nil
	}
	return 0, nil
}
