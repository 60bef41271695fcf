package ops

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/rollout"
	"github.com/capstanhq/capstan/internal/store"
)

func (s *Service) DescribeDaemon(ctx context.Context, req *shapes.DescribeDaemonRequest) (*shapes.DescribeDaemonResponse, error) {
	it, _, err := s.liveDaemon(ctx, req.DaemonArn)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	d := it.Value
	detail := &shapes.DaemonDetail{DaemonArn: d.Arn, ClusterArn: d.ClusterArn, Status: d.Status,
		CreatedAt: shapes.At(d.CreatedAt), UpdatedAt: shapes.At(d.UpdatedAt), DeploymentArn: d.DeploymentArn,
		CurrentRevisions: []shapes.DaemonRevisionDetail{}}
	revs, err := s.currentRevisions(ctx, d)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	var cps []string
	for _, r := range revs {
		for _, cp := range r.CapacityProviderArns {
			if !slices.Contains(cps, cp) {
				cps = append(cps, cp)
			}
		}
	}
	counts, err := s.DaemonCounts(ctx, d.Cluster, d.Name, cps)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	for _, r := range revs {
		rd := shapes.DaemonRevisionDetail{Arn: r.DaemonRevisionArn, CapacityProviders: []shapes.DaemonCapacityProvider{}}
		var total, without int32
		for _, cp := range r.CapacityProviderArns {
			c := counts[cp]
			running := int32(c.Running[r.DaemonRevisionArn] + c.Draining[r.DaemonRevisionArn])
			// An instance appears in one set or the other: instances without
			// the daemon count towards the latest revision, for
			// non-critical daemons only (critical ones hold or repair it).
			var wo int32
			if r.DaemonRevisionArn == d.RevisionArn && !d.Spec.Critical {
				wo = int32(c.WithoutDaemon)
			}
			total += running
			without += wo
			rd.CapacityProviders = append(rd.CapacityProviders, shapes.DaemonCapacityProvider{Arn: cp, RunningCount: ptr(running), WithoutDaemonCount: ptr(wo)})
		}
		rd.TotalRunningCount, rd.TotalWithoutDaemonCount = ptr(total), ptr(without)
		detail.CurrentRevisions = append(detail.CurrentRevisions, rd)
	}
	return &shapes.DescribeDaemonResponse{Daemon: detail}, nil
}

// currentRevisions are the revisions that may be on instances now: the
// target and sources of an unfinished deployment, else the finished
// deployment's outcome.
func (s *Service) currentRevisions(ctx context.Context, d store.Daemon) ([]store.DaemonRevision, error) {
	var dep deploymentRow
	c, dn, id, ok := s.ARNs.DaemonChild("daemon-deployment", d.DeploymentArn)
	if !ok {
		return nil, store.ErrNotFound
	}
	it, err := store.Get[deploymentRow](ctx, s.Store, store.DaemonDeploymentKey(c, dn, id))
	if err != nil {
		return nil, err
	}
	dep = it.Value
	var arns []string
	switch {
	case rollout.InFlight(dep.Status):
		if dep.TargetRevisionArn != "" {
			arns = append(arns, dep.TargetRevisionArn)
		}
		arns = append(arns, dep.SourceRevisionArns...)
	case dep.Status == "ROLLBACK_SUCCESSFUL" && dep.Rollback != nil:
		if dep.Rollback.RollbackTargetDaemonRevisionArn != "" {
			arns = append(arns, dep.Rollback.RollbackTargetDaemonRevisionArn)
		}
	case dep.Status == "SUCCESSFUL":
		if dep.TargetRevisionArn != "" {
			arns = append(arns, dep.TargetRevisionArn)
		}
	default: // stopped or failed rollback: instances may hold either side
		if dep.TargetRevisionArn != "" {
			arns = append(arns, dep.TargetRevisionArn)
		}
		arns = append(arns, dep.SourceRevisionArns...)
	}
	var out []store.DaemonRevision
	for _, a := range slices.Compact(arns) {
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
		out = append(out, r.Value)
	}
	return out, nil
}

// deploymentRow is what currentRevisions reads of a deployment.
type deploymentRow struct {
	Status             string   `json:"status"`
	TargetRevisionArn  string   `json:"capstanTargetRevisionArn"`
	SourceRevisionArns []string `json:"capstanSourceRevisionArns"`
	Rollback           *struct {
		RollbackTargetDaemonRevisionArn string `json:"rollbackTargetDaemonRevisionArn"`
	} `json:"rollback"`
}

func (s *Service) deploymentByArn(ctx context.Context, arn string) (store.DaemonDeployment, error) {
	c, dn, id, ok := s.ARNs.DaemonChild("daemon-deployment", arn)
	if !ok {
		return store.DaemonDeployment{}, store.ErrNotFound
	}
	it, err := store.Get[store.DaemonDeployment](ctx, s.Store, store.DaemonDeploymentKey(c, dn, id))
	return it.Value, err
}

// daemonRow is the part of a stored daemon that listing needs: decoding
// only these members is most of what makes ListDaemons cheap.
type daemonRow struct {
	Arn       string    `json:"arn"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	Spec      struct {
		CapacityProviderArns []string `json:"capacityProviderArns"`
	} `json:"spec"`
}

func (s *Service) ListDaemons(ctx context.Context, req *shapes.ListDaemonsRequest) (*shapes.ListDaemonsResponse, error) {
	// Without clusterArn every cluster's daemons are listed (botocore's
	// reading of the model; the Go SDK doc says the default cluster).
	prefix := "daemons/"
	if req.ClusterArn != "" {
		cl, err := s.ActiveCluster(ctx, "clusterArn", req.ClusterArn)
		if err != nil {
			return nil, err
		}
		prefix = store.DaemonPrefix(cl.Value.ClusterName)
	}
	var cps []string
	for i, ref := range req.CapacityProviderArns {
		name, err := s.ARNs.CapacityProviderName(fieldIndex("capacityProviderArns", i), ref)
		if err != nil {
			return nil, err
		}
		cps = append(cps, s.ARNs.CapacityProvider(name))
	}
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, prefix+"\x00"+requestHash(cps), 100)
	if err != nil {
		return nil, err
	}
	out := &shapes.ListDaemonsResponse{DaemonSummariesList: []shapes.DaemonSummary{}}
	after := p.After
	for {
		items, more, err := store.List[daemonRow](ctx, s.Store, prefix, after, p.Limit-len(out.DaemonSummariesList))
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		for _, it := range items {
			after = it.Key
			d := it.Value
			// A daemon matches when it targets any of the given capacity providers.
			if len(cps) > 0 && !slices.ContainsFunc(cps, func(cp string) bool { return slices.Contains(d.Spec.CapacityProviderArns, cp) }) {
				continue
			}
			out.DaemonSummariesList = append(out.DaemonSummariesList, shapes.DaemonSummary{DaemonArn: d.Arn, Status: d.Status,
				CreatedAt: shapes.At(d.CreatedAt), UpdatedAt: shapes.At(d.UpdatedAt)})
		}
		if !more || len(out.DaemonSummariesList) == p.Limit {
			out.NextToken = fleet.NextToken(prefix+"\x00"+requestHash(cps), after, more)
			return out, nil
		}
	}
}

func (s *Service) DescribeDaemonRevisions(ctx context.Context, req *shapes.DescribeDaemonRevisionsRequest) (*shapes.DescribeDaemonRevisionsResponse, error) {
	if len(req.DaemonRevisionArns) == 0 || len(req.DaemonRevisionArns) > 20 {
		return nil, fault.Invalid("daemonRevisionArns", "must name 1 to 20 daemon revisions (got %d)", len(req.DaemonRevisionArns))
	}
	out := &shapes.DescribeDaemonRevisionsResponse{DaemonRevisions: []shapes.DaemonRevision{}, Failures: []shapes.Failure{}}
	for i, a := range req.DaemonRevisionArns {
		c, dn, id, ok := s.ARNs.DaemonChild("daemon-revision", a)
		if !ok {
			return nil, fault.Invalid(fieldIndex("daemonRevisionArns", i), "%q is not a daemon revision ARN (%s)", fleet.Clip(a), s.ARNs.DaemonRevision("CLUSTER", "DAEMON", "ID"))
		}
		r, err := store.Get[store.DaemonRevision](ctx, s.Store, store.DaemonRevisionKey(c, dn, id))
		if errors.Is(err, store.ErrNotFound) {
			out.Failures = append(out.Failures, shapes.Failure{Arn: a, Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		out.DaemonRevisions = append(out.DaemonRevisions, r.Value.DaemonRevision)
	}
	return out, nil
}

func (s *Service) DescribeDaemonDeployments(ctx context.Context, req *shapes.DescribeDaemonDeploymentsRequest) (*shapes.DescribeDaemonDeploymentsResponse, error) {
	if len(req.DaemonDeploymentArns) == 0 || len(req.DaemonDeploymentArns) > 20 {
		return nil, fault.Invalid("daemonDeploymentArns", "must name 1 to 20 daemon deployments (got %d)", len(req.DaemonDeploymentArns))
	}
	out := &shapes.DescribeDaemonDeploymentsResponse{DaemonDeployments: []shapes.DaemonDeployment{}, Failures: []shapes.Failure{}}
	for i, a := range req.DaemonDeploymentArns {
		if _, _, _, ok := s.ARNs.DaemonChild("daemon-deployment", a); !ok {
			return nil, fault.Invalid(fieldIndex("daemonDeploymentArns", i), "%q is not a daemon deployment ARN (%s)", fleet.Clip(a), s.ARNs.DaemonDeployment("CLUSTER", "DAEMON", "ID"))
		}
		dep, err := s.deploymentByArn(ctx, a)
		if errors.Is(err, store.ErrNotFound) {
			out.Failures = append(out.Failures, shapes.Failure{Arn: a, Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		view := dep.DaemonDeployment
		if rollout.InFlight(dep.Status) {
			if err := s.LiveDeploymentCounts(ctx, dep, &view); err != nil {
				return nil, fleet.StoreErr(err)
			}
		}
		out.DaemonDeployments = append(out.DaemonDeployments, view)
	}
	return out, nil
}

func (s *Service) ListDaemonDeployments(ctx context.Context, req *shapes.ListDaemonDeploymentsRequest) (*shapes.ListDaemonDeploymentsResponse, error) {
	cluster, name, err := s.ARNs.DaemonName("daemonArn", req.DaemonArn)
	if err != nil {
		return nil, err
	}
	if _, err := s.ActiveCluster(ctx, "daemonArn", cluster); err != nil {
		return nil, err
	}
	scope := req.DaemonArn + "\x00" + requestHash([]any{req.Status, req.CreatedAt})
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, scope, 20)
	if err != nil {
		return nil, err
	}
	// Deployments of an earlier daemon of the same name are not this one's.
	var since shapes.Timestamp
	if d, err := store.Get[store.Daemon](ctx, s.Store, store.DaemonKey(cluster, name)); err == nil {
		since = shapes.At(d.Value.CreatedAt)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, fleet.StoreErr(err)
	}
	items, _, err := store.List[store.DaemonDeployment](ctx, s.Store, store.DaemonDeploymentPrefix(cluster, name), "", 0)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	out := &shapes.ListDaemonDeploymentsResponse{DaemonDeployments: []shapes.DaemonDeploymentSummary{}}
	// Newest first; ids sort by creation time.
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		if p.After != "" && it.Key >= p.After {
			continue
		}
		dep := it.Value
		if dep.CreatedAt.Before(since.Time) {
			continue
		}
		if len(req.Status) > 0 && !slices.Contains(req.Status, dep.Status) {
			continue
		}
		if f := req.CreatedAt; f != nil {
			if !f.Before.IsZero() && !dep.CreatedAt.Before(f.Before.Time) {
				continue
			}
			if !f.After.IsZero() && !dep.CreatedAt.After(f.After.Time) {
				continue
			}
		}
		if len(out.DaemonDeployments) == p.Limit {
			out.NextToken = fleet.NextToken(scope, items[i+1].Key, true)
			break
		}
		out.DaemonDeployments = append(out.DaemonDeployments, shapes.DaemonDeploymentSummary{
			DaemonDeploymentArn: dep.DaemonDeploymentArn, DaemonArn: dep.DaemonArn, ClusterArn: dep.ClusterArn,
			Status: dep.Status, StatusReason: dep.StatusReason, TargetDaemonRevisionArn: dep.TargetRevisionArn,
			CreatedAt: dep.CreatedAt, StartedAt: dep.StartedAt, StoppedAt: dep.StoppedAt, FinishedAt: dep.FinishedAt,
		})
	}
	return out, nil
}
