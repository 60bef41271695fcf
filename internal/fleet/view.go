// Reads of the fleet view: what planning and the API list from memory
// instead of decoding records.

package fleet

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/servicedeploy"
)

// fleetView is a read of the fleet after this process's writes have
// reached it; release it with done.
type fleetView struct {
	f *model
}

// view waits for the store and locks the fleet for reading.
func (s *State) fleetView(ctx context.Context) (fleetView, error) {
	if err := s.Store.Sync(ctx); err != nil {
		return fleetView{}, err
	}
	s.model.mu.RLock()
	return fleetView{s.model}, nil
}

func (v fleetView) done() { v.f.mu.RUnlock() }

func (v fleetView) cluster(name string) *fleetCluster {
	if c := v.f.clusters[name]; c != nil {
		return c
	}
	return &fleetCluster{}
}

// daemonOn is the revision of a daemon's placement on an instance ("" for
// none) and whether its task runs that revision and is RUNNING.
func (c *fleetCluster) daemonOn(fi *fleetInstance, daemon string) (rev string, running bool) {
	p, ok := fi.placements.get(daemon)
	if !ok {
		return "", false
	}
	if p.TaskID == "" || (p.TaskRevisionArn != "" && p.TaskRevisionArn != p.RevisionArn) {
		return p.RevisionArn, false
	}
	t := c.tasks[p.TaskID]
	return p.RevisionArn, t != nil && t.Last == "RUNNING" && t.DesiredStatus == "RUNNING"
}

// daemonOnCounted is daemonOn for an instance in the counts (its record
// there, not INACTIVE, in a capacity provider), whose running daemons the
// counts already hold: a rollout's pass asks it of every instance, and
// finding the daemon's task among the cluster's tens of thousands was
// most of the pass.
func (c *fleetCluster) daemonOnCounted(fi *fleetInstance, daemon string) (rev string, running bool) {
	if on, ok := fi.counted.daemons[daemon]; ok {
		return on.rev, true
	}
	if p, ok := fi.placements.get(daemon); ok {
		return p.RevisionArn, false
	}
	return "", false
}

// PlanTasks are a group's tasks as the services controller plans with
// them (stopped ones included), from the fleet view: a service's tasks
// without decoding the cluster's task records on every reconcile. They
// are appended to buf, which the caller may reuse between passes, in no
// particular order: planning orders what it needs (sorting thousands of
// tasks by ID on every pass was a third of building the list).
func (s *State) PlanTasks(ctx context.Context, cluster, group string, buf []servicedeploy.Task) ([]servicedeploy.Task, error) {
	return s.GroupTasks(ctx, cluster, group, buf)
}

// groupTasks are a group's tasks, appended to buf.
func (s *State) GroupTasks(ctx context.Context, cluster, group string, buf []servicedeploy.Task) ([]servicedeploy.Task, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, err
	}
	defer v.done()
	c := v.cluster(cluster)
	g := c.groups[group]
	out := slices.Grow(buf[:0], len(g))
	for id, t := range g {
		pt := servicedeploy.Task{ID: id, Deployment: t.StartedBy, LastStatus: t.Last, Desired: t.DesiredStatus, Health: t.health,
			StopCode: t.stopCode, CreatedAt: t.createdAt, StartedAt: t.startedAt, StoppedAt: t.stoppedAt, ProtectedUntil: t.protectedUntil}
		if t.instance == "" {
			if t.cp != "" {
				pt.Instance = servicedeploy.WaitingForCapacity
			}
		} else if fi := t.inst; fi != nil && fi.rec && fi.status != "INACTIVE" {
			pt.Instance, pt.InstanceID, pt.InstanceSince = fi.status, fi.id, fi.registeredAt
		}
		out = append(out, pt)
	}
	return out, nil
}

// waitingIDs are the cluster's tasks without an instance.
func (s *State) waitingIDs(ctx context.Context, cluster string) ([]string, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, err
	}
	defer v.done()
	c := v.cluster(cluster)
	ids := make([]string, 0, len(c.waiting))
	for id := range c.waiting {
		ids = append(ids, id)
	}
	return ids, nil
}

// TaskBrief is a task on an instance as the fleet view knows it.
type TaskBrief struct {
	ID, Group, LastStatus, DesiredStatus string
}

// InstanceTaskBriefs lists the tasks in an instance's manifest (placed and not
// gone), from the fleet view: counting an instance's tasks does not
// decode them.
func (s *State) InstanceTaskBriefs(ctx context.Context, cluster, id string) ([]TaskBrief, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, err
	}
	defer v.done()
	c := v.cluster(cluster)
	fi := c.instances[id]
	if fi == nil {
		return nil, nil
	}
	out := make([]TaskBrief, 0, len(fi.desired))
	for tid := range fi.desired {
		if t := c.tasks[tid]; t != nil {
			out = append(out, TaskBrief{ID: tid, Group: t.Group, LastStatus: t.Last, DesiredStatus: t.DesiredStatus})
		}
	}
	slices.SortFunc(out, func(a, b TaskBrief) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// taskCounts counts the tasks in each instance's manifest by last status
// ([0] RUNNING, [1] not yet RUNNING nor STOPPED), under one read of the
// fleet view.
func (s *State) TaskCounts(ctx context.Context, cluster string, ids []string) (map[string][2]int, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, StoreErr(err)
	}
	defer v.done()
	c := v.cluster(cluster)
	out := make(map[string][2]int, len(ids))
	for _, id := range ids {
		var n [2]int
		if fi := c.instances[id]; fi != nil {
			for tid := range fi.desired {
				t := c.tasks[tid]
				switch {
				case t == nil || t.Last == "STOPPED":
				case t.Last == "RUNNING":
					n[0]++
				default:
					n[1]++
				}
			}
		}
		out[id] = n
	}
	return out, nil
}

// TaskState is what the daemons controller reads of a daemon's task.
type TaskState struct {
	LastStatus, DesiredStatus, Health string
	StartedAt                         time.Time
}

// TaskState reads a task from the fleet view (ok false: no such task):
// the daemons controller looks at every instance's daemon task on every
// pass, and decoding the record each time was a fifth of its work.
func (s *State) TaskState(ctx context.Context, cluster, id string) (TaskState, bool, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return TaskState{}, false, err
	}
	defer v.done()
	t := v.cluster(cluster).tasks[id]
	if t == nil {
		return TaskState{}, false, nil
	}
	return TaskState{LastStatus: t.Last, DesiredStatus: t.DesiredStatus, Health: t.health, StartedAt: t.startedAt}, true, nil
}
