// Package services keeps each ECS service's desiredCount tasks running. It
// replaces tasks that stop, rolls deployments start-before-stop within the
// service's deployment configuration, and moves tasks off draining
// instances. servicedeploy.Decide is the pure decision; Reconciler applies
// it.
package services

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/servicedeploy"
	"github.com/capstanhq/capstan/internal/store"
)

// Tasks starts and stops a service's tasks; the control service implements
// it. Both fail with an error wrapping store.ErrConflict when the service
// (or a task to stop) changed since it was read. A *fault.Error from
// StartServiceTasks says why no task of the service can start now.
type Tasks interface {
	// StartServiceTasks launches up to n tasks of the primary deployment and
	// returns the IDs started and, for each task not placed, why.
	StartServiceTasks(ctx context.Context, svc store.Item[store.Service], n int) (started, unplaced []string, err error)
	// StopServiceTasks stops tasks, each still at the revision given.
	StopServiceTasks(ctx context.Context, svc store.Item[store.Service], tasks []store.Item[store.Task], reason string) error
	// PlanTasks are the tasks of a group (stopped ones included) as
	// planning reads them, current with every write this process made,
	// appended to buf.
	PlanTasks(ctx context.Context, cluster, group string, buf []servicedeploy.Task) ([]servicedeploy.Task, error)
}

// taskLists are the task lists of passes, reused: a pass over a service
// of thousands of tasks otherwise allocates the whole list each time. Not
// a sync.Pool, which drops its lists every second collection: under the
// server's memory limit the collector runs often enough that most passes
// found it empty (341 MB of lists over a 5,000-instance rollout). Two are
// kept, cleared: at 20,000 tasks ~5 MB each.
var taskLists = make(chan *[]servicedeploy.Task, 2)

// Reconciler applies Decide to one service per call.
type Reconciler struct {
	Store *store.Store
	Tasks Tasks
	Now   func() time.Time
	Log   *slog.Logger

	pacer controller.Pacer
}

const (
	// maxEvents is how many events a service keeps, as ECS shows.
	maxEvents = 100
	// Per reconcile; task writes wake the service again for the rest.
	// Large, so that commits in sequence, not reconciles, bound the rate:
	// several hundred tasks per transaction on the embedded etcd, 40 on
	// another (control.startChunk).
	startBatch = 1000
	// Stops of a pass: tasks on draining instances whose replacements
	// run leave in hundreds during a daemon rollout.
	stopBatch = 500
	// placementRetry is how soon placement is tried again after it failed
	// (connecting agents and draining instances also wake the service).
	placementRetry = 10 * time.Second
	// repeatWindow keeps an identical event from being recorded again.
	repeatWindow = 5 * time.Minute
	// inactiveRetention is how long an INACTIVE service stays describable.
	inactiveRetention = time.Hour
)

// Follows are the other prefixes whose changes concern services: a task
// wakes its service; an instance that is not ACTIVE, or an agent that
// connects or leaves, wakes every service of its cluster.
func (r *Reconciler) Follows() []controller.Follow {
	return []controller.Follow{
		{Prefix: "tasks/", Keys: taskService},
		{Prefix: "containerinstances/", Keys: r.instanceServices},
		{Prefix: "sessions/", Keys: r.sessionServices},
	}
}

func taskService(_ context.Context, ch store.Change) []string {
	if ch.Deleted {
		return nil
	}
	var t struct {
		Group   string `json:"group"`
		Cluster string `json:"capstanCluster"`
	}
	if codec.Unmarshal(ch.Value, &t) != nil {
		return nil
	}
	name, ok := strings.CutPrefix(t.Group, "service:")
	if !ok || name == "" {
		return nil
	}
	return []string{store.ServiceKey(t.Cluster, name)}
}

func (r *Reconciler) instanceServices(ctx context.Context, ch store.Change) []string {
	if !ch.Deleted {
		var ci struct {
			Status string `json:"status"`
		}
		// Placements rewrite ACTIVE instances all the time; those concern
		// only the services whose tasks changed, which wake on their own.
		if codec.Unmarshal(ch.Value, &ci) == nil && (ci.Status == "ACTIVE" || ci.Status == "REGISTERING") {
			return nil
		}
	}
	return r.clusterServices(ctx, ch.Key, "containerinstances/")
}

func (r *Reconciler) sessionServices(ctx context.Context, ch store.Change) []string {
	return r.clusterServices(ctx, ch.Key, "sessions/")
}

// clusterServices lists the service keys of the cluster named in key.
func (r *Reconciler) clusterServices(ctx context.Context, key, prefix string) []string {
	cluster, _, ok := strings.Cut(strings.TrimPrefix(key, prefix), "/")
	if !ok {
		return nil
	}
	items, _, err := store.List[keyOnly](ctx, r.Store, store.ServicePrefix(cluster), "", 0)
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(items))
	for _, it := range items {
		keys = append(keys, it.Key)
	}
	return keys
}

// keyOnly decodes nothing: listing needs only keys.
type keyOnly struct{}

func (*keyOnly) UnmarshalJSON([]byte) error { return nil }

// MinPass is the least time between two passes over one service: a pass
// walks all of the service's tasks, and while thousands of them start,
// each one's report wakes it again.
const MinPass = 100 * time.Millisecond

// Reconcile brings the service at key one step closer to its desired
// state, planning again when what it decided on changed meanwhile.
func (r *Reconciler) Reconcile(ctx context.Context, key string) (time.Duration, error) {
	if wait := r.pacer.Due(key, MinPass); wait > 0 {
		return wait, nil
	}
	begun := time.Now()
	for attempt := 0; ; attempt++ {
		requeue, acted, err := r.step(ctx, key)
		if errors.Is(err, store.ErrConflict) && attempt < 8 {
			continue
		}
		rest := controller.Spacing(actRest, time.Since(begun), maxIdleRest)
		if err == nil && !acted {
			rest = controller.Spacing(idleRest, time.Since(begun), maxIdleRest)
		}
		r.pacer.Rest(key, rest)
		return requeue, err
	}
}

// A pass that started and stopped nothing (its tasks reporting, counts
// to update) is not repeated sooner than idleRest times its own duration,
// nor later than maxIdleRest: passes over a service of thousands of
// starting tasks then take at most a twentieth of the time, and one that
// waits for the cores waits longer still.
//
// One that acted rests actRest times its duration: its walk costs the
// same whatever it starts or stops, and on a busy server the passes of a
// service whose tasks are being replaced (every one acts) came every
// MinPass; spaced by their cost, each starts and stops more at once.
const (
	idleRest    = 20
	actRest     = 4
	maxIdleRest = time.Second
)

// step makes one pass; acted reports whether it started or stopped tasks.
func (r *Reconciler) step(ctx context.Context, key string) (time.Duration, bool, error) {
	acted := false
	it, err := store.Get[store.Service](ctx, r.Store, key)
	if errors.Is(err, store.ErrNotFound) {
		return 0, acted, nil
	}
	if err != nil {
		return 0, acted, err
	}
	svc := it.Value
	now := r.Now()
	if svc.Status == "INACTIVE" {
		requeue, err := r.expire(ctx, it, now)
		return requeue, acted, err
	}
	var buf *[]servicedeploy.Task
	select {
	case buf = <-taskLists:
	default:
		buf = new([]servicedeploy.Task)
	}
	tasks, err := r.Tasks.PlanTasks(ctx, svc.Cluster, "service:"+svc.ServiceName, *buf)
	defer func() {
		clear(tasks) // their strings are not kept alive by the list
		*buf = tasks[:0]
		select {
		case taskLists <- buf:
		default:
		}
	}()
	if err != nil {
		return 0, acted, err
	}
	sp := spec(svc)
	plan := servicedeploy.Decide(sp, tasks, now)

	var events []string
	name := "(service " + svc.ServiceName + ")"
	// What was done before a failure is still worth telling.
	fail := func(err error) (time.Duration, bool, error) {
		if rerr := r.record(ctx, svc, events, now); rerr != nil {
			r.Log.Warn("record service events", "service", svc.ServiceArn, "err", rerr)
		}
		return 0, acted, err
	}

	// Stops first: they free room and resources for the starts.
	stops := plan.Stops[:min(len(plan.Stops), stopBatch)]
	for _, reason := range []servicedeploy.Reason{servicedeploy.Orphaned, servicedeploy.Unhealthy, servicedeploy.Draining, servicedeploy.Replaced, servicedeploy.ScaleIn, servicedeploy.Deleted} {
		var batch []store.Item[store.Task]
		var ids []string
		for _, s := range stops {
			if s.Reason != reason {
				continue
			}
			// Read at its revision now: the stop is checked against it.
			t, err := store.Get[store.Task](ctx, r.Store, store.TaskKey(svc.Cluster, s.ID))
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			batch = append(batch, t)
			ids = append(ids, s.ID)
		}
		if len(batch) == 0 {
			continue
		}
		if err := r.Tasks.StopServiceTasks(ctx, it, batch, stopReason(reason, sp.Primary)); err != nil {
			return fail(err)
		}
		r.Log.Debug("stopped service tasks", "service", svc.ServiceArn, "reason", int(reason), "stopped", len(batch), "planned", len(plan.Stops))
		acted = true
		events = append(events, fmt.Sprintf("%s has stopped %d running tasks: %s.", name, len(ids), taskList(ids)))
	}

	var requeue time.Duration
	if plan.Start > 0 {
		t0 := time.Now()
		started, unplaced, err := r.Tasks.StartServiceTasks(ctx, it, min(plan.Start, startBatch))
		r.Log.Debug("started service tasks", "service", svc.ServiceArn, "started", len(started), "unplaced", len(unplaced), "took", time.Since(t0), "err", err)
		if fe := fault.As(err); fe != nil && fe.Kind != fault.Internal && fe.Kind != fault.Throttled {
			// Nothing of the service can start (its task definition is
			// being deleted, say): tell, and try again later.
			events = append(events, fmt.Sprintf("%s is unable to start tasks: %s.", name, strings.TrimSuffix(fe.Message, ".")))
			requeue, err = placementRetry, nil
		}
		if err != nil {
			return fail(err)
		}
		if len(started) > 0 {
			acted = true
			events = append(events, fmt.Sprintf("%s has started %d tasks: %s.", name, len(started), taskList(started)))
		}
		for _, f := range dedupe(unplaced) {
			events = append(events, fmt.Sprintf("%s was unable to place a task because no container instance met all of its requirements. Reason: %s.",
				name, strings.TrimSuffix(f, ".")))
		}
		if len(unplaced) > 0 {
			requeue = placementRetry
		}
	}
	if plan.Throttled {
		events = append(events, fmt.Sprintf("%s is unable to consistently start tasks successfully: %d launches in a row stopped before running for %s; the next launch waits until %s.",
			name, plan.Failures, servicedeploy.QuickExit, plan.RetryAt.UTC().Format(time.RFC3339)))
		requeue = soonest(requeue, plan.RetryAt.Sub(now))
	}
	if plan.Stalled {
		events = append(events, fmt.Sprintf("%s cannot replace tasks: maximumPercent %d%% of %d desired leaves no room for another task and minimumHealthyPercent %d%% lets no RUNNING task stop.",
			name, sp.MaximumPercent, sp.Desired, sp.MinimumHealthyPercent))
	}
	if !plan.Recheck.IsZero() {
		requeue = soonest(requeue, plan.Recheck.Sub(now))
	}

	next, changed := settle(svc, plan, tasks, now)
	var update *store.Service
	if changed {
		update = &next
		for _, d := range next.Deployments {
			if d.Status == "PRIMARY" && d.RolloutState == "COMPLETED" && primaryOf(svc).RolloutState != "COMPLETED" {
				events = append(events, fmt.Sprintf("%s (deployment %s) deployment completed.", name, d.Id))
			}
		}
		if next.Status == "INACTIVE" {
			requeue = soonest(requeue, inactiveRetention)
		}
	}
	if plan.Steady && next.Status == "ACTIVE" {
		events = append(events, name+" has reached a steady state.")
	}
	// The service's new state and the events telling of it commit together.
	tx := r.Store.Txn()
	if update != nil {
		tx.Update(it.Key, it.Rev, *update)
	}
	if err := r.addEvents(ctx, tx, svc, events, now); err != nil {
		return 0, acted, err
	}
	if _, err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	return requeue, acted, nil
}

func soonest(a, b time.Duration) time.Duration {
	b = max(b, time.Millisecond)
	if a == 0 || b < a {
		return b
	}
	return a
}

// listedTasks is how many tasks an event's message names. The service's
// event record keeps its last 100 events and is rewritten whole with each
// new one: a message naming all of a pass's 500 tasks made it ~170 KB. The
// tasks' own state-change events name every task.
const listedTasks = 10

func taskList(ids []string) string {
	parts := make([]string, 0, min(len(ids), listedTasks)+1)
	for _, id := range ids[:min(len(ids), listedTasks)] {
		parts = append(parts, "(task "+id+")")
	}
	if len(ids) > listedTasks {
		parts = append(parts, fmt.Sprintf("and %d more", len(ids)-listedTasks))
	}
	return strings.Join(parts, " ")
}

func dedupe(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// stopReason is the stoppedReason a service gives its tasks.
func stopReason(r servicedeploy.Reason, deployment string) string {
	switch r {
	case servicedeploy.Orphaned:
		return "Container instance of the task is no longer registered"
	case servicedeploy.Unhealthy:
		return "Task failed container health checks"
	case servicedeploy.Draining:
		return "Container instance is draining; the task was replaced on another instance"
	case servicedeploy.Deleted:
		return "Service is being deleted"
	}
	return "Scaling activity initiated by (deployment " + deployment + ")"
}

func primaryOf(svc store.Service) shapes.Deployment {
	for _, d := range svc.Deployments {
		if d.Status == "PRIMARY" {
			return d
		}
	}
	return shapes.Deployment{}
}

func spec(svc store.Service) servicedeploy.Spec {
	sp := servicedeploy.Spec{MinimumHealthyPercent: 100, MaximumPercent: 200, Deleting: svc.Status == "DRAINING", Primary: primaryOf(svc).Id}
	if svc.DesiredCount != nil {
		sp.Desired = int(*svc.DesiredCount)
	}
	if dc := svc.DeploymentConfiguration; dc != nil {
		if dc.MinimumHealthyPercent != nil {
			sp.MinimumHealthyPercent = int(*dc.MinimumHealthyPercent)
		}
		if dc.MaximumPercent != nil {
			sp.MaximumPercent = int(*dc.MaximumPercent)
		}
	}
	if g := svc.HealthCheckGracePeriodSeconds; g != nil {
		sp.GracePeriod = time.Duration(*g) * time.Second
	}
	for _, d := range svc.Deployments {
		if d.Id != sp.Primary {
			sp.Others = append(sp.Others, d.Id)
		}
	}
	return sp
}

// settle records what the plan says about the service itself: drained
// deployments leave the list, the primary rollout completes when the
// service is steady, and a deleted service becomes INACTIVE once its
// tasks have stopped.
func settle(svc store.Service, plan servicedeploy.Plan, tasks []servicedeploy.Task, now time.Time) (store.Service, bool) {
	changed := false
	at := shapes.At(now)
	deps := make([]shapes.Deployment, 0, len(svc.Deployments))
	for _, d := range svc.Deployments {
		if slices.Contains(plan.Drained, d.Id) {
			changed = true
			continue
		}
		if d.Status == "PRIMARY" && plan.Steady && d.RolloutState == "IN_PROGRESS" && svc.Status == "ACTIVE" {
			d.RolloutState = "COMPLETED"
			d.RolloutStateReason = "ECS deployment " + d.Id + " completed."
			d.UpdatedAt = at
			changed = true
		}
		deps = append(deps, d)
	}
	svc.Deployments = deps
	if svc.Status == "DRAINING" && !slices.ContainsFunc(tasks, func(t servicedeploy.Task) bool { return t.LastStatus != "STOPPED" && t.Instance != "" }) {
		svc.Status = "INACTIVE"
		svc.InactiveAt = now
		changed = true
	}
	return svc, changed
}

// expire removes an INACTIVE service and its events once it has been
// describable for inactiveRetention.
func (r *Reconciler) expire(ctx context.Context, it store.Item[store.Service], now time.Time) (time.Duration, error) {
	if left := it.Value.InactiveAt.Add(inactiveRetention).Sub(now); left > 0 {
		return left, nil
	}
	tx := r.Store.Txn().Delete(it.Key, it.Rev)
	ekey := store.ServiceEventsKey(it.Value.Cluster, it.Value.ServiceName)
	if ev, err := store.Get[store.ServiceEvents](ctx, r.Store, ekey); err == nil {
		tx.Delete(ekey, ev.Rev)
	} else if !errors.Is(err, store.ErrNotFound) {
		return 0, err
	}
	_, err := tx.Commit(ctx)
	return 0, err
}

// record adds events to the service's list on their own.
func (r *Reconciler) record(ctx context.Context, svc store.Service, msgs []string, now time.Time) error {
	return store.Retry(ctx, func() error {
		tx := r.Store.Txn()
		if err := r.addEvents(ctx, tx, svc, msgs, now); err != nil {
			return err
		}
		_, err := tx.Commit(ctx)
		return err
	})
}

// addEvents writes, in tx, the service's events with msgs added, newest
// first. A message equal to one recorded within repeatWindow is dropped,
// and "steady state" only follows something else, so that a quiet service
// does not fill its list.
func (r *Reconciler) addEvents(ctx context.Context, tx *store.Txn, svc store.Service, msgs []string, now time.Time) error {
	if len(msgs) == 0 {
		return nil
	}
	key := store.ServiceEventsKey(svc.Cluster, svc.ServiceName)
	cur, err := store.Get[store.ServiceEvents](ctx, r.Store, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	exists := err == nil
	old := cur.Value.Events
	var add []shapes.ServiceEvent
	for _, m := range msgs {
		if !repeated(old, m, now) {
			add = append([]shapes.ServiceEvent{{Id: newEventID(), CreatedAt: shapes.At(now), Message: m}}, add...)
		}
	}
	if len(add) == 0 {
		return nil
	}
	next := store.ServiceEvents{Events: append(add, old...)}
	next.Events = next.Events[:min(len(next.Events), maxEvents)]
	if exists {
		tx.Update(key, cur.Rev, next)
	} else {
		tx.Create(key, next)
	}
	return nil
}

func repeated(events []shapes.ServiceEvent, msg string, now time.Time) bool {
	if strings.HasSuffix(msg, "has reached a steady state.") {
		return len(events) > 0 && events[0].Message == msg
	}
	for _, e := range events {
		if now.Sub(e.CreatedAt.Time) > repeatWindow {
			break
		}
		if e.Message == msg {
			return true
		}
	}
	return false
}

// newEventID is a random UUID, the form ECS event IDs take.
func newEventID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
