package daemons

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/rollout"
	"github.com/capstanhq/capstan/internal/store"
)

// Reconciler reconciles one container instance per call.
type Reconciler struct {
	Store *store.Store
	Svc   *fleet.State
	Now   func() time.Time
	Log   *slog.Logger
	// Impaired, when set, is told about daemon start failures (events).
	Impaired func(ctx context.Context, ci store.ContainerInstance, daemon store.Daemon, taskArn, failureType, reason string)
}

// Prefix is the key space the reconciler follows: container instances.
const Prefix = "containerinstances/"

// Follows maps daemon, task and placement changes to the instances they
// concern.
func (r *Reconciler) Follows() []controller.Follow {
	return []controller.Follow{
		// Every instance of the cluster, most with nothing to do (a
		// rollout moves them batch by batch): behind the instances a
		// change concerns.
		{Prefix: "daemons/", Keys: r.instancesOfCluster, Background: true},
		// What passes the filter moves an instance on: a daemon's task
		// starting or stopping, another task leaving a draining instance.
		{Prefix: "tasks/", Keys: r.instanceOfTask, First: func(store.Change) bool { return true }},
		// A rollout retargets placements of hand-started instances.
		{Prefix: "daemonplacements/", Keys: instanceOfPlacement},
	}
}

// Changing changes instances that wait on this controller: a new instance
// for its daemons (REGISTERING until they run), a draining one to stop
// them last and deregister. Both are a rollout's path; the rest of a
// fleet's instance changes (resources as tasks come and go) mostly find
// nothing to do, and go after them.
func Changing(ch store.Change) bool {
	if ch.Deleted {
		return false
	}
	var ci struct {
		Status string `json:"status"`
	}
	if jsonUnmarshal(ch.Value, &ci) != nil {
		return false
	}
	return ci.Status == "REGISTERING" || ci.Status == "DRAINING"
}

func instanceOfPlacement(_ context.Context, ch store.Change) []string {
	parts := strings.Split(ch.Key, "/")
	if len(parts) != 4 {
		return nil
	}
	return []string{store.ContainerInstanceKey(parts[1], parts[2])}
}

func (r *Reconciler) instancesOfCluster(ctx context.Context, ch store.Change) []string {
	parts := strings.Split(ch.Key, "/")
	if len(parts) < 2 {
		return nil
	}
	items, _, err := store.List[rawInstance](ctx, r.Store, store.ContainerInstancePrefix(parts[1]), "", 0)
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(items))
	for _, it := range items {
		keys = append(keys, it.Key)
	}
	return keys
}

func (r *Reconciler) instanceOfTask(ctx context.Context, ch store.Change) []string {
	if ch.Deleted {
		return nil
	}
	var t struct {
		Cluster    string `json:"capstanCluster"`
		InstanceID string `json:"capstanInstanceId"`
		Group      string `json:"group"`
		LastStatus string `json:"lastStatus"`
	}
	if err := jsonUnmarshal(ch.Value, &t); err != nil || t.InstanceID == "" {
		return nil
	}
	// Other tasks matter here only once stopped (a draining instance stops
	// its daemons after them): a fleet's service tasks starting do not each
	// wake their instance's daemons.
	if !fleet.IsDaemonGroup(t.Group) && t.LastStatus != "STOPPED" {
		return nil
	}
	return []string{store.ContainerInstanceKey(t.Cluster, t.InstanceID)}
}

func jsonUnmarshal(b []byte, v any) error { return codec.Unmarshal(b, v) }

type rawInstance struct{}

func (*rawInstance) UnmarshalJSON([]byte) error { return nil }

// Reconcile plans and acts for the instance at key.
func (r *Reconciler) Reconcile(ctx context.Context, key string) (time.Duration, error) {
	// The reads below wait once for this process's writes; the actions
	// read again with ctx, each at its own latest.
	wctx := ctx
	ctx, err := r.Store.ReadOnly(ctx)
	if err != nil {
		return 0, err
	}
	// The fleet view's summary of the instance, not its record: most of
	// the passes (tens of thousands in a rollout) act on nothing, and
	// decoding the record for each was a fifth of this controller's work.
	// The record is read once there is something to do.
	parts := strings.Split(key, "/")
	if len(parts) != 3 {
		return 0, nil
	}
	ci, found, err := r.Svc.InstanceSummary(ctx, parts[1], parts[2])
	if err != nil {
		return 0, err
	}
	if !found || ci.Status == "INACTIVE" || ci.CapacityProvider == "" {
		return 0, nil
	}
	daemons, err := r.daemonsOf(ctx, ci.Cluster)
	if err != nil {
		return 0, err
	}
	wanted, err := r.Svc.DaemonsFor(ctx, ci.Cluster, ci.CapacityProvider)
	if err != nil {
		return 0, err
	}
	placements, err := r.Svc.Placements(ctx, ci.Cluster, ci.ID)
	if err != nil {
		return 0, err
	}
	// The instance's tasks from the fleet view; only its daemons' tasks
	// are read whole, below.
	tasks, err := r.Svc.InstanceTaskBriefs(ctx, ci.Cluster, ci.ID)
	if err != nil {
		return 0, err
	}
	in := Input{Status: ci.Status, AutoRepair: true, Now: r.Now(), Managed: ci.Managed}
	if ci.Status == "DRAINING" && !ci.Managed {
		// Why it drains decides what happens (the summary has no reason).
		rec, err := store.Get[store.ContainerInstance](ctx, r.Store, key)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
		// The server drains the instance of a critical daemon that stopped
		// in the write that records the stop ("auto-repair: ..."): a
		// joined machine is repaired in place, not deregistered.
		in.InPlace = strings.HasPrefix(rec.Value.StatusReason, rollout.InPlaceReason) || strings.HasPrefix(rec.Value.StatusReason, repairPrefix)
		in.Rollout = strings.HasPrefix(rec.Value.StatusReason, rollout.InPlaceReason) && !strings.Contains(rec.Value.StatusReason, repairPrefix)
		in.Held = strings.HasPrefix(rec.Value.StatusReason, RepairFailed)
	}
	for _, t := range tasks {
		if t.LastStatus == "STOPPED" {
			continue
		}
		switch {
		case fleet.IsDaemonGroup(t.Group):
			in.LiveDaemonTasks++
		default:
			in.OtherLiveTasks++
			if !strings.HasPrefix(t.Group, "service:") && t.DesiredStatus != "STOPPED" {
				in.Standalone = append(in.Standalone, t.ID)
			}
		}
	}
	if ar, err := r.Svc.AutoRepair(ctx, ci.CapacityProvider); err == nil {
		in.AutoRepair = ar
	}
	names := map[string]bool{}
	for _, d := range wanted {
		names[d.Name] = true
	}
	for name := range placements {
		names[name] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)
	for _, name := range sorted {
		d := Daemon{Name: name, Wanted: slices.ContainsFunc(wanted, func(w store.Daemon) bool { return w.Name == name })}
		if dd, ok := daemons[name]; ok {
			d.Critical, d.RevisionArn = dd.Spec.Critical, dd.RevisionArn
			d.HealthCheck = r.Svc.RevisionHasHealthCheck(ctx, dd.RevisionArn)
		}
		if p, ok := placements[name]; ok {
			d.Placed, d.PlacedRev, d.Attempts, d.LastFailure = true, p.Value.RevisionArn, p.Value.Attempts, p.Value.LastFailure
			d.TaskRev = p.Value.TaskRevisionArn
			onInstance := slices.ContainsFunc(tasks, func(t fleet.TaskBrief) bool { return t.ID == p.Value.TaskID })
			if p.Value.TaskID != "" {
				ts, ok, err := r.Svc.TaskState(ctx, ci.Cluster, p.Value.TaskID)
				if err != nil {
					return 0, err
				}
				if ok {
					d.TaskID, d.TaskLast, d.TaskDesired = p.Value.TaskID, ts.LastStatus, ts.DesiredStatus
					if onInstance {
						d.TaskHealth, d.TaskStartedAt = ts.Health, ts.StartedAt
					}
				}
				if ok && ts.LastStatus == "STOPPED" {
					// Only a stopped task's reason is read, from its record.
					if t, err := r.Svc.Task(ctx, ci.Cluster, p.Value.TaskID); err == nil {
						d.TaskReason = stopReason(t)
					}
				}
			}
		}
		in.Daemons = append(in.Daemons, d)
	}
	var requeue time.Duration
	actions := Plan(in)
	if len(actions) == 0 {
		return 0, nil
	}
	it, err := store.Get[store.ContainerInstance](ctx, r.Store, key)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	for _, a := range actions {
		if err := r.act(wctx, it.Value, daemons, placements, a, &requeue); err != nil {
			return 0, err
		}
	}
	return requeue, nil
}

func stopReason(t store.Task) string {
	reason := t.StoppedReason
	for _, c := range t.Containers {
		// A container that failed the task gave the task its reason too.
		if c.Reason != "" && !strings.Contains(reason, c.Reason) {
			reason += " (" + c.Name + ": " + c.Reason + ")"
		}
	}
	return reason
}

func (r *Reconciler) daemonsOf(ctx context.Context, cluster string) (map[string]store.Daemon, error) {
	items, _, err := store.List[store.Daemon](ctx, r.Store, store.DaemonPrefix(cluster), "", 0)
	if err != nil {
		return nil, err
	}
	out := map[string]store.Daemon{}
	for _, it := range items {
		out[it.Value.Name] = it.Value
	}
	return out, nil
}

func (r *Reconciler) act(ctx context.Context, ci store.ContainerInstance, daemons map[string]store.Daemon, placements map[string]store.Item[fleet.DaemonPlacement], a Action, requeue *time.Duration) error {
	later := func(d time.Duration) {
		if *requeue == 0 || d < *requeue {
			*requeue = d
		}
	}
	switch a.Kind {
	case Start:
		var prev *store.Item[fleet.DaemonPlacement]
		if p, ok := placements[a.Daemon]; ok {
			prev = &p
		}
		_, err := r.Svc.StartDaemonTask(ctx, ci, daemons[a.Daemon], a.Revision, prev)
		if errors.Is(err, fleet.ErrNoRoom) {
			r.Log.Warn("daemon does not fit on instance", "instance", ci.ContainerInstanceArn, "daemon", a.Daemon, "err", err)
			if r.Impaired != nil {
				r.Impaired(ctx, ci, daemons[a.Daemon], "", "TASK_CREATION_FAILED", err.Error())
			}
			if err := r.Svc.CountDaemonFailure(ctx, ci.Cluster, a.Daemon, a.Revision, err.Error()); err != nil {
				return err
			}
			later(30 * time.Second)
			return nil
		}
		if errors.Is(err, store.ErrConflict) {
			later(100 * time.Millisecond)
			return nil
		}
		if err == nil {
			r.Log.Info("daemon task started", "instance", ci.ContainerInstanceArn, "daemon", a.Daemon, "revision", a.Revision)
		}
		return err
	case Stop:
		return r.Svc.StopTaskByID(ctx, ci.Cluster, a.TaskID, "ServiceSchedulerInitiated", a.Reason)
	case Forget:
		return r.Svc.RemovePlacement(ctx, ci.Cluster, ci.ID, placements[a.Daemon])
	case Failed:
		p := placements[a.Daemon]
		r.Log.Warn("daemon task failed", "instance", ci.ContainerInstanceArn, "daemon", a.Daemon, "reason", a.Reason, "attempts", p.Value.Attempts+1)
		if r.Impaired != nil {
			r.Impaired(ctx, ci, daemons[a.Daemon], r.Svc.TaskArn(ci.Cluster, p.Value.TaskID), "TASK_FAILED_TO_RUN", a.Reason)
		}
		if err := r.Svc.RecordDaemonFailure(ctx, ci.Cluster, ci.ID, p, a.Reason); err != nil {
			return err
		}
		if err := r.Svc.CountDaemonFailure(ctx, ci.Cluster, a.Daemon, p.Value.RevisionArn, a.Reason); err != nil {
			return err
		}
		// A start planned next must see the updated record.
		np, err := r.Svc.Placement(ctx, ci.Cluster, ci.ID, a.Daemon)
		if err != nil {
			return err
		}
		placements[a.Daemon] = np
		return nil
	case Healthy:
		return r.Svc.ResetDaemonFailures(ctx, ci.Cluster, ci.ID, placements[a.Daemon])
	case Wait:
		later(a.After)
	case Activate:
		r.Log.Info("instance active", "instance", ci.ContainerInstanceArn, "reason", a.Reason)
		return r.Svc.SetInstanceStatus(ctx, ci.Cluster, ci.ID, "ACTIVE", "")
	case Drain:
		r.Log.Warn("draining instance", "instance", ci.ContainerInstanceArn, "reason", a.Reason)
		return r.Svc.SetInstanceStatus(ctx, ci.Cluster, ci.ID, "DRAINING", a.Reason)
	case Hold:
		r.Log.Warn("auto-repair gave up on instance", "instance", ci.ContainerInstanceArn, "reason", a.Reason)
		return r.hold(ctx, ci, a.Reason)
	case Deregister:
		r.Log.Info("deregistering drained instance", "instance", ci.ContainerInstanceArn)
		return r.Svc.DeregisterDrained(ctx, ci.Cluster, ci.ID)
	}
	return nil
}

// hold keeps a DRAINING instance drained with reason: the change is an
// instance state change event, what an operator is told.
func (r *Reconciler) hold(ctx context.Context, ci store.ContainerInstance, reason string) error {
	return fleet.Retry(ctx, func() error {
		it, err := store.Get[store.ContainerInstance](ctx, r.Store, store.ContainerInstanceKey(ci.Cluster, ci.ID))
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v := it.Value
		if v.Status != "DRAINING" || strings.HasPrefix(v.StatusReason, RepairFailed) {
			return nil
		}
		v.StatusReason = reason
		*v.Version++
		if _, err := r.Store.Txn().Update(it.Key, it.Rev, v).Commit(ctx); err != nil {
			return err
		}
		r.Svc.InstanceChanged(ctx, v)
		return nil
	})
}
