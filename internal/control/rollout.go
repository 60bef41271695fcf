package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/controller/deployments"
	"github.com/capstanhq/capstan/internal/store"
)

// Rollout is the fleet a daemon rollout works on; it implements
// deployments.Fleet over the service's records.
func (s *Service) Rollout() deployments.Fleet { return rolloutFleet{s} }

type rolloutFleet struct{ s *Service }

// Managed reports whether Capstan provisioned the instance (through its
// credential): such instances are replaced, never changed in place.
func (s *Service) Managed(ctx context.Context, ci store.ContainerInstance) bool {
	if ci.AccessKeyID == "" {
		return false
	}
	c, err := store.Get[store.AgentCredential](ctx, s.st, store.CredentialKey(ci.AccessKeyID))
	return err == nil && c.Value.Managed
}

func (f rolloutFleet) Instances(ctx context.Context, dep store.DaemonDeployment) ([]deployments.Instance, error) {
	s := f.s
	items, _, err := store.List[store.ContainerInstance](ctx, s.st, store.ContainerInstancePrefix(dep.Cluster), "", 0)
	if err != nil {
		return nil, err
	}
	var out []deployments.Instance
	for _, it := range items {
		ci := it.Value
		if ci.Status == "INACTIVE" || ci.CapacityProviderName == "" {
			continue
		}
		cp := s.arns.capacityProvider(ci.CapacityProviderName)
		if !slices.Contains(dep.CapacityProviderArns, cp) {
			continue
		}
		in := deployments.Instance{ID: ci.ID, Arn: ci.ContainerInstanceArn, CapacityProvider: cp, Status: ci.Status,
			RegisteredAt: ci.RegisteredAt.Time, Managed: s.Managed(ctx, ci), Connected: s.Connected(ctx, ci.Cluster, ci.ID)}
		p, err := store.Get[DaemonPlacement](ctx, s.st, DaemonPlacementKey(dep.Cluster, ci.ID, dep.Daemon))
		switch {
		case err == nil:
			in.Revision = p.Value.RevisionArn
			if p.Value.TaskID != "" && (p.Value.TaskRevisionArn == "" || p.Value.TaskRevisionArn == p.Value.RevisionArn) {
				t, err := store.Get[store.Task](ctx, s.st, store.TaskKey(dep.Cluster, p.Value.TaskID))
				in.Running = err == nil && t.Value.LastStatus == "RUNNING" && t.Value.DesiredStatus == "RUNNING"
			}
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

func (f rolloutFleet) ReplacementStates(ctx context.Context, cluster string, ids []string) (map[string]string, error) {
	out := map[string]string{}
	for _, id := range ids {
		m, err := store.Get[ManagedInstance](ctx, f.s.st, ManagedInstanceKey(cluster, id))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m.Value.Terminating {
			continue
		}
		ci, registered, err := f.s.InstanceOf(ctx, m.Value)
		if err != nil {
			return nil, err
		}
		switch {
		case !registered:
			out[id] = deployments.ReplacementLaunching
		case ci.Status != "INACTIVE":
			out[id] = ci.Status
		}
	}
	return out, nil
}

func (f rolloutFleet) Replace(ctx context.Context, tx *store.Txn, dep store.DaemonDeployment, st deployments.Start) (store.Replacement, error) {
	s := f.s
	it, err := store.Get[store.ContainerInstance](ctx, s.st, store.ContainerInstanceKey(dep.Cluster, st.Instance.ID))
	if err != nil {
		return store.Replacement{}, err
	}
	ci := it.Value
	if st.InPlace {
		// The daemons controller moves the task to the placement's revision;
		// without a placement it starts one, off the target it stops it.
		p, err := store.Get[DaemonPlacement](ctx, s.st, DaemonPlacementKey(dep.Cluster, ci.ID, dep.Daemon))
		if err == nil && st.Target != "" && p.Value.RevisionArn != st.Target && st.Instance.Revision != "" {
			v := p.Value
			v.RevisionArn, v.Attempts, v.Failure = st.Target, 0, ""
			tx.Update(p.Key, p.Rev, v)
		}
		return store.Replacement{Instance: ci.ID, InPlace: true}, nil
	}
	// Drain the instance and ask for a same-size replacement, in the
	// rollout's own transaction: a crash leaves both or neither.
	m := ManagedInstance{ID: newManagedID(), Cluster: dep.Cluster, CapacityProvider: ci.CapacityProviderName,
		Provisioner: "", Requested: true, Replaces: ci.ID}
	reg := readResources(ci.RegisteredResources)
	m.CPU, m.MemoryMiB = reg.cpu, reg.memory
	if dc, dm, err := s.DaemonsNeed(ctx, dep.Cluster, ci.CapacityProviderName); err == nil {
		m.CPU, m.MemoryMiB = max(m.CPU, dc), max(m.MemoryMiB, dm)
	}
	cred := s.MintAgentCredential(dep.Cluster, "managed instance "+m.ID)
	cred.CapacityProvider, cred.Managed = m.CapacityProvider, true
	m.AccessKeyID = cred.AccessKeyID
	m.LaunchedAt = s.now()
	tx.Create(ManagedInstanceKey(m.Cluster, m.ID), m).Create(store.CredentialKey(cred.AccessKeyID), cred)
	if ci.Status != "DRAINING" {
		ci.Status, ci.StatusReason = "DRAINING", "Replaced by daemon deployment "+lastPart(dep.DaemonDeploymentArn)+" (instance "+m.ID+")"
		*ci.Version++
		tx.Update(it.Key, it.Rev, ci)
		tx.OnCommit(func() { s.instanceChanged(context.WithoutCancel(ctx), ci) })
	}
	return store.Replacement{Instance: ci.ID, ManagedInstance: m.ID}, nil
}

func newManagedID() string {
	var b [6]byte
	rand.Read(b[:])
	return "mi-" + hex.EncodeToString(b[:])
}

func lastPart(arn string) string { return arn[strings.LastIndex(arn, "/")+1:] }

// CountDaemonFailure charges a failed daemon task start to the daemon's
// in-flight deployment when it is of the revision the deployment moves
// to: the circuit breaker forward, the rollback's own count backward.
func (s *Service) CountDaemonFailure(ctx context.Context, cluster, daemon, revisionArn, reason string) error {
	return retry(ctx, func() error {
		d, err := store.Get[store.Daemon](ctx, s.st, store.DaemonKey(cluster, daemon))
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		it, err := store.Get[store.DaemonDeployment](ctx, s.st, store.DaemonDeploymentKey(cluster, daemon, lastPart(d.Value.DeploymentArn)))
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		dep := it.Value
		target, _ := deployments.Target(dep)
		switch {
		case target != revisionArn || revisionArn == "":
			return nil
		case dep.Status == "IN_PROGRESS" && dep.CircuitBreaker != nil:
			n := int32(1)
			if dep.CircuitBreaker.FailureCount != nil {
				n += *dep.CircuitBreaker.FailureCount
			}
			dep.CircuitBreaker.FailureCount = &n
		case dep.Status == "ROLLBACK_IN_PROGRESS":
			dep.Rollout.RollbackFailures++
		default:
			return nil
		}
		if reason == "" {
			reason = "daemon task stopped"
		}
		dep.Rollout.StopReasons = append(dep.Rollout.StopReasons, reason)
		if n := len(dep.Rollout.StopReasons); n > 5 {
			dep.Rollout.StopReasons = dep.Rollout.StopReasons[n-5:]
		}
		_, err = s.st.Txn().Update(it.Key, it.Rev, dep).Commit(ctx)
		return err
	})
}
