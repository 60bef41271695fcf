package fleet

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// Instance returns a registered instance by cluster and ID.
func (s *State) Instance(ctx context.Context, cluster, id string) (store.ContainerInstance, error) {
	it, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cluster, id))
	return it.Value, err
}

// ParseInstanceArn splits a container instance ARN into cluster and ID.
func (s *State) ParseInstanceArn(arn string) (cluster, id string, ok bool) {
	typ, path, ok := s.ARNs.Resource(arn)
	if !ok || typ != "container-instance" || !s.ARNs.InAccount(arn) {
		return "", "", false
	}
	cluster, id, ok = cutLast(path)
	return cluster, id, ok && instanceIDPattern.MatchString(id)
}

func cutLast(path string) (string, string, bool) {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return path[:i], path[i+1:], true
		}
	}
	return "", "", false
}

// ManifestMessage is the desired task set of an instance as the message its
// agent gets (a protocol.Message of type manifest), built from the stored
// entries as they are: each is a protocol.Task already, so a fleet's
// manifests are not decoded and encoded again on every change. Its
// sequence is the store revision it was read at, so it only grows, on
// every server.
func (s *State) ManifestMessage(ctx context.Context, cluster, id string) ([]byte, error) {
	rev := s.Store.Revision()
	tasks, err := store.ListRaw(ctx, s.Store, store.DesiredPrefix(cluster, id))
	if err != nil {
		return nil, err
	}
	n := 64
	for _, t := range tasks {
		n += len(t) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"type":"`+protocol.TypeManifest+`","manifest":{"seq":`...)
	b = strconv.AppendUint(b, uint64(max(rev, s.Store.Revision())), 10)
	b = append(b, `,"tasks":[`...)
	for i, t := range tasks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, t...)
	}
	return append(b, "]}}"...), nil
}

// ApplyTaskStates writes what an agent reports about its tasks. A state
// older than one already written is ignored, so a resent batch changes
// nothing. A task reaching STOPPED releases what it held on the instance
// and leaves the instance's manifest.
func (s *State) ApplyTaskStates(ctx context.Context, cluster, instanceID string, states []protocol.TaskState) error {
	if len(states) > 1 {
		rest, err := s.applyTogether(ctx, cluster, instanceID, states)
		if err != nil {
			return err
		}
		states = rest
	}
	for _, st := range states {
		if err := s.applyTaskState(ctx, cluster, instanceID, st); err != nil {
			return fmt.Errorf("task %s: %w", st.Arn, err)
		}
	}
	return nil
}

// applyTogether writes, in one transaction, what a batch of an agent's
// reports changes and returns the reports it leaves to be written one by
// one: a critical daemon stopping on its own (its instance may leave
// service with it) and whatever it could not read. An agent reports its
// tasks in batches (a service's tasks starting or stopping on it); one
// write each would be as many etcd commits and as many rewrites of the
// instance the stopped ones release. After a conflict it returns them all.
func (s *State) applyTogether(ctx context.Context, cluster, instanceID string, states []protocol.TaskState) ([]protocol.TaskState, error) {
	ctx, err := s.Store.ReadOnly(ctx)
	if err != nil {
		return nil, err
	}
	var rest []protocol.TaskState
	var written []store.Task
	var ci *store.Item[store.ContainerInstance] // read at the first release
	ciRead, ciDirty := false, false
	ops := 1 // the instance
	seen := map[string]bool{}
	tx := s.Store.Txn()
	for _, st := range states {
		id, err := s.TaskID("arn", cluster, st.Arn)
		if err != nil || seen[id] || ops+2 > s.Store.MaxTxnOps()-8 {
			rest = append(rest, st) // the one-by-one path handles it
			continue
		}
		seen[id] = true
		it, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(cluster, id))
		if err != nil {
			rest = append(rest, st)
			continue
		}
		t := it.Value
		if t.InstanceID != instanceID || st.Seq <= t.StateSeq || t.LastStatus == "STOPPED" {
			rest = append(rest, st) // ignored there, with the same checks
			continue
		}
		unexpected := t.DesiredStatus == "RUNNING"
		if !mergeState(&t, st) {
			continue // nothing to write; acknowledged all the same
		}
		stopping := t.LastStatus == "STOPPED" || t.LastStatus == "STOPPING" || t.LastStatus == "DEACTIVATING"
		if stopping && unexpected && t.Kind == protocol.KindDaemon {
			rest = append(rest, st)
			continue
		}
		if t.LastStatus == "STOPPED" {
			s.stoppedNow(&t)
			deleted, err := s.dropDesired(ctx, tx, t)
			if err != nil {
				rest = append(rest, st)
				continue
			}
			if deleted {
				ops++
			}
			if t.Reserved != nil && !ciRead {
				ciRead = true
				got, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cluster, instanceID))
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return states, nil
				}
				if err == nil {
					ci = &got
				}
			}
			if t.Reserved != nil && ci != nil {
				giveBack(&ci.Value, t.Reserved)
				ciDirty = true
			}
			t.Reserved = nil
			t.DesiredStatus = "STOPPED"
		}
		*t.Version++
		tx.Update(it.Key, it.Rev, t)
		ops++
		written = append(written, t)
	}
	if len(written) == 0 {
		return states, nil
	}
	if ciDirty {
		*ci.Value.Version++
		tx.Update(ci.Key, ci.Rev, ci.Value)
	}
	if _, err := tx.CommitGrouped(ctx); errors.Is(err, store.ErrConflict) {
		return states, nil
	} else if err != nil {
		return nil, err
	}
	for _, t := range written {
		s.taskChanged(ctx, t)
	}
	return rest, nil
}

func (s *State) applyTaskState(ctx context.Context, cluster, instanceID string, st protocol.TaskState) error {
	id, err := s.TaskID("arn", cluster, st.Arn)
	if err != nil {
		s.Log.Warn("agent reported a task of another cluster or a malformed ARN", "instance", instanceID, "task", st.Arn)
		return nil
	}
	return Retry(ctx, func() error {
		it, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(cluster, id))
		if errors.Is(err, store.ErrNotFound) {
			return nil // forgotten task: nothing to record
		}
		if err != nil {
			return err
		}
		t := it.Value
		if t.InstanceID != instanceID {
			s.Log.Warn("agent reported a task of another instance", "instance", instanceID, "task", st.Arn)
			return nil
		}
		if st.Seq <= t.StateSeq || t.LastStatus == "STOPPED" {
			return nil
		}
		tx := s.Store.Txn()
		unexpected := t.DesiredStatus == "RUNNING"
		if !mergeState(&t, st) {
			return nil // nothing to write; acknowledged all the same
		}
		*t.Version++
		if t.LastStatus == "STOPPED" {
			s.stoppedNow(&t)
			// A critical daemon that stops on its own takes its instance out
			// of service in the same write: no ACTIVE instance is ever
			// recorded running tasks without its critical daemons.
			repair := ""
			if unexpected && t.Kind == protocol.KindDaemon {
				if repair, err = s.repairReason(ctx, t); err != nil {
					return err
				}
			}
			if err := s.release(ctx, tx, t, repair); err != nil {
				return err
			}
			t.Reserved = nil
			t.DesiredStatus = "STOPPED"
		}
		if unexpected && t.Kind == protocol.KindDaemon && (t.LastStatus == "STOPPING" || t.LastStatus == "DEACTIVATING") {
			// Its main container died; the rest of the task may take its stop
			// timeout. The instance leaves service now, not at STOPPED.
			repair, err := s.repairReason(ctx, t)
			if err != nil {
				return err
			}
			if repair != "" {
				if err := s.drainInTxn(ctx, tx, t, repair); err != nil {
					return err
				}
			}
		}
		tx.Update(it.Key, it.Rev, t)
		// Committed with other agents' reports: a fleet's reports are
		// thousands of small writes at once.
		if _, err = tx.CommitGrouped(ctx); err == nil {
			s.taskChanged(ctx, t)
		}
		return err
	})
}

// release returns a stopped task's reservation to its instance and removes
// the task from the instance's manifest, in tx.
// drainInTxn sets the task's instance DRAINING in tx, if it is ACTIVE.
func (s *State) drainInTxn(ctx context.Context, tx *store.Txn, t store.Task, reason string) error {
	it, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(t.Cluster, t.InstanceID))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil || it.Value.Status != "ACTIVE" {
		return err
	}
	ci := it.Value
	ci.Status, ci.StatusReason = "DRAINING", reason
	*ci.Version++
	tx.Update(it.Key, it.Rev, ci)
	tx.OnCommit(func() { s.InstanceChanged(ctx, ci) })
	return nil
}

// repairReason is why the instance of a stopped daemon task must be
// repaired, or "" when it need not (non-critical daemon, auto-repair off).
func (s *State) repairReason(ctx context.Context, t store.Task) (string, error) {
	name, ok := strings.CutPrefix(t.Group, "daemon:")
	if !ok {
		return "", nil
	}
	d, err := store.Get[store.Daemon](ctx, s.Store, store.DaemonKey(t.Cluster, name))
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil || !d.Value.Spec.Critical {
		return "", err
	}
	if on, err := s.AutoRepair(ctx, t.CapacityProviderName); err != nil && !errors.Is(err, store.ErrNotFound) || !on {
		return "", nil
	}
	return RepairPrefix + "critical daemon " + name + " stopped: " + t.StoppedReason, nil
}

// dropDesired removes a stopped task from its instance's manifest in tx;
// deleted is false when it had left already.
func (s *State) dropDesired(ctx context.Context, tx *store.Txn, t store.Task) (deleted bool, err error) {
	dkey := store.DesiredKey(t.Cluster, t.InstanceID, t.ID)
	d, err := store.Get[keyOnly](ctx, s.Store, dkey)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	tx.Delete(dkey, d.Rev)
	return true, nil
}

func (s *State) release(ctx context.Context, tx *store.Txn, t store.Task, drainReason string) error {
	if _, err := s.dropDesired(ctx, tx, t); err != nil {
		return err
	}
	if t.Reserved == nil && drainReason == "" {
		return nil
	}
	it, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(t.Cluster, t.InstanceID))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	ci := it.Value
	if drainReason != "" && ci.Status == "ACTIVE" {
		ci.Status, ci.StatusReason = "DRAINING", drainReason
		defer func() { tx.OnCommit(func() { s.InstanceChanged(ctx, ci) }) }()
	}
	if t.Reserved != nil {
		giveBack(&ci, t.Reserved)
	}
	*ci.Version++
	tx.Update(it.Key, it.Rev, ci)
	return nil
}

// giveBack returns a stopped task's reservation to its instance's
// remaining resources.
func giveBack(ci *store.ContainerInstance, r *store.Reservation) {
	rem := readResources(ci.RemainingResources)
	rem.cpu += r.CPU
	rem.memory += r.Memory
	registered := readResources(ci.RegisteredResources)
	rem.ports = slices.DeleteFunc(rem.ports, func(p string) bool {
		return slices.Contains(r.Ports, p) && !slices.Contains(registered.ports, p)
	})
	ci.RemainingResources = rem.Shapes()
}

// stoppedNow dates a STOPPED task the agent reported without a stop time:
// its retention counts from stoppedAt (expire.go).
func (s *State) stoppedNow(t *store.Task) {
	if t.StoppedAt.IsZero() {
		t.StoppedAt = shapes.At(s.Now())
	}
}

// mergeState copies an agent's report into the task record and tells
// whether anything but the report's sequence changed: a report that adds
// nothing (a task's first, PROVISIONING as the server created it) is not
// written, which saves a task write per task started.
func mergeState(t *store.Task, st protocol.TaskState) (changed bool) {
	t.StateSeq = st.Seq
	setString := func(dst *string, v string) {
		if *dst != v {
			*dst, changed = v, true
		}
	}
	// A status never moves back, whatever the sequence says (a replayed or
	// reordered report, an agent whose counter restarted).
	if st.LastStatus != "" && statusRank(st.LastStatus) >= statusRank(t.LastStatus) {
		setString(&t.LastStatus, st.LastStatus)
	}
	if st.HealthStatus != "" {
		setString(&t.HealthStatus, st.HealthStatus)
	}
	at := func(dst *shapes.Timestamp, v interface{ IsZero() bool }, src shapes.Timestamp) {
		if dst.IsZero() && !v.IsZero() {
			*dst, changed = src, true
		}
	}
	at(&t.PullStartedAt, st.PullStartedAt, shapes.At(st.PullStartedAt))
	at(&t.PullStoppedAt, st.PullStoppedAt, shapes.At(st.PullStoppedAt))
	at(&t.StartedAt, st.StartedAt, shapes.At(st.StartedAt))
	at(&t.StoppingAt, st.StoppingAt, shapes.At(st.StoppingAt))
	at(&t.StoppedAt, st.StoppedAt, shapes.At(st.StoppedAt))
	if t.LastStatus == "STOPPED" {
		at(&t.ExecutionStoppedAt, st.StoppedAt, shapes.At(st.StoppedAt))
	}
	if st.StoppedReason != "" && t.StoppedReason == "" {
		t.StoppedReason, t.StopCode, changed = st.StoppedReason, st.StopCode, true
	}
	if st.Attachments != nil && mergeAttachments(&t.Attachments, st.Attachments) {
		changed = true
	}
	for _, c := range st.Containers {
		i := slices.IndexFunc(t.Containers, func(x shapes.Container) bool { return x.Name == c.Name })
		if i < 0 {
			continue
		}
		dst := &t.Containers[i]
		if c.RuntimeID != "" {
			setString(&dst.RuntimeId, c.RuntimeID)
		}
		if c.LastStatus != "" {
			setString(&dst.LastStatus, c.LastStatus)
		}
		if c.ImageDigest != "" {
			setString(&dst.ImageDigest, c.ImageDigest)
		}
		if c.ExitCode != nil && (dst.ExitCode == nil || *dst.ExitCode != int32(*c.ExitCode)) {
			dst.ExitCode, changed = ptr(int32(*c.ExitCode)), true
		}
		if c.Reason != "" {
			setString(&dst.Reason, c.Reason)
		}
		if c.HealthStatus != "" {
			setString(&dst.HealthStatus, c.HealthStatus)
		}
		if c.NetworkBindings != nil && !reflect.DeepEqual(dst.NetworkBindings, c.NetworkBindings) {
			dst.NetworkBindings, changed = c.NetworkBindings, true
		}
		if c.NetworkInterfaces != nil && !slices.Equal(dst.NetworkInterfaces, c.NetworkInterfaces) {
			dst.NetworkInterfaces, changed = c.NetworkInterfaces, true
		}
	}
	return changed
}

// statusRank orders task statuses as they progress.
func statusRank(s string) int {
	return slices.Index([]string{"PROVISIONING", "PENDING", "ACTIVATING", "RUNNING", "DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED"}, s)
}
