package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/rollout"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerDaemons(h *api.Handler) {
	api.Register(h, "CreateDaemon", s.CreateDaemon)
	api.Register(h, "UpdateDaemon", s.UpdateDaemon)
	api.Register(h, "DeleteDaemon", s.DeleteDaemon)
	api.Register(h, "DescribeDaemon", s.DescribeDaemon)
	api.Register(h, "ListDaemons", s.ListDaemons)
	api.Register(h, "DescribeDaemonRevisions", s.DescribeDaemonRevisions)
	api.Register(h, "ListDaemonDeployments", s.ListDaemonDeployments)
	api.Register(h, "DescribeDaemonDeployments", s.DescribeDaemonDeployments)
	api.RegisterExtension(h, "UpdateDaemonIfUnchanged", s.UpdateDaemonIfUnchanged)
}

// UpdateDaemonIfUnchangedRequest is an UpdateDaemon request that applies
// only while the daemon's latest revision is still IfRevisionArn (the
// ifRevisionArn of a PreviewDaemonUpdate), so what was previewed is what
// is deployed.
type UpdateDaemonIfUnchangedRequest struct {
	shapes.UpdateDaemonRequest
	IfRevisionArn string `json:"ifRevisionArn"`
}

// UpdateDaemonIfUnchanged is UpdateDaemon with the check, made in the same
// transaction as the update.
func (s *Service) UpdateDaemonIfUnchanged(ctx context.Context, req *UpdateDaemonIfUnchangedRequest) (*shapes.UpdateDaemonResponse, error) {
	if req.IfRevisionArn == "" {
		return nil, fault.Invalid("ifRevisionArn", "is required: the ifRevisionArn of the PreviewDaemonUpdate answer")
	}
	return s.updateDaemon(ctx, &req.UpdateDaemonRequest, req.IfRevisionArn)
}

// Daemon defaults where a request omits a setting (UpdateDaemon is a full
// replacement, so omitted settings return to these).
const (
	DefaultDrainPercent = 25.0
	DefaultPropagate    = "NONE"
)

func daemonNotFound(arn string) error {
	return fault.Missing("DaemonNotFoundException", "daemon %s not found", arn)
}

// daemonRequest is what Create and Update have in common.
type daemonRequest struct {
	taskDefinition    string
	capacityProviders []string
	deployment        *shapes.DaemonDeploymentConfiguration
	critical          *bool
	propagateTags     string
	managedTags       *bool
	executeCommand    *bool
}

// spec validates a daemon request against the cluster and fills defaults.
// The returned items are what the write must find unchanged.
func (s *Service) spec(ctx context.Context, cluster store.Item[store.Cluster], r daemonRequest) (store.DaemonSpec, []fleet.Guard, error) {
	var sp store.DaemonSpec
	var guards []fleet.Guard
	td, err := s.activeDaemonTaskDefinition(ctx, "daemonTaskDefinitionArn", r.taskDefinition)
	if err != nil {
		return sp, nil, err
	}
	guards = append(guards, fleet.Guard{Key: td.Key, Rev: td.Rev})
	sp.TaskDefinitionArn = td.Value.DaemonTaskDefinitionArn
	if len(r.capacityProviders) == 0 {
		return sp, nil, fault.Invalid("capacityProviderArns", "must name at least one managed-instances capacity provider")
	}
	for i, ref := range r.capacityProviders {
		f := fieldIndex("capacityProviderArns", i)
		cp, err := s.ClusterCapacityProvider(ctx, f, ref, cluster.Value.ClusterName)
		if err != nil {
			return sp, nil, err
		}
		if cp.Value.Type != "MANAGED_INSTANCES" {
			return sp, nil, fault.Invalid(f, "daemons run only on MANAGED_INSTANCES capacity providers; %q is %s", cp.Value.Name, cp.Value.Type)
		}
		if !slices.Contains(cluster.Value.CapacityProviders, cp.Value.Name) {
			return sp, nil, fault.Invalid(f, "capacity provider %q is not associated with cluster %q (PutClusterCapacityProviders)", cp.Value.Name, cluster.Value.ClusterName)
		}
		if slices.Contains(sp.CapacityProviderArns, cp.Value.CapacityProviderArn) {
			return sp, nil, fault.Invalid(f, "capacity provider %q is listed twice", cp.Value.Name)
		}
		sp.CapacityProviderArns = append(sp.CapacityProviderArns, cp.Value.CapacityProviderArn)
		guards = append(guards, fleet.Guard{Key: cp.Key, Rev: cp.Rev})
	}
	dc, err := deploymentConfig(r.deployment)
	if err != nil {
		return sp, nil, err
	}
	if a := dc.Alarms; a != nil && a.Enable != nil && *a.Enable && !s.AlarmSource {
		// Rolling out unwatched would be worse than refusing.
		return sp, nil, fault.Invalid("deploymentConfiguration.alarms.enable", "this server has no alarm source: start it with --alarm-source URL (a Prometheus or Alertmanager) to watch alarms during deployments")
	}
	sp.DeploymentConfiguration = dc
	sp.Critical = r.critical == nil || *r.critical
	sp.PropagateTags = r.propagateTags
	if sp.PropagateTags == "" {
		sp.PropagateTags = DefaultPropagate
	}
	sp.EnableECSManagedTags = r.managedTags != nil && *r.managedTags
	sp.EnableExecuteCommand = r.executeCommand != nil && *r.executeCommand
	return sp, guards, nil
}

// deploymentConfig fills the defaults of a deployment configuration; the
// model already bounds drainPercent to 0-100.
func deploymentConfig(in *shapes.DaemonDeploymentConfiguration) (shapes.DaemonDeploymentConfiguration, error) {
	out := shapes.DaemonDeploymentConfiguration{DrainPercent: ptr(DefaultDrainPercent), BakeTimeInMinutes: ptr(int32(0))}
	if in == nil {
		return out, nil
	}
	if in.DrainPercent != nil {
		out.DrainPercent = ptr(*in.DrainPercent)
	}
	if in.BakeTimeInMinutes != nil {
		if b := *in.BakeTimeInMinutes; b < 0 || b > 1440 {
			return out, fault.Invalid("deploymentConfiguration.bakeTimeInMinutes", "must be between 0 and 1440 (got %d)", b)
		}
		out.BakeTimeInMinutes = ptr(*in.BakeTimeInMinutes)
	}
	if a := in.Alarms; a != nil {
		enabled := a.Enable != nil && *a.Enable
		if enabled && len(a.AlarmNames) == 0 {
			return out, fault.Invalid("deploymentConfiguration.alarms.alarmNames", "must name at least one alarm when enable is true")
		}
		for i, n := range a.AlarmNames {
			if n == "" || len(n) > 255 {
				return out, fault.Invalid(fieldIndex("deploymentConfiguration.alarms.alarmNames", i), "must be 1-255 characters")
			}
		}
		out.Alarms = &shapes.DaemonAlarmConfiguration{AlarmNames: slices.Clone(a.AlarmNames), Enable: ptr(enabled)}
	}
	return out, nil
}

func checkClientToken(tok string) error {
	if len(tok) > 36 {
		return fault.Invalid("clientToken", "must be at most 36 characters")
	}
	for _, c := range tok {
		if c < 33 || c > 126 {
			return fault.Invalid("clientToken", "must be printable ASCII without spaces")
		}
	}
	return nil
}

func requestHash(v any) string {
	b, _ := json.Marshal(v)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (s *Service) CreateDaemon(ctx context.Context, req *shapes.CreateDaemonRequest) (*shapes.CreateDaemonResponse, error) {
	if err := fleet.CheckName("daemonName", req.DaemonName); err != nil {
		return nil, err
	}
	if err := checkClientToken(req.ClientToken); err != nil {
		return nil, err
	}
	if err := taskdef.CheckTags("tags", req.Tags); err != nil {
		return nil, err
	}
	hash := requestHash(req)
	var out *shapes.CreateDaemonResponse
	err := fleet.Retry(ctx, func() error {
		cl, err := s.ActiveCluster(ctx, "clusterArn", req.ClusterArn)
		if err != nil {
			return err
		}
		cluster := cl.Value.ClusterName
		key := store.DaemonKey(cluster, req.DaemonName)
		cur, err := store.Get[store.Daemon](ctx, s.Store, key)
		if err == nil {
			d := cur.Value
			if req.ClientToken != "" && d.ClientToken == req.ClientToken {
				if d.RequestHash != hash {
					return fault.Invalid("clientToken", "creation of daemon %q was not idempotent: the same client token was used with different parameters", req.DaemonName)
				}
				out = &shapes.CreateDaemonResponse{DaemonArn: d.Arn, Status: d.Status, CreatedAt: shapes.At(d.CreatedAt), DeploymentArn: d.CreateDeploymentArn}
				return nil
			}
			return fault.Invalid("daemonName", "daemon %q already exists in cluster %q", req.DaemonName, cluster)
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		sp, guards, err := s.spec(ctx, cl, daemonRequest{
			taskDefinition: req.DaemonTaskDefinitionArn, capacityProviders: req.CapacityProviderArns,
			deployment: req.DeploymentConfiguration, critical: req.Critical, propagateTags: req.PropagateTags,
			managedTags: req.EnableECSManagedTags, executeCommand: req.EnableExecuteCommand,
		})
		if err != nil {
			return err
		}
		now := s.Now()
		d := store.Daemon{
			Name: req.DaemonName, Arn: s.ARNs.Daemon(cluster, req.DaemonName), Cluster: cluster, ClusterArn: cl.Value.ClusterArn,
			Status: "ACTIVE", CreatedAt: now, UpdatedAt: now, Tags: req.Tags, Spec: sp,
			ClientToken: req.ClientToken, RequestHash: hash,
		}
		tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev)
		for _, g := range guards {
			tx.Unchanged(g.Key, g.Rev)
		}
		rev, err := s.newRevision(ctx, &d)
		if err != nil {
			return err
		}
		dep := s.newDeployment(s.IDs.Alnum(), &d, &rev, nil)
		d.RevisionArn, d.DeploymentArn, d.CreateDeploymentArn = rev.DaemonRevisionArn, dep.DaemonDeploymentArn, dep.DaemonDeploymentArn
		tx.Create(key, d).
			Create(store.DaemonRevisionKey(cluster, d.Name, rev.ID), rev).
			Create(store.DaemonDeploymentKey(cluster, d.Name, dep.ID), dep)
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		out = &shapes.CreateDaemonResponse{DaemonArn: d.Arn, Status: d.Status, CreatedAt: shapes.At(now), DeploymentArn: dep.DaemonDeploymentArn}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// newRevision snapshots the daemon's spec as an immutable revision.
func (s *Service) newRevision(ctx context.Context, d *store.Daemon) (store.DaemonRevision, error) {
	td, err := s.DaemonTaskDefinitionByArn(ctx, d.Spec.TaskDefinitionArn)
	if err != nil {
		return store.DaemonRevision{}, err
	}
	id := s.IDs.Numeric()
	r := store.DaemonRevision{ID: id, CapacityProviderArns: slices.Clone(d.Spec.CapacityProviderArns), DeploymentConfiguration: d.Spec.DeploymentConfiguration}
	r.DaemonRevisionArn = s.ARNs.DaemonRevision(d.Cluster, d.Name, id)
	r.ClusterArn = d.ClusterArn
	r.DaemonArn = d.Arn
	r.DaemonTaskDefinitionArn = d.Spec.TaskDefinitionArn
	r.CreatedAt = shapes.At(s.Now())
	r.Critical = ptr(d.Spec.Critical)
	r.PropagateTags = d.Spec.PropagateTags
	r.EnableECSManagedTags = ptr(d.Spec.EnableECSManagedTags)
	r.EnableExecuteCommand = ptr(d.Spec.EnableExecuteCommand)
	r.ContainerImages = []shapes.DaemonContainerImage{}
	for _, c := range td.ContainerDefinitions {
		// The digest is learnt when an agent first pulls the image.
		r.ContainerImages = append(r.ContainerImages, shapes.DaemonContainerImage{ContainerName: c.Name, Image: c.Image})
	}
	return r, nil
}

// newDeployment records a rollout of d towards target (nil: remove the
// daemon), replacing the sources.
func (s *Service) newDeployment(id string, d *store.Daemon, target *store.DaemonRevision, sources []store.DaemonRevision) store.DaemonDeployment {
	dep := store.DaemonDeployment{ID: id, DaemonArn: d.Arn, Daemon: d.Name, Cluster: d.Cluster}
	dep.DaemonDeploymentArn = s.ARNs.DaemonDeployment(d.Cluster, d.Name, id)
	dep.ClusterArn = d.ClusterArn
	dep.Status = "PENDING"
	dep.CreatedAt = shapes.At(s.Now())
	dc := d.Spec.DeploymentConfiguration
	dep.DeploymentConfiguration = &dc
	var cps []string
	if target != nil {
		dep.TargetRevisionArn = target.DaemonRevisionArn
		dep.TargetDaemonRevision = revisionDetail(target.DaemonRevisionArn, target.CapacityProviderArns)
		cps = append(cps, target.CapacityProviderArns...)
	}
	dep.SourceDaemonRevisions = []shapes.DaemonDeploymentRevisionDetail{}
	for _, src := range sources {
		dep.SourceRevisionArns = append(dep.SourceRevisionArns, src.DaemonRevisionArn)
		dep.SourceDaemonRevisions = append(dep.SourceDaemonRevisions, *revisionDetail(src.DaemonRevisionArn, src.CapacityProviderArns))
		for _, cp := range src.CapacityProviderArns {
			if !slices.Contains(cps, cp) {
				cps = append(cps, cp)
			}
		}
	}
	dep.CapacityProviderArns = cps
	dep.CircuitBreaker = &shapes.DaemonCircuitBreaker{FailureCount: ptr(int32(0)), Status: "MONITORING", Threshold: ptr(int32(rollout.BreakerThreshold(0)))}
	dep.Alarms = &shapes.DaemonDeploymentAlarms{Status: "DISABLED", AlarmNames: []string{}, TriggeredAlarmNames: []string{}}
	if a := dc.Alarms; a != nil && a.Enable != nil && *a.Enable {
		dep.Alarms.Status = "MONITORING"
		dep.Alarms.AlarmNames = slices.Clone(a.AlarmNames)
	}
	return dep
}

func revisionDetail(arn string, cps []string) *shapes.DaemonDeploymentRevisionDetail {
	d := &shapes.DaemonDeploymentRevisionDetail{Arn: arn, TotalRunningInstanceCount: ptr(int32(0)),
		TotalDrainingInstanceCount: ptr(int32(0)), TotalWithoutDaemonInstanceCount: ptr(int32(0))}
	d.CapacityProviders = []shapes.DaemonDeploymentCapacityProvider{}
	for _, cp := range cps {
		d.CapacityProviders = append(d.CapacityProviders, shapes.DaemonDeploymentCapacityProvider{Arn: cp,
			RunningInstanceCount: ptr(int32(0)), DrainingInstanceCount: ptr(int32(0)), WithoutDaemonInstanceCount: ptr(int32(0))})
	}
	return d
}

// liveDaemon reads a daemon by ARN; the cluster must still exist.
func (s *Service) liveDaemon(ctx context.Context, arn string) (store.Item[store.Daemon], store.Item[store.Cluster], error) {
	var d store.Item[store.Daemon]
	cluster, name, err := s.ARNs.DaemonName("daemonArn", arn)
	if err != nil {
		return d, store.Item[store.Cluster]{}, err
	}
	cl, err := s.ActiveCluster(ctx, "daemonArn", cluster)
	if err != nil {
		return d, cl, err
	}
	d, err = store.Get[store.Daemon](ctx, s.Store, store.DaemonKey(cluster, name))
	if errors.Is(err, store.ErrNotFound) {
		return d, cl, daemonNotFound(arn)
	}
	return d, cl, err
}

// supersede stops the daemon's in-flight deployments in tx and returns the
// revisions that may still run on instances: the daemon's latest revision
// and the sources of deployments that never finished.
func (s *Service) supersede(ctx context.Context, tx *store.Txn, d store.Daemon, by string) ([]store.DaemonRevision, error) {
	deps, _, err := store.List[store.DaemonDeployment](ctx, s.Store, store.DaemonDeploymentPrefix(d.Cluster, d.Name), "", 0)
	if err != nil {
		return nil, err
	}
	arns := []string{}
	if d.RevisionArn != "" {
		arns = append(arns, d.RevisionArn)
	}
	now := shapes.At(s.Now())
	for _, it := range deps {
		dep := it.Value
		if !rollout.InFlight(dep.Status) || dep.CreatedAt.Before(d.CreatedAt) {
			continue
		}
		for _, a := range dep.SourceRevisionArns {
			if !slices.Contains(arns, a) {
				arns = append(arns, a)
			}
		}
		wasPending := dep.Status == "PENDING"
		// A stopped deployment keeps the counts it ended with.
		if err := s.LiveDeploymentCounts(ctx, dep, &dep.DaemonDeployment); err != nil {
			return nil, err
		}
		dep.Status = "STOPPED"
		dep.StatusReason = "Superseded by deployment " + by + "."
		dep.StoppedAt = now
		if dep.CircuitBreaker != nil {
			dep.CircuitBreaker.Status = "MONITORING_COMPLETE"
		}
		if dep.Alarms != nil && dep.Alarms.Status == "MONITORING" {
			dep.Alarms.Status = "MONITORING_COMPLETE"
		}
		tx.Update(it.Key, it.Rev, dep)
		change := events.DeploymentChange{Status: "STOPPED", ClusterArn: dep.ClusterArn, DaemonArn: dep.DaemonArn,
			DaemonDeploymentArn: dep.DaemonDeploymentArn, TargetDaemonRevisionArn: dep.TargetRevisionArn, UpdatedAt: now.Time}
		pending := change
		pending.Status, pending.UpdatedAt = "PENDING", dep.CreatedAt.Time
		tx.OnCommit(func() {
			ctx := context.WithoutCancel(ctx)
			if wasPending { // as the controller would have reported it
				s.Events().Record(ctx, d.Cluster, events.DaemonDeploymentStateChangeEvent(pending))
			}
			s.Events().Record(ctx, d.Cluster, events.DaemonDeploymentStateChangeEvent(change))
		})
	}
	var revs []store.DaemonRevision
	for _, a := range arns {
		c, dn, id, ok := s.ARNs.DaemonChild("daemon-revision", a)
		if !ok {
			continue
		}
		r, err := store.Get[store.DaemonRevision](ctx, s.Store, store.DaemonRevisionKey(c, dn, id))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		revs = append(revs, r.Value)
	}
	return revs, nil
}

func (s *Service) UpdateDaemon(ctx context.Context, req *shapes.UpdateDaemonRequest) (*shapes.UpdateDaemonResponse, error) {
	return s.updateDaemon(ctx, req, "")
}

// updateDaemon updates; ifRevision, when set, must still be the daemon's
// latest revision.
func (s *Service) updateDaemon(ctx context.Context, req *shapes.UpdateDaemonRequest, ifRevision string) (*shapes.UpdateDaemonResponse, error) {
	var out *shapes.UpdateDaemonResponse
	err := fleet.Retry(ctx, func() error {
		it, cl, err := s.liveDaemon(ctx, req.DaemonArn)
		if err != nil {
			return err
		}
		d := it.Value
		if d.Status != "ACTIVE" {
			return fault.Conflicting("DaemonNotActiveException", "daemon %s is %s and cannot be updated", d.Arn, d.Status)
		}
		if ifRevision != "" && d.RevisionArn != ifRevision {
			return fault.Conflicting("ConflictException", "ifRevisionArn: daemon %s changed since the preview: its latest revision is %s, not %s; preview the update again",
				d.Arn, d.RevisionArn, ifRevision)
		}
		sp, guards, err := s.spec(ctx, cl, daemonRequest{
			taskDefinition: req.DaemonTaskDefinitionArn, capacityProviders: req.CapacityProviderArns,
			deployment: req.DeploymentConfiguration, critical: req.Critical, propagateTags: req.PropagateTags,
			managedTags: req.EnableECSManagedTags, executeCommand: req.EnableExecuteCommand,
		})
		if err != nil {
			return err
		}
		d.Spec = sp
		d.UpdatedAt = s.Now()
		tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev)
		for _, g := range guards {
			tx.Unchanged(g.Key, g.Rev)
		}
		rev, err := s.newRevision(ctx, &d)
		if err != nil {
			return err
		}
		depID := s.IDs.Alnum()
		sources, err := s.supersede(ctx, tx, it.Value, s.ARNs.DaemonDeployment(d.Cluster, d.Name, depID))
		if err != nil {
			return err
		}
		dep := s.newDeployment(depID, &d, &rev, sources)
		d.RevisionArn, d.DeploymentArn = rev.DaemonRevisionArn, dep.DaemonDeploymentArn
		tx.Update(it.Key, it.Rev, d).
			Create(store.DaemonRevisionKey(d.Cluster, d.Name, rev.ID), rev).
			Create(store.DaemonDeploymentKey(d.Cluster, d.Name, dep.ID), dep)
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		out = &shapes.UpdateDaemonResponse{DaemonArn: d.Arn, Status: d.Status, CreatedAt: shapes.At(d.CreatedAt),
			UpdatedAt: shapes.At(d.UpdatedAt), DeploymentArn: dep.DaemonDeploymentArn}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Service) DeleteDaemon(ctx context.Context, req *shapes.DeleteDaemonRequest) (*shapes.DeleteDaemonResponse, error) {
	var out *shapes.DeleteDaemonResponse
	err := fleet.Retry(ctx, func() error {
		it, cl, err := s.liveDaemon(ctx, req.DaemonArn)
		if err != nil {
			return err
		}
		d := it.Value
		if d.Status != "ACTIVE" {
			return fault.Conflicting("DaemonNotActiveException", "daemon %s is already %s", d.Arn, d.Status)
		}
		d.Status = "DELETE_IN_PROGRESS"
		d.UpdatedAt = s.Now()
		tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev)
		depID := s.IDs.Alnum()
		sources, err := s.supersede(ctx, tx, it.Value, s.ARNs.DaemonDeployment(d.Cluster, d.Name, depID))
		if err != nil {
			return err
		}
		dep := s.newDeployment(depID, &d, nil, sources)
		d.DeploymentArn = dep.DaemonDeploymentArn
		tx.Update(it.Key, it.Rev, d).Create(store.DaemonDeploymentKey(d.Cluster, d.Name, dep.ID), dep)
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		out = &shapes.DeleteDaemonResponse{DaemonArn: d.Arn, Status: d.Status, CreatedAt: shapes.At(d.CreatedAt),
			UpdatedAt: shapes.At(d.UpdatedAt), DeploymentArn: dep.DaemonDeploymentArn}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
