package ops

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/rollout"
	"github.com/capstanhq/capstan/internal/store"
)

// Setting names in previews are the UpdateDaemon request members.
const (
	settingTaskDefinition = "daemonTaskDefinitionArn"
	settingCapacity       = "capacityProviderArns"
	settingDrain          = "deploymentConfiguration.drainPercent"
	settingBake           = "deploymentConfiguration.bakeTimeInMinutes"
	settingAlarms         = "deploymentConfiguration.alarms"
	settingCritical       = "critical"
	settingPropagate      = "propagateTags"
	settingManagedTags    = "enableECSManagedTags"
	settingExecute        = "enableExecuteCommand"
)

// SettingChange is one setting an UpdateDaemon call would change.
type SettingChange struct {
	Setting string `json:"setting"`
	Current any    `json:"current"`
	New     any    `json:"new"`
	// Added and Removed detail a change of capacity providers.
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// PlannedInstance is an instance a rollout would replace.
type PlannedInstance struct {
	ContainerInstanceArn string           `json:"containerInstanceArn"`
	CapacityProviderName string           `json:"capacityProviderName"`
	Status               string           `json:"status"`
	RegisteredAt         shapes.Timestamp `json:"registeredAt,omitzero"`
	CPU                  int64            `json:"cpu"`
	Memory               int64            `json:"memory"`
	// InPlace: the instance was started by hand, not provisioned by
	// Capstan, so the rollout changes its daemon in place instead of
	// replacing it (and needs no extra capacity for it).
	InPlace bool `json:"inPlace"`
}

// RolloutBatch is a set of instances drained together, with the capacity
// their replacements need on top of the fleet (each replaced instance gets
// a replacement of its size before its tasks move).
type RolloutBatch struct {
	Instances   []PlannedInstance `json:"instances"`
	ExtraCPU    int64             `json:"extraCpu"`
	ExtraMemory int64             `json:"extraMemory"`
}

// PreviewDaemonUpdateResponse is what an UpdateDaemon call would do.
type PreviewDaemonUpdateResponse struct {
	DaemonArn string `json:"daemonArn"`
	// CurrentRevisionArn is the revision in effect: the latest, or the
	// rollback target when its deployment was rolled back.
	CurrentRevisionArn string `json:"currentRevisionArn"`
	// IfRevisionArn is the daemon's latest revision: given to
	// UpdateDaemonIfUnchanged, the update applies only if no other update
	// or rollback came in between.
	IfRevisionArn string `json:"ifRevisionArn"`
	// Resets are settings the request omits that would go back to their
	// defaults from a non-default current value.
	Resets []SettingChange `json:"resets"`
	// Changes are all settings that differ from the current revision,
	// resets included.
	Changes []SettingChange `json:"changes"`
	// TaskDefinitionChanges detail a change of daemon task definition
	// field by field (image, environment variables, memory, ...).
	TaskDefinitionChanges []FieldChange `json:"taskDefinitionChanges"`
	// CurrentConfiguration is the current revision as an UpdateDaemon
	// request: sending it back changes nothing but starts a deployment.
	CurrentConfiguration shapes.UpdateDaemonRequest `json:"currentConfiguration"`
	// InstancesInScope counts the instances of the current and target
	// capacity providers (not INACTIVE). Every UpdateDaemon makes a new
	// revision, so all of them are replaced but those already draining,
	// which are leaving anyway.
	InstancesInScope   int            `json:"instancesInScope"`
	InstancesToReplace int            `json:"instancesToReplace"`
	DrainPercent       float64        `json:"drainPercent"`
	BatchSize          int            `json:"batchSize"`
	Batches            []RolloutBatch `json:"batches"`
}

// PreviewDaemonUpdate validates an UpdateDaemon request as UpdateDaemon
// would and reports what it would change, without changing anything.
func (s *Service) PreviewDaemonUpdate(ctx context.Context, req *shapes.UpdateDaemonRequest) (*PreviewDaemonUpdateResponse, error) {
	it, cl, err := s.liveDaemon(ctx, req.DaemonArn)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	d := it.Value
	if d.Status != "ACTIVE" {
		return nil, fault.Conflicting("DaemonNotActiveException", "daemon %s is %s and cannot be updated", d.Arn, d.Status)
	}
	next, _, err := s.spec(ctx, cl, daemonRequest{
		taskDefinition: req.DaemonTaskDefinitionArn, capacityProviders: req.CapacityProviderArns,
		deployment: req.DeploymentConfiguration, critical: req.Critical, propagateTags: req.PropagateTags,
		managedTags: req.EnableECSManagedTags, executeCommand: req.EnableExecuteCommand,
	})
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	rev, err := s.revisionInEffect(ctx, d)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	cur := revisionSpec(rev)
	out := &PreviewDaemonUpdateResponse{DaemonArn: d.Arn, CurrentRevisionArn: rev.DaemonRevisionArn, IfRevisionArn: d.RevisionArn,
		CurrentConfiguration: revisionRequest(d.Arn, rev)}
	out.Changes, out.Resets = diffSpecs(cur, next, req)
	out.TaskDefinitionChanges = []FieldChange{}
	if cur.TaskDefinitionArn != next.TaskDefinitionArn {
		// The current definition may have been deleted since; then
		// there is nothing to compare with, and the ARN change says it.
		a, aerr := s.daemonTaskDefinition(ctx, "daemonTaskDefinitionArn", cur.TaskDefinitionArn)
		b, berr := s.daemonTaskDefinition(ctx, "daemonTaskDefinitionArn", next.TaskDefinitionArn)
		if aerr == nil && berr == nil {
			out.TaskDefinitionChanges = diffDefinitions(a.Value.DaemonTaskDefinition, b.Value.DaemonTaskDefinition)
		}
	}

	scope := slices.Clone(next.CapacityProviderArns)
	for _, cp := range cur.CapacityProviderArns {
		if !slices.Contains(scope, cp) {
			scope = append(scope, cp)
		}
	}
	insts, err := s.instancesIn(ctx, d.Cluster, scope)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	out.InstancesInScope = len(insts)
	insts = slices.DeleteFunc(insts, func(in PlannedInstance) bool { return in.Status == "DRAINING" || in.Status == "DEREGISTERING" })
	out.InstancesToReplace = len(insts)
	out.DrainPercent = *next.DeploymentConfiguration.DrainPercent
	out.BatchSize = rollout.BatchSize(len(insts), out.DrainPercent)
	out.Batches = planBatches(insts, out.BatchSize)
	return out, nil
}

// DescribeDaemonConfigurationRequest names a daemon.
type DescribeDaemonConfigurationRequest struct {
	DaemonArn string `json:"daemonArn"`
}

// DescribeDaemonConfigurationResponse is the daemon's current revision as
// an UpdateDaemon request (ECS has no read for these settings).
type DescribeDaemonConfigurationResponse struct {
	DaemonArn            string                     `json:"daemonArn"`
	CurrentRevisionArn   string                     `json:"currentRevisionArn"`
	CurrentConfiguration shapes.UpdateDaemonRequest `json:"currentConfiguration"`
}

// DescribeDaemonConfiguration returns the settings of the daemon's current
// revision, so a client can repeat the ones an update does not change.
func (s *Service) DescribeDaemonConfiguration(ctx context.Context, req *DescribeDaemonConfigurationRequest) (*DescribeDaemonConfigurationResponse, error) {
	if req.DaemonArn == "" {
		return nil, fault.Invalid("daemonArn", "is required")
	}
	it, _, err := s.liveDaemon(ctx, req.DaemonArn)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	rev, err := s.revisionInEffect(ctx, it.Value)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	return &DescribeDaemonConfigurationResponse{DaemonArn: it.Value.Arn, CurrentRevisionArn: rev.DaemonRevisionArn,
		CurrentConfiguration: revisionRequest(it.Value.Arn, rev)}, nil
}

// revisionInEffect is the revision whose settings the daemon runs with:
// its latest, unless the deployment to it was rolled back, in which case
// the instances went back to the rollback target (a release that failed
// is not what a preview or --keep-unspecified should build on).
func (s *Service) revisionInEffect(ctx context.Context, d store.Daemon) (store.DaemonRevision, error) {
	arn := d.RevisionArn
	if dep, err := s.deploymentByArn(ctx, d.DeploymentArn); err == nil && dep.Status == "ROLLBACK_SUCCESSFUL" &&
		dep.Rollback != nil && dep.Rollback.RollbackTargetDaemonRevisionArn != "" {
		arn = dep.Rollback.RollbackTargetDaemonRevisionArn
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.DaemonRevision{}, err
	}
	return s.daemonRevision(ctx, arn)
}

// daemonRevision reads a revision by ARN.
func (s *Service) daemonRevision(ctx context.Context, arn string) (store.DaemonRevision, error) {
	c, dn, id, ok := s.ARNs.DaemonChild("daemon-revision", arn)
	if !ok {
		return store.DaemonRevision{}, store.ErrNotFound
	}
	it, err := store.Get[store.DaemonRevision](ctx, s.Store, store.DaemonRevisionKey(c, dn, id))
	return it.Value, err
}

// revisionSpec reads a revision's snapshot back as a daemon spec.
func revisionSpec(r store.DaemonRevision) store.DaemonSpec {
	sp := store.DaemonSpec{TaskDefinitionArn: r.DaemonTaskDefinitionArn, CapacityProviderArns: r.CapacityProviderArns,
		DeploymentConfiguration: r.DeploymentConfiguration, Critical: r.Critical == nil || *r.Critical,
		PropagateTags: r.PropagateTags, EnableECSManagedTags: r.EnableECSManagedTags != nil && *r.EnableECSManagedTags,
		EnableExecuteCommand: r.EnableExecuteCommand != nil && *r.EnableExecuteCommand}
	if sp.PropagateTags == "" {
		sp.PropagateTags = DefaultPropagate
	}
	dc := &sp.DeploymentConfiguration
	if dc.DrainPercent == nil {
		dc.DrainPercent = ptr(DefaultDrainPercent)
	}
	if dc.BakeTimeInMinutes == nil {
		dc.BakeTimeInMinutes = ptr(int32(0))
	}
	return sp
}

// revisionRequest is the UpdateDaemon request that recreates a revision's
// settings, every member explicit.
func revisionRequest(daemonArn string, r store.DaemonRevision) shapes.UpdateDaemonRequest {
	sp := revisionSpec(r)
	dc := shapes.DaemonDeploymentConfiguration{DrainPercent: ptr(*sp.DeploymentConfiguration.DrainPercent),
		BakeTimeInMinutes: ptr(*sp.DeploymentConfiguration.BakeTimeInMinutes)}
	if a := sp.DeploymentConfiguration.Alarms; a != nil {
		dc.Alarms = &shapes.DaemonAlarmConfiguration{AlarmNames: slices.Clone(a.AlarmNames), Enable: ptr(a.Enable != nil && *a.Enable)}
	}
	return shapes.UpdateDaemonRequest{DaemonArn: daemonArn, DaemonTaskDefinitionArn: sp.TaskDefinitionArn,
		CapacityProviderArns: slices.Clone(sp.CapacityProviderArns), DeploymentConfiguration: &dc,
		Critical: ptr(sp.Critical), PropagateTags: sp.PropagateTags,
		EnableECSManagedTags: ptr(sp.EnableECSManagedTags), EnableExecuteCommand: ptr(sp.EnableExecuteCommand)}
}

// alarmsView is how a preview shows an alarm configuration: nil when off.
func alarmsView(a *shapes.DaemonAlarmConfiguration) *shapes.DaemonAlarmConfiguration {
	if a == nil || (len(a.AlarmNames) == 0 && (a.Enable == nil || !*a.Enable)) {
		return nil
	}
	return &shapes.DaemonAlarmConfiguration{AlarmNames: slices.Clone(a.AlarmNames), Enable: ptr(a.Enable != nil && *a.Enable)}
}

func sameAlarms(a, b *shapes.DaemonAlarmConfiguration) bool {
	a, b = alarmsView(a), alarmsView(b)
	if a == nil || b == nil {
		return a == b
	}
	return *a.Enable == *b.Enable && slices.Equal(a.AlarmNames, b.AlarmNames)
}

// diffSpecs lists the settings next changes against cur, and of those the
// ones req omitted (so they fall back to defaults).
func diffSpecs(cur, next store.DaemonSpec, req *shapes.UpdateDaemonRequest) (changes, resets []SettingChange) {
	changes, resets = []SettingChange{}, []SettingChange{}
	dc := req.DeploymentConfiguration
	if dc == nil {
		dc = &shapes.DaemonDeploymentConfiguration{}
	}
	add := func(c SettingChange, omitted bool) {
		changes = append(changes, c)
		if omitted {
			resets = append(resets, c)
		}
	}
	if cur.TaskDefinitionArn != next.TaskDefinitionArn {
		add(SettingChange{Setting: settingTaskDefinition, Current: cur.TaskDefinitionArn, New: next.TaskDefinitionArn}, false)
	}
	var added, removed []string
	for _, cp := range next.CapacityProviderArns {
		if !slices.Contains(cur.CapacityProviderArns, cp) {
			added = append(added, cp)
		}
	}
	for _, cp := range cur.CapacityProviderArns {
		if !slices.Contains(next.CapacityProviderArns, cp) {
			removed = append(removed, cp)
		}
	}
	if len(added)+len(removed) > 0 {
		add(SettingChange{Setting: settingCapacity, Current: cur.CapacityProviderArns, New: next.CapacityProviderArns, Added: added, Removed: removed}, false)
	}
	cd, nd := cur.DeploymentConfiguration, next.DeploymentConfiguration
	if *cd.DrainPercent != *nd.DrainPercent {
		add(SettingChange{Setting: settingDrain, Current: *cd.DrainPercent, New: *nd.DrainPercent}, dc.DrainPercent == nil)
	}
	if *cd.BakeTimeInMinutes != *nd.BakeTimeInMinutes {
		add(SettingChange{Setting: settingBake, Current: *cd.BakeTimeInMinutes, New: *nd.BakeTimeInMinutes}, dc.BakeTimeInMinutes == nil)
	}
	if !sameAlarms(cd.Alarms, nd.Alarms) {
		add(SettingChange{Setting: settingAlarms, Current: alarmsView(cd.Alarms), New: alarmsView(nd.Alarms)}, dc.Alarms == nil)
	}
	if cur.Critical != next.Critical {
		add(SettingChange{Setting: settingCritical, Current: cur.Critical, New: next.Critical}, req.Critical == nil)
	}
	if cur.PropagateTags != next.PropagateTags {
		add(SettingChange{Setting: settingPropagate, Current: cur.PropagateTags, New: next.PropagateTags}, req.PropagateTags == "")
	}
	if cur.EnableECSManagedTags != next.EnableECSManagedTags {
		add(SettingChange{Setting: settingManagedTags, Current: cur.EnableECSManagedTags, New: next.EnableECSManagedTags}, req.EnableECSManagedTags == nil)
	}
	if cur.EnableExecuteCommand != next.EnableExecuteCommand {
		add(SettingChange{Setting: settingExecute, Current: cur.EnableExecuteCommand, New: next.EnableExecuteCommand}, req.EnableExecuteCommand == nil)
	}
	return changes, resets
}

// instancesIn lists the cluster's container instances of the given
// capacity providers that are not INACTIVE.
func (s *Service) instancesIn(ctx context.Context, cluster string, cpArns []string) ([]PlannedInstance, error) {
	items, _, err := store.List[store.ContainerInstance](ctx, s.Store, store.ContainerInstancePrefix(cluster), "", 0)
	if err != nil {
		return nil, err
	}
	var out []PlannedInstance
	for _, it := range items {
		ci := it.Value
		if ci.Status == "INACTIVE" || ci.CapacityProviderName == "" || !slices.Contains(cpArns, s.ARNs.CapacityProvider(ci.CapacityProviderName)) {
			continue
		}
		out = append(out, PlannedInstance{ContainerInstanceArn: ci.ContainerInstanceArn, CapacityProviderName: ci.CapacityProviderName,
			Status: ci.Status, RegisteredAt: ci.RegisteredAt, CPU: resource(ci.RegisteredResources, "CPU"), Memory: resource(ci.RegisteredResources, "MEMORY"),
			InPlace: !s.Managed(ctx, ci)})
	}
	return out, nil
}

func resource(rs []shapes.Resource, name string) int64 {
	for _, r := range rs {
		if r.Name != name {
			continue
		}
		switch {
		case r.IntegerValue != nil:
			return int64(*r.IntegerValue)
		case r.LongValue != nil:
			return *r.LongValue
		case r.DoubleValue != nil:
			return int64(math.Round(*r.DoubleValue))
		}
	}
	return 0
}

// planBatches orders instances as the rollout replaces them (oldest
// registration first, then ARN) and cuts them into batches.
func planBatches(insts []PlannedInstance, size int) []RolloutBatch {
	insts = slices.Clone(insts)
	slices.SortFunc(insts, func(a, b PlannedInstance) int {
		return cmp.Or(a.RegisteredAt.Compare(b.RegisteredAt.Time), strings.Compare(a.ContainerInstanceArn, b.ContainerInstanceArn))
	})
	batches := []RolloutBatch{}
	for len(insts) > 0 {
		n := min(size, len(insts))
		b := RolloutBatch{Instances: insts[:n]}
		for _, in := range b.Instances {
			if !in.InPlace {
				b.ExtraCPU += in.CPU
				b.ExtraMemory += in.Memory
			}
		}
		batches = append(batches, b)
		insts = insts[n:]
	}
	return batches
}

// RollbackDaemonRequest asks for a deployment back to an earlier revision.
type RollbackDaemonRequest struct {
	DaemonArn string `json:"daemonArn"`
	// ToRevisionArn defaults to the revision before the current one.
	ToRevisionArn string `json:"toRevisionArn,omitempty"`
}

// RollbackDaemon redeploys an earlier revision's settings: it is an
// UpdateDaemon built from that revision's snapshot, so it starts a normal
// deployment towards a new revision with the old settings (revisions are
// immutable; the history keeps the failed one).
func (s *Service) RollbackDaemon(ctx context.Context, req *RollbackDaemonRequest) (*shapes.UpdateDaemonResponse, error) {
	if req.DaemonArn == "" {
		return nil, fault.Invalid("daemonArn", "is required")
	}
	it, _, err := s.liveDaemon(ctx, req.DaemonArn)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	d := it.Value
	target, err := s.rollbackTarget(ctx, d, req.ToRevisionArn)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	up := revisionRequest(d.Arn, target)
	out, err := s.UpdateDaemon(ctx, &up)
	if fe := fault.As(err); fe != nil && fe.Kind == fault.InvalidParameter || fe != nil && fe.Kind == fault.Client {
		// The old settings may name what no longer exists (a deregistered
		// task definition, a deleted capacity provider).
		e := *fe
		e.Message = "toRevisionArn: revision " + target.DaemonRevisionArn + " cannot be deployed again: " + fe.Message
		return nil, &e
	}
	return out, err
}

// ownRevision tells this daemon's revisions from those of a deleted daemon
// of the same name (revision times are kept to the millisecond).
func ownRevision(d store.Daemon, r store.DaemonRevision) bool {
	return !r.CreatedAt.Before(d.CreatedAt.Truncate(time.Millisecond))
}

// rollbackTarget picks the revision to roll back to: ref, or the one made
// before the daemon's current revision.
func (s *Service) rollbackTarget(ctx context.Context, d store.Daemon, ref string) (store.DaemonRevision, error) {
	if ref != "" {
		c, dn, id, ok := s.ARNs.DaemonChild("daemon-revision", ref)
		if !ok {
			return store.DaemonRevision{}, fault.Invalid("toRevisionArn", "%q is not a daemon revision ARN of this account and region (%s)",
				fleet.Clip(ref), s.ARNs.DaemonRevision("CLUSTER", "DAEMON", "ID"))
		}
		if c != d.Cluster || dn != d.Name {
			return store.DaemonRevision{}, fault.Invalid("toRevisionArn", "revision %s belongs to daemon %s, not to %s", ref, s.ARNs.Daemon(c, dn), d.Arn)
		}
		it, err := store.Get[store.DaemonRevision](ctx, s.Store, store.DaemonRevisionKey(c, dn, id))
		if errors.Is(err, store.ErrNotFound) {
			return store.DaemonRevision{}, fault.Invalid("toRevisionArn", "daemon revision %s does not exist", ref)
		}
		if err != nil {
			return store.DaemonRevision{}, err
		}
		r := it.Value
		if !ownRevision(d, r) {
			return store.DaemonRevision{}, fault.Invalid("toRevisionArn", "revision %s belongs to an earlier, deleted daemon named %q", ref, d.Name)
		}
		if r.DaemonRevisionArn == d.RevisionArn {
			return store.DaemonRevision{}, fault.Invalid("toRevisionArn", "revision %s is the daemon's current revision; name an earlier one", ref)
		}
		return r, nil
	}
	items, _, err := store.List[store.DaemonRevision](ctx, s.Store, store.DaemonRevisionPrefix(d.Cluster, d.Name), "", 0)
	if err != nil {
		return store.DaemonRevision{}, err
	}
	// Revision IDs sort by creation time; a same-named daemon deleted
	// earlier left older ones that are not this daemon's.
	var prev *store.DaemonRevision
	for i := range items {
		r := &items[i].Value
		if r.DaemonRevisionArn == d.RevisionArn {
			break
		}
		if ownRevision(d, *r) {
			prev = r
		}
	}
	if prev == nil {
		return store.DaemonRevision{}, fault.Invalid("toRevisionArn", "daemon %s has no revision before its current one (%s); there is nothing to roll back to", d.Arn, d.RevisionArn)
	}
	return *prev, nil
}
