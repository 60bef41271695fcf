package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// DaemonPlacementKey holds which task runs a daemon on an instance. Every
// daemon task is created together with this record, revision-checked, so
// there is never more than one per daemon and instance.
func DaemonPlacementKey(cluster, instance, daemon string) string {
	return DaemonPlacementPrefix(cluster, instance) + daemon
}

// DaemonPlacementPrefix lists the daemon placements of an instance.
func DaemonPlacementPrefix(cluster, instance string) string {
	return "daemonplacements/" + cluster + "/" + instance + "/"
}

// DaemonPlacement is a daemon's task on one instance.
type DaemonPlacement struct {
	Daemon      string `json:"daemon"`
	TaskID      string `json:"taskId"`
	RevisionArn string `json:"revisionArn"`
	// TaskRevisionArn is the revision TaskID runs; a rollout that changes
	// a hand-started instance in place sets RevisionArn ahead of it.
	TaskRevisionArn string    `json:"taskRevisionArn,omitempty"`
	Attempts        int       `json:"attempts"`    // failed starts in a row
	LastFailure     time.Time `json:"lastFailure"` // of the latest failed start
	Failure         string    `json:"failure,omitempty"`
}

// DaemonDefinition turns a daemon task definition into the task definition
// form agents run: network mode "daemon" (the instance's shared daemon
// namespace), shared PID/IPC as host namespaces, log-driver volumes as the
// engine's container log directory.
func DaemonDefinition(td shapes.DaemonTaskDefinition) (shapes.TaskDefinition, error) {
	var out shapes.TaskDefinition
	b, err := json.Marshal(td.ContainerDefinitions)
	if err != nil {
		return out, err
	}
	// The daemon container shape is a subset of the task one, member for member.
	if err := json.Unmarshal(b, &out.ContainerDefinitions); err != nil {
		return out, err
	}
	out.Family, out.Revision, out.TaskDefinitionArn = td.Family, td.Revision, td.DaemonTaskDefinitionArn
	out.Cpu, out.Memory, out.Status = td.Cpu, td.Memory, "ACTIVE"
	out.TaskRoleArn, out.ExecutionRoleArn = td.TaskRoleArn, td.ExecutionRoleArn
	out.NetworkMode = "daemon"
	if td.PidMode == "shared" {
		out.PidMode = "host"
	}
	if td.IpcMode == "shared" {
		out.IpcMode = "host"
	}
	for _, v := range td.Volumes {
		vol := shapes.Volume{Name: v.Name, Host: v.Host}
		if v.LogDriverVolumeConfiguration != nil {
			vol.Host = &shapes.HostVolumeProperties{SourcePath: "/var/lib/docker/containers"}
		}
		out.Volumes = append(out.Volumes, vol)
	}
	return out, nil
}

// DaemonsFor lists the ACTIVE daemons of a cluster that target a capacity
// provider (by name).
func (s *State) DaemonsFor(ctx context.Context, cluster, capacityProvider string) ([]store.Daemon, error) {
	if capacityProvider == "" {
		return nil, nil
	}
	items, _, err := store.List[store.Daemon](ctx, s.Store, store.DaemonPrefix(cluster), "", 0)
	if err != nil {
		return nil, err
	}
	arn := s.ARNs.CapacityProvider(capacityProvider)
	var out []store.Daemon
	for _, it := range items {
		// A daemon rolled back from its first revision runs nowhere.
		if it.Value.Status == "ACTIVE" && it.Value.RevisionArn != "" && slices.Contains(it.Value.Spec.CapacityProviderArns, arn) {
			out = append(out, it.Value)
		}
	}
	return out, nil
}

// Placements lists the daemon placements of an instance, by daemon name.
func (s *State) Placements(ctx context.Context, cluster, instance string) (map[string]store.Item[DaemonPlacement], error) {
	items, _, err := store.List[DaemonPlacement](ctx, s.Store, DaemonPlacementPrefix(cluster, instance), "", 0)
	if err != nil {
		return nil, err
	}
	out := map[string]store.Item[DaemonPlacement]{}
	for _, it := range items {
		out[it.Value.Daemon] = it
	}
	return out, nil
}

// Task reads a task by cluster and ID.
func (s *State) Task(ctx context.Context, cluster, id string) (store.Task, error) {
	it, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(cluster, id))
	return it.Value, err
}

// ErrNoRoom means a daemon task does not fit on its instance.
var ErrNoRoom = errors.New("not enough resources on the instance")

// StartDaemonTask places a task of daemon d on instance ci, at the given
// revision, replacing the placement record prev (nil for the first). The
// task, its desired entry, the instance's resources and the placement are
// written in one transaction.
func (s *State) StartDaemonTask(ctx context.Context, ci store.ContainerInstance, d store.Daemon, revisionArn string, prev *store.Item[DaemonPlacement]) (store.Task, error) {
	var out store.Task
	err := Retry(ctx, func() error {
		inst, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(ci.Cluster, ci.ID))
		if err != nil {
			return err
		}
		rc, dn, rid, ok := s.ARNs.DaemonChild("daemon-revision", revisionArn)
		if !ok {
			return fmt.Errorf("bad daemon revision %q", revisionArn)
		}
		rev, err := store.Get[store.DaemonRevision](ctx, s.Store, store.DaemonRevisionKey(rc, dn, rid))
		if err != nil {
			return err
		}
		family, revNo, err := s.ARNs.FamilyRevision("daemonTaskDefinitionArn", "daemon-task-definition", rev.Value.DaemonTaskDefinitionArn)
		if err != nil {
			return err
		}
		td, err := store.Get[store.DaemonTaskDefinition](ctx, s.Store, store.DaemonTaskDefinitionKey(family, revNo))
		if err != nil {
			return err
		}
		def, err := DaemonDefinition(td.Value.DaemonTaskDefinition)
		if err != nil {
			return err
		}
		n, err := taskNeed(def, nil)
		if err != nil {
			return err
		}
		rem := readResources(inst.Value.RemainingResources)
		switch {
		case rem.cpu < n.cpu:
			return fmt.Errorf("%w: RESOURCE:CPU - daemon needs %d CPU units, %d free", ErrNoRoom, n.cpu, rem.cpu)
		case rem.memory < n.mem:
			return fmt.Errorf("%w: RESOURCE:MEMORY - daemon needs %d MiB, %d MiB free", ErrNoRoom, n.mem, rem.memory)
		}
		r := TaskRequest{Group: "daemon:" + d.Name, StartedBy: "daemon/" + d.Name, ExecuteCommand: d.Spec.EnableExecuteCommand}
		if d.Spec.PropagateTags == "DAEMON" {
			r.Tags = d.Tags
		}
		t, desired := s.newTask(ci.Cluster, d.ClusterArn, inst.Value, store.TaskDefinition{TaskDefinition: def}, r.Group, r, n)
		t.Kind, desired.Kind = protocol.KindDaemon, protocol.KindDaemon
		placement := DaemonPlacement{Daemon: d.Name, RevisionArn: revisionArn, TaskRevisionArn: revisionArn, TaskID: t.ID}
		pkey := DaemonPlacementKey(ci.Cluster, ci.ID, d.Name)
		tx := s.Store.Txn()
		if prev != nil {
			placement.Attempts, placement.LastFailure, placement.Failure = prev.Value.Attempts, prev.Value.LastFailure, prev.Value.Failure
			tx.Update(pkey, prev.Rev, placement)
		} else {
			tx.Create(pkey, placement)
		}
		rem.cpu -= n.cpu
		rem.memory -= n.mem
		ci2 := inst.Value
		ci2.RemainingResources = rem.Shapes()
		*ci2.Version++
		tx.Update(inst.Key, inst.Rev, ci2)
		tx.Create(store.TaskKey(ci.Cluster, t.ID), t)
		tx.Create(store.DesiredKey(ci.Cluster, ci.ID, t.ID), desired)
		// Grouped: a rollout's workers start daemons on thousands of
		// instances at once, each its own keys.
		if _, err := tx.CommitGrouped(ctx); err != nil {
			return err
		}
		out = t
		return nil
	})
	return out, err
}

// RecordDaemonFailure notes a failed daemon start on its placement, for
// back-off and counts.
func (s *State) RecordDaemonFailure(ctx context.Context, cluster, instance string, p store.Item[DaemonPlacement], reason string) error {
	v := p.Value
	v.Attempts++
	v.LastFailure = s.Now()
	v.Failure = reason
	v.TaskID = "" // the failure is counted once
	_, err := s.Store.Txn().Update(DaemonPlacementKey(cluster, instance, v.Daemon), p.Rev, v).Commit(ctx)
	return StoreErr(err)
}

// ResetDaemonFailures clears the failure count once a daemon task runs.
func (s *State) ResetDaemonFailures(ctx context.Context, cluster, instance string, p store.Item[DaemonPlacement]) error {
	v := p.Value
	if v.Attempts == 0 && v.Failure == "" {
		return nil
	}
	v.Attempts, v.Failure = 0, ""
	_, err := s.Store.Txn().Update(DaemonPlacementKey(cluster, instance, v.Daemon), p.Rev, v).Commit(ctx)
	return StoreErr(err)
}

// RemovePlacement forgets a placement whose task has stopped.
func (s *State) RemovePlacement(ctx context.Context, cluster, instance string, p store.Item[DaemonPlacement]) error {
	_, err := s.Store.Txn().Delete(DaemonPlacementKey(cluster, instance, p.Value.Daemon), p.Rev).Commit(ctx)
	return StoreErr(err)
}

// StopTaskByID sets a task's desired status to STOPPED with a reason.
func (s *State) StopTaskByID(ctx context.Context, cluster, id, code, reason string) error {
	return Retry(ctx, func() error {
		it, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(cluster, id))
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if it.Value.DesiredStatus == "STOPPED" {
			return nil
		}
		tx := s.Store.Txn()
		if err := s.StopTaskTxn(ctx, tx, it, code, reason); err != nil {
			return err
		}
		_, err = tx.Commit(ctx)
		return err
	})
}

// SetInstanceStatus moves an instance to status (ACTIVE, DRAINING,
// REGISTERING) unless it is already there or INACTIVE.
func (s *State) SetInstanceStatus(ctx context.Context, cluster, id, status, reason string) error {
	return Retry(ctx, func() error {
		it, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cluster, id))
		if err != nil {
			return err
		}
		ci := it.Value
		if ci.Status == status || ci.Status == "INACTIVE" {
			return nil
		}
		ci.Status, ci.StatusReason = status, reason
		*ci.Version++
		if _, err = s.Store.Txn().Update(it.Key, it.Rev, ci).Commit(ctx); err == nil {
			s.InstanceChanged(ctx, ci)
		}
		return err
	})
}

// DeregisterDrained retires a drained instance: INACTIVE, nothing left on
// it. One an operator activated meanwhile (it is no longer DRAINING) stays.
func (s *State) DeregisterDrained(ctx context.Context, cluster, id string) error {
	_, err := s.deregister(ctx, &shapes.DeregisterContainerInstanceRequest{Cluster: cluster, ContainerInstance: id, Force: ptr(true)},
		StopInfrastructure, "Container instance drained and deregistered", "DRAINING")
	return err
}

// StopInfrastructure is the stop code of tasks that stopped because their
// instance went (lost, or retired by its capacity provider). It is not a
// failed launch: a service replaces them at once, however young they
// were, where TaskFailedToStart counted toward its launch throttle.
const StopInfrastructure = "InfrastructureHealth"

// Retire deregisters an instance the control plane takes out of service,
// recording what is left on it STOPPED (StopInfrastructure) with reason
// (e.g. the instance was lost).
func (s *State) Retire(ctx context.Context, cluster, id, reason string) error {
	_, err := s.Deregister(ctx, &shapes.DeregisterContainerInstanceRequest{Cluster: cluster, ContainerInstance: id, Force: ptr(true)}, StopInfrastructure, reason)
	return err
}

// IsDaemonTask reports whether a task belongs to a daemon.
func IsDaemonTask(t store.Task) bool { return IsDaemonGroup(t.Group) }

// IsDaemonGroup reports whether a task group is a daemon's.
func IsDaemonGroup(group string) bool { return strings.HasPrefix(group, "daemon:") }

// Placement reads one daemon placement.
func (s *State) Placement(ctx context.Context, cluster, instance, daemon string) (store.Item[DaemonPlacement], error) {
	return store.Get[DaemonPlacement](ctx, s.Store, DaemonPlacementKey(cluster, instance, daemon))
}

// AutoRepair reports whether a capacity provider repairs its instances
// (autoRepairConfiguration.actionsStatus; enabled unless DISABLED).
func (s *State) AutoRepair(ctx context.Context, capacityProvider string) (bool, error) {
	it, err := store.Get[store.CapacityProvider](ctx, s.Store, store.CapacityProviderKey(capacityProvider))
	if err != nil {
		return true, err
	}
	mip := it.Value.ManagedInstancesProvider
	return mip == nil || mip.AutoRepairConfiguration == nil || mip.AutoRepairConfiguration.ActionsStatus != "DISABLED", nil
}

// RevisionHasHealthCheck reports whether a daemon revision's task
// definition has a container health check.
func (s *State) RevisionHasHealthCheck(ctx context.Context, revisionArn string) bool {
	if v, ok := s.healthChecks.Load(revisionArn); ok {
		return v.(bool)
	}
	c, dn, id, ok := s.ARNs.DaemonChild("daemon-revision", revisionArn)
	if !ok {
		return false
	}
	rev, err := store.Get[store.DaemonRevision](ctx, s.Store, store.DaemonRevisionKey(c, dn, id))
	if err != nil {
		return false
	}
	td, err := s.DaemonTaskDefinitionByArn(ctx, rev.Value.DaemonTaskDefinitionArn)
	if err != nil {
		return false
	}
	has := slices.ContainsFunc(td.ContainerDefinitions, func(c shapes.DaemonContainerDefinition) bool { return c.HealthCheck != nil })
	s.healthChecks.Store(revisionArn, has)
	return has
}

// TaskArn is the ARN of a task of this account.
func (s *State) TaskArn(cluster, id string) string {
	if id == "" {
		return ""
	}
	return s.ARNs.Task(cluster, id)
}

// daemonTaskDefinitionByArn reads the revision a daemon spec points at.
func (s *State) DaemonTaskDefinitionByArn(ctx context.Context, arn string) (shapes.DaemonTaskDefinition, error) {
	family, rev, err := s.ARNs.FamilyRevision("daemonTaskDefinitionArn", "daemon-task-definition", arn)
	if err != nil {
		return shapes.DaemonTaskDefinition{}, err
	}
	it, err := store.Get[store.DaemonTaskDefinition](ctx, s.Store, store.DaemonTaskDefinitionKey(family, rev))
	if err != nil {
		return shapes.DaemonTaskDefinition{}, err
	}
	return it.Value.DaemonTaskDefinition, nil
}

// FinishDaemonTaskDefinitionDeletes marks DELETED every DELETE_IN_PROGRESS
// daemon task definition that no daemon uses any longer: neither as its
// current definition nor through a revision of a daemon that still exists.
// Call it whenever a daemon or daemon revision goes away.
func (s *State) FinishDaemonTaskDefinitionDeletes(ctx context.Context) error {
	rows, err := s.RevisionRows(ctx, "daemontaskdefs/")
	if err != nil {
		return err
	}
	var pending []RevisionRow
	for _, r := range rows {
		if r.Status == "DELETE_IN_PROGRESS" {
			pending = append(pending, r)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	used, err := s.daemonTaskDefinitionsInUse(ctx)
	if err != nil {
		return err
	}
	for _, r := range pending {
		if used[r.DaemonArn] {
			continue
		}
		err := Retry(ctx, func() error {
			it, err := store.Get[store.DaemonTaskDefinition](ctx, s.Store, r.key)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			if err != nil || it.Value.Status != "DELETE_IN_PROGRESS" {
				return err
			}
			it.Value.Status = "DELETED"
			_, err = s.Store.Txn().Update(it.Key, it.Rev, it.Value).Commit(ctx)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// daemonTaskDefinitionsInUse returns the ARNs of the daemon task definitions
// that daemons, or revisions of daemons that still exist, refer to.
func (s *State) daemonTaskDefinitionsInUse(ctx context.Context) (map[string]bool, error) {
	daemons, _, err := store.List[store.Daemon](ctx, s.Store, "daemons/", "", 0)
	if err != nil {
		return nil, StoreErr(err)
	}
	used := map[string]bool{}
	exists := map[string]bool{}
	for _, d := range daemons {
		used[d.Value.Spec.TaskDefinitionArn] = true
		exists[d.Key] = true
	}
	revs, _, err := store.List[store.DaemonRevision](ctx, s.Store, "daemonrevisions/", "", 0)
	if err != nil {
		return nil, StoreErr(err)
	}
	for _, r := range revs {
		// Keys are daemonrevisions/CLUSTER/DAEMON/ID.
		p := strings.Split(strings.TrimPrefix(r.Key, "daemonrevisions/"), "/")
		if len(p) == 3 && exists[store.DaemonKey(p[0], p[1])] {
			used[r.Value.DaemonTaskDefinitionArn] = true
		}
	}
	return used, nil
}
