package control

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/controller/deployments"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// Rollout is the fleet a daemon rollout works on; it implements
// deployments.Fleet over the service's records.
func (s *Service) Rollout() deployments.Fleet { return rolloutFleet{s} }

type rolloutFleet struct{ s *Service }

// Managed reports whether Capstan provisioned the instance (through its
// credential): such instances are replaced, never changed in place.
func (s *Service) Managed(ctx context.Context, ci store.ContainerInstance) bool {
	v, err := s.fleetView(ctx)
	if err != nil {
		return false
	}
	defer v.done()
	return v.f.managed[ci.AccessKeyID]
}

func (f rolloutFleet) Instances(ctx context.Context, dep store.DaemonDeployment) ([]deployments.Instance, error) {
	s := f.s
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, err
	}
	c := v.cluster(dep.Cluster)
	// By name, the ARN built once per provider rather than per instance.
	cps := map[string]string{}
	for _, a := range dep.CapacityProviderArns {
		cps[lastPart(a)] = a
	}
	n := 0 // the kept counts are those of the instances taken below
	for name := range cps {
		if st := c.cps[name]; st != nil {
			n += st.instances
		}
	}
	out := make([]deployments.Instance, 0, n)
	for _, fi := range c.instances {
		cp := cps[fi.cp]
		if !fi.rec || fi.status == "INACTIVE" || cp == "" {
			continue
		}
		in := deployments.Instance{ID: fi.id, Arn: fi.arn, CapacityProvider: cp, Status: fi.status,
			RegisteredAt: fi.registeredAt, Managed: v.f.managed[fi.accessKeyID], Connected: fi.connected}
		in.Revision, in.Running = c.daemonOnCounted(fi, dep.Daemon)
		out = append(out, in)
	}
	v.done()
	// Key order, as the records list, sorted once the view is let go: a
	// reader holding it holds back the cache's next change, and every
	// reader after that (the API's among them).
	sortByID(out)
	return out, nil
}

// sortByID puts the instances in ID order. It sorts keys that hold each
// ID's first 8 bytes, which settle nearly every comparison of random IDs
// without reading the strings, then moves each instance once, following
// the permutation's cycles. Sorting the instances themselves took 3.6-4.1
// ms at 10,000 against 1.6-1.7 ms so (BenchmarkSortInstances): most of it
// was reading IDs scattered over the heap.
func sortByID(in []deployments.Instance) {
	type key struct {
		prefix uint64
		i      int32 // where the instance is; -1 once it is in place
	}
	keys := make([]key, len(in))
	for i := range in {
		var b [8]byte
		copy(b[:], in[i].ID)
		keys[i] = key{binary.BigEndian.Uint64(b[:]), int32(i)}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(a.prefix, b.prefix); c != 0 {
			return c
		}
		return strings.Compare(in[a.i].ID, in[b.i].ID)
	})
	// Position j takes the instance at keys[j].i.
	for start := range keys {
		if keys[start].i < 0 {
			continue
		}
		held := in[start]
		for j := start; ; {
			from := int(keys[j].i)
			keys[j].i = -1
			if from == start {
				in[j] = held
				break
			}
			in[j] = in[from]
			j = from
		}
	}
}

func (f rolloutFleet) ReplacementStates(ctx context.Context, cluster string, ids []string) (map[string]string, error) {
	var ms []*ManagedInstance
	for _, id := range ids {
		m, err := f.s.managedMemo.Get(ctx, f.s.st, ManagedInstanceKey(cluster, id))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !m.Value.Terminating {
			ms = append(ms, &m.Value)
		}
	}
	regs, err := f.s.Registrations(ctx, ms)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ms))
	for i, m := range ms {
		switch ci := regs[i]; {
		case ci.ID == "":
			out[m.ID] = deployments.ReplacementLaunching
		case ci.Status != "INACTIVE":
			out[m.ID] = ci.Status
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
			// The old task stops in the same write, so the whole batch's
			// agents hear of it at once; the daemons controller only starts
			// the new one once it has stopped (it would stop it otherwise,
			// one instance per worker at a time).
			if v.TaskID != "" && v.TaskRevisionArn != "" && v.TaskRevisionArn != st.Target {
				t, err := store.Get[store.Task](ctx, s.st, store.TaskKey(dep.Cluster, v.TaskID))
				if err == nil && t.Value.DesiredStatus != "STOPPED" {
					if err := s.stopTaskTxn(ctx, tx, t, "ServiceSchedulerInitiated", "Daemon deployment: replaced by revision "+st.Target); err != nil {
						return store.Replacement{}, err
					}
				}
			}
		}
		return store.Replacement{Instance: ci.ID, InPlace: true}, nil
	}
	if st.Retire {
		if ci.Status != "DRAINING" {
			ci.Status, ci.StatusReason = "DRAINING", "Retired by daemon deployment "+lastPart(dep.DaemonDeploymentArn)+" before it served"
			*ci.Version++
			tx.Update(it.Key, it.Rev, ci)
			tx.OnCommit(func() { s.instanceChanged(context.WithoutCancel(ctx), ci) })
		}
		return store.Replacement{Instance: ci.ID}, nil
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

func (f rolloutFleet) Snapshot(ctx context.Context, dep *store.DaemonDeployment) error {
	return f.s.liveDeploymentCounts(ctx, *dep, &dep.DaemonDeployment)
}

// DescribeDaemonRolloutRequest names a daemon and, optionally, one of its
// deployments (default: the latest).
type DescribeDaemonRolloutRequest struct {
	DaemonArn           string `json:"daemonArn"`
	DaemonDeploymentArn string `json:"daemonDeploymentArn,omitempty"`
}

// RolloutCapacityProvider is how far a rollout is on one capacity provider.
type RolloutCapacityProvider struct {
	Arn       string `json:"arn"`
	Name      string `json:"name"`
	Instances int    `json:"instances"`
	OnTarget  int    `json:"onTarget"`
	Draining  int    `json:"draining"`
	Remaining int    `json:"remaining"`
	Launching int    `json:"launching"`
}

// RolloutStall is why a rollout does not progress.
type RolloutStall struct {
	Kind    string           `json:"kind"`
	Message string           `json:"message"`
	Since   shapes.Timestamp `json:"since,omitzero"`
}

// RolloutAlarms is the alarm watch of a rollout.
type RolloutAlarms struct {
	Status              string   `json:"status"`
	AlarmNames          []string `json:"alarmNames"`
	TriggeredAlarmNames []string `json:"triggeredAlarmNames"`
	IgnoredAlarmNames   []string `json:"ignoredAlarmNames"`
	Error               string   `json:"error,omitempty"`
}

// RolloutBreaker is the circuit breaker of a rollout.
type RolloutBreaker struct {
	FailureCount int    `json:"failureCount"`
	Threshold    int    `json:"threshold"`
	Status       string `json:"status"`
}

// DescribeDaemonRolloutResponse is a rollout as an operator follows it.
type DescribeDaemonRolloutResponse struct {
	DaemonArn                       string                    `json:"daemonArn"`
	DaemonDeploymentArn             string                    `json:"daemonDeploymentArn"`
	Status                          string                    `json:"status"`
	StatusReason                    string                    `json:"statusReason,omitempty"`
	TargetDaemonRevisionArn         string                    `json:"targetDaemonRevisionArn,omitempty"`
	RollbackTargetDaemonRevisionArn string                    `json:"rollbackTargetDaemonRevisionArn,omitempty"`
	BatchSize                       int                       `json:"batchSize"`
	Replaced                        int                       `json:"replaced"`
	CapacityProviders               []RolloutCapacityProvider `json:"capacityProviders"`
	CircuitBreaker                  RolloutBreaker            `json:"circuitBreaker"`
	Alarms                          RolloutAlarms             `json:"alarms"`
	BakeTimeInMinutes               int                       `json:"bakeTimeInMinutes"`
	BakeEndsAt                      shapes.Timestamp          `json:"bakeEndsAt,omitzero"`
	Stalled                         *RolloutStall             `json:"stalled,omitempty"`
	StopReasons                     []string                  `json:"stopReasons"`
	ProgressDeadlineSeconds         int                       `json:"progressDeadlineSeconds"`
	LastProgressAt                  shapes.Timestamp          `json:"lastProgressAt,omitzero"`
	CreatedAt                       shapes.Timestamp          `json:"createdAt,omitzero"`
	StartedAt                       shapes.Timestamp          `json:"startedAt,omitzero"`
	FinishedAt                      shapes.Timestamp          `json:"finishedAt,omitzero"`
	StoppedAt                       shapes.Timestamp          `json:"stoppedAt,omitzero"`
}

// DescribeDaemonRollout reports a daemon deployment's progress with what
// ECS does not show: per capacity provider progress, the batch, the bake
// window, and why it is stuck.
func (s *Service) DescribeDaemonRollout(ctx context.Context, req *DescribeDaemonRolloutRequest) (*DescribeDaemonRolloutResponse, error) {
	d, _, err := s.liveDaemon(ctx, req.DaemonArn)
	depArn := req.DaemonDeploymentArn
	switch {
	case err == nil && depArn == "":
		depArn = d.Value.DeploymentArn
	case err != nil && depArn == "":
		// A deleted daemon's deployments stay describable by ARN.
		return nil, err
	}
	dep, err := s.deploymentByArn(ctx, depArn)
	if errors.Is(err, store.ErrNotFound) || (err == nil && dep.DaemonArn != req.DaemonArn) {
		return nil, fault.Invalid("daemonDeploymentArn", "no deployment %q of daemon %s", clip(depArn), req.DaemonArn)
	}
	if err != nil {
		return nil, storeErr(err)
	}
	ro := dep.Rollout
	out := &DescribeDaemonRolloutResponse{DaemonArn: dep.DaemonArn, DaemonDeploymentArn: dep.DaemonDeploymentArn, Status: dep.Status, StatusReason: dep.StatusReason,
		TargetDaemonRevisionArn: dep.TargetRevisionArn, BatchSize: ro.BatchSize, Replaced: ro.Replaced, StopReasons: append([]string{}, ro.StopReasons...),
		ProgressDeadlineSeconds: int(s.progressDeadline / time.Second), CreatedAt: dep.CreatedAt, StartedAt: dep.StartedAt,
		FinishedAt: dep.FinishedAt, StoppedAt: dep.StoppedAt, CapacityProviders: []RolloutCapacityProvider{}}
	if !ro.LastProgressAt.IsZero() {
		out.LastProgressAt = shapes.At(ro.LastProgressAt)
	}
	if !ro.BakeUntil.IsZero() {
		out.BakeEndsAt = shapes.At(ro.BakeUntil)
	}
	if dep.Rollback != nil {
		out.RollbackTargetDaemonRevisionArn = dep.Rollback.RollbackTargetDaemonRevisionArn
	}
	if dc := dep.DeploymentConfiguration; dc != nil && dc.BakeTimeInMinutes != nil {
		out.BakeTimeInMinutes = int(*dc.BakeTimeInMinutes)
	}
	if cb := dep.CircuitBreaker; cb != nil {
		out.CircuitBreaker.Status = cb.Status
		if cb.FailureCount != nil {
			out.CircuitBreaker.FailureCount = int(*cb.FailureCount)
		}
		if cb.Threshold != nil {
			out.CircuitBreaker.Threshold = int(*cb.Threshold)
		}
	}
	out.Alarms = RolloutAlarms{AlarmNames: []string{}, TriggeredAlarmNames: []string{}, IgnoredAlarmNames: append([]string{}, ro.FiringAtStart...), Error: ro.AlarmError}
	if a := dep.Alarms; a != nil {
		out.Alarms.Status = a.Status
		out.Alarms.AlarmNames = append(out.Alarms.AlarmNames, a.AlarmNames...)
		out.Alarms.TriggeredAlarmNames = append(out.Alarms.TriggeredAlarmNames, a.TriggeredAlarmNames...)
	}
	if st := ro.Stalled; st != nil && deployments.InFlight(dep.Status) {
		out.Stalled = &RolloutStall{Kind: st.Kind, Message: st.Message, Since: shapes.At(st.Since)}
	}
	if !deployments.InFlight(dep.Status) {
		// As it ended: the counts the deployment kept.
		if t := dep.TargetDaemonRevision; t != nil {
			for _, cp := range t.CapacityProviders {
				run, drain, without := int(deref(cp.RunningInstanceCount)), int(deref(cp.DrainingInstanceCount)), int(deref(cp.WithoutDaemonInstanceCount))
				out.CapacityProviders = append(out.CapacityProviders, RolloutCapacityProvider{Arn: cp.Arn, Name: lastPart(cp.Arn),
					Instances: run + drain + without, OnTarget: run, Draining: drain, Remaining: without})
			}
		}
		return out, nil
	}
	insts, err := rolloutFleet{s}.Instances(ctx, dep)
	if err != nil {
		return nil, storeErr(err)
	}
	byCP := map[string]*RolloutCapacityProvider{}
	for _, cp := range dep.CapacityProviderArns {
		byCP[cp] = &RolloutCapacityProvider{Arn: cp, Name: lastPart(cp)}
	}
	for _, in := range insts {
		c := byCP[in.CapacityProvider]
		if c == nil {
			continue
		}
		c.Instances++
		on := deployments.Ready(dep, in)
		switch {
		case in.Status == "DRAINING" || in.Status == "DEREGISTERING":
			c.Draining++
		case on:
			c.OnTarget++
		case in.Status == "REGISTERING":
			c.Launching++
		default:
			c.Remaining++
		}
	}
	var ids []string
	for _, e := range ro.Replacing {
		if e.ManagedInstance != "" {
			ids = append(ids, e.ManagedInstance)
		}
	}
	if states, err := (rolloutFleet{s}).ReplacementStates(ctx, dep.Cluster, ids); err == nil {
		for _, e := range ro.Replacing {
			if states[e.ManagedInstance] == deployments.ReplacementLaunching {
				if old, ok := byCP[s.arns.capacityProvider(cpOfInstance(insts, e.Instance))]; ok {
					old.Launching++
				}
			}
		}
	}
	for _, cp := range dep.CapacityProviderArns {
		out.CapacityProviders = append(out.CapacityProviders, *byCP[cp])
	}
	return out, nil
}

func cpOfInstance(insts []deployments.Instance, id string) string {
	for _, in := range insts {
		if in.ID == id {
			return lastPart(in.CapacityProvider)
		}
	}
	return ""
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
