package ops

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// ECS's service deployments and revisions, mapped from the deployments a
// Capstan service record holds: its PRIMARY deployment and the older ones
// that still have tasks. A deployment whose tasks are all gone is dropped
// from the record, so these operations know the current deployment and
// the ones it is replacing, not a history. Each deployment is both a
// service deployment and a service revision, named by the number of its
// ID (ecs-svc/NUMBER).

func (s *Service) registerServiceDeployments(h *api.Handler) {
	api.Register(h, "ListServiceDeployments", s.ListServiceDeployments)
	api.Register(h, "DescribeServiceDeployments", s.DescribeServiceDeployments)
	api.Register(h, "DescribeServiceRevisions", s.DescribeServiceRevisions)
	api.Register(h, "StopServiceDeployment", s.StopServiceDeployment)
}

var serviceDeploymentStatuses = []string{"PENDING", "SUCCESSFUL", "STOPPED", "STOP_REQUESTED", "IN_PROGRESS",
	"ROLLBACK_REQUESTED", "ROLLBACK_IN_PROGRESS", "ROLLBACK_SUCCESSFUL", "ROLLBACK_FAILED"}

func depNumber(id string) string { return strings.TrimPrefix(id, "ecs-svc/") }

func (s *Service) serviceDeploymentArn(cluster, service, id string) string {
	return s.ARNs.Base() + "service-deployment/" + cluster + "/" + service + "/" + depNumber(id)
}

func (s *Service) serviceRevisionArn(cluster, service, id string) string {
	return s.ARNs.Base() + "service-revision/" + cluster + "/" + service + "/" + depNumber(id)
}

// deploymentRef splits a service-deployment or service-revision ARN.
func (s *Service) deploymentRef(field, typ, arn string) (cluster, service, id string, err error) {
	t, path, ok := s.ARNs.Resource(arn)
	parts := strings.Split(path, "/")
	if !ok || t != typ || !s.ARNs.InAccount(arn) || len(parts) != 3 || parts[2] == "" {
		return "", "", "", fault.Invalid(field, "%q is not a %s ARN (%s)", fleet.Clip(arn), typ, s.ARNs.Base()+typ+"/CLUSTER/SERVICE/ID")
	}
	return parts[0], parts[1], "ecs-svc/" + parts[2], nil
}

// described reads a service with its deployments' task counts; found is
// false when the service or cluster does not exist.
func (s *Service) described(ctx context.Context, cluster, name string) (*shapes.Service, store.Item[store.Service], bool, error) {
	it, err := store.Get[store.Service](ctx, s.Store, store.ServiceKey(cluster, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, it, false, nil
	}
	if err != nil {
		return nil, it, false, fleet.StoreErr(err)
	}
	v, err := s.describeService(ctx, it.Value, false)
	if err != nil {
		return nil, it, false, err
	}
	return v, it, true, nil
}

// deploymentStatus is ECS's status of a deployment of svc.
func deploymentStatus(svc *shapes.Service, d shapes.Deployment) (status, reason string) {
	switch {
	case d.Status == "PRIMARY" && d.RolloutState == "IN_PROGRESS" && svc.Status == "ACTIVE":
		return "IN_PROGRESS", d.RolloutStateReason
	case d.RolloutState == "COMPLETED":
		return "SUCCESSFUL", d.RolloutStateReason
	case d.RolloutState == "FAILED":
		return "ROLLBACK_FAILED", d.RolloutStateReason
	case d.Status == "PRIMARY":
		return "STOPPED", "The service is being deleted."
	}
	return "STOPPED", "Replaced by a newer deployment before it completed."
}

func revisionSummary(arn string, d shapes.Deployment) shapes.ServiceRevisionSummary {
	return shapes.ServiceRevisionSummary{Arn: arn, RequestedTaskCount: d.DesiredCount, RunningTaskCount: d.RunningCount, PendingTaskCount: d.PendingCount}
}

// serviceDeployment is ECS's view of deployment i of svc.
func (s *Service) serviceDeployment(cluster string, svc *shapes.Service, i int) shapes.ServiceDeployment {
	d := svc.Deployments[i]
	status, reason := deploymentStatus(svc, d)
	out := shapes.ServiceDeployment{
		ServiceDeploymentArn: s.serviceDeploymentArn(cluster, svc.ServiceName, d.Id),
		ServiceArn:           svc.ServiceArn, ClusterArn: s.ARNs.Cluster(cluster),
		CreatedAt: d.CreatedAt, StartedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
		Status: status, StatusReason: reason,
		DeploymentConfiguration: svc.DeploymentConfiguration,
		SourceServiceRevisions:  []shapes.ServiceRevisionSummary{},
	}
	target := revisionSummary(s.serviceRevisionArn(cluster, svc.ServiceName, d.Id), d)
	out.TargetServiceRevision = &target
	switch status {
	case "SUCCESSFUL", "ROLLBACK_FAILED":
		out.FinishedAt = d.UpdatedAt
	case "STOPPED":
		out.StoppedAt = d.UpdatedAt
	}
	if d.Status == "PRIMARY" {
		for _, o := range svc.Deployments {
			if o.Id != d.Id {
				out.SourceServiceRevisions = append(out.SourceServiceRevisions, revisionSummary(s.serviceRevisionArn(cluster, svc.ServiceName, o.Id), o))
			}
		}
	}
	return out
}

func (s *Service) ListServiceDeployments(ctx context.Context, req *shapes.ListServiceDeploymentsRequest) (*shapes.ListServiceDeploymentsResponse, error) {
	if req.Service == "" {
		return nil, fault.Invalid("service", "is required")
	}
	for i, st := range req.Status {
		if !slices.Contains(serviceDeploymentStatuses, st) {
			return nil, fault.Invalid(fieldIndex("status", i), "must be one of %v (got %q)", serviceDeploymentStatuses, fleet.Clip(st))
		}
	}
	scope := "servicedeployments\x00" + req.Cluster + "\x00" + req.Service + "\x00" + strings.Join(req.Status, ",")
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, scope, 20)
	if err != nil {
		return nil, err
	}
	cl, name, err := s.serviceCluster(ctx, req.Cluster, "service", req.Service)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	svc, _, found, err := s.described(ctx, cluster, name)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, serviceNotFound(name)
	}
	out := &shapes.ListServiceDeploymentsResponse{ServiceDeployments: []shapes.ServiceDeploymentBrief{}}
	deps := slices.Clone(svc.Deployments)
	// Newest first, as ECS lists them; the token is the last ID given.
	slices.SortStableFunc(deps, func(a, b shapes.Deployment) int { return b.CreatedAt.Compare(a.CreatedAt.Time) })
	skipping := p.After != ""
	for _, d := range deps {
		if skipping {
			skipping = d.Id != p.After
			continue
		}
		status, reason := deploymentStatus(svc, d)
		if len(req.Status) > 0 && !slices.Contains(req.Status, status) {
			continue
		}
		if c := req.CreatedAt; c != nil && (!c.After.IsZero() && !d.CreatedAt.After(c.After.Time) || !c.Before.IsZero() && !d.CreatedAt.Before(c.Before.Time)) {
			continue
		}
		if len(out.ServiceDeployments) == p.Limit {
			out.NextToken = fleet.NextToken(scope, lastID(out.ServiceDeployments), true)
			break
		}
		i := slices.IndexFunc(svc.Deployments, func(x shapes.Deployment) bool { return x.Id == d.Id })
		sd := s.serviceDeployment(cluster, svc, i)
		out.ServiceDeployments = append(out.ServiceDeployments, shapes.ServiceDeploymentBrief{
			ServiceDeploymentArn: sd.ServiceDeploymentArn, ServiceArn: sd.ServiceArn, ClusterArn: sd.ClusterArn,
			CreatedAt: sd.CreatedAt, StartedAt: sd.StartedAt, FinishedAt: sd.FinishedAt, Status: status, StatusReason: reason,
			TargetServiceRevisionArn: sd.TargetServiceRevision.Arn,
		})
	}
	return out, nil
}

// lastID is the deployment ID of the last brief.
func lastID(bs []shapes.ServiceDeploymentBrief) string {
	arn := bs[len(bs)-1].ServiceDeploymentArn
	return "ecs-svc/" + arn[strings.LastIndexByte(arn, '/')+1:]
}

// findDeployment resolves a deployment or revision ARN to its service
// and deployment index; found is false when either is gone.
func (s *Service) findDeployment(ctx context.Context, field, typ, arn string) (string, *shapes.Service, int, bool, error) {
	cluster, name, id, err := s.deploymentRef(field, typ, arn)
	if err != nil {
		return "", nil, 0, false, err
	}
	svc, _, found, err := s.described(ctx, cluster, name)
	if err != nil || !found {
		return cluster, nil, 0, false, err
	}
	i := slices.IndexFunc(svc.Deployments, func(d shapes.Deployment) bool { return d.Id == id })
	return cluster, svc, i, i >= 0, nil
}

func (s *Service) DescribeServiceDeployments(ctx context.Context, req *shapes.DescribeServiceDeploymentsRequest) (*shapes.DescribeServiceDeploymentsResponse, error) {
	if len(req.ServiceDeploymentArns) == 0 || len(req.ServiceDeploymentArns) > 20 {
		return nil, fault.Invalid("serviceDeploymentArns", "must name 1 to 20 service deployments (got %d)", len(req.ServiceDeploymentArns))
	}
	out := &shapes.DescribeServiceDeploymentsResponse{ServiceDeployments: []shapes.ServiceDeployment{}, Failures: []shapes.Failure{}}
	for i, arn := range req.ServiceDeploymentArns {
		cluster, svc, at, found, err := s.findDeployment(ctx, fieldIndex("serviceDeploymentArns", i), "service-deployment", arn)
		if err != nil {
			return nil, err
		}
		if !found {
			out.Failures = append(out.Failures, shapes.Failure{Arn: arn, Reason: "MISSING"})
			continue
		}
		out.ServiceDeployments = append(out.ServiceDeployments, s.serviceDeployment(cluster, svc, at))
	}
	return out, nil
}

func (s *Service) DescribeServiceRevisions(ctx context.Context, req *shapes.DescribeServiceRevisionsRequest) (*shapes.DescribeServiceRevisionsResponse, error) {
	if len(req.ServiceRevisionArns) == 0 || len(req.ServiceRevisionArns) > 20 {
		return nil, fault.Invalid("serviceRevisionArns", "must name 1 to 20 service revisions (got %d)", len(req.ServiceRevisionArns))
	}
	out := &shapes.DescribeServiceRevisionsResponse{ServiceRevisions: []shapes.ServiceRevision{}, Failures: []shapes.Failure{}}
	for i, arn := range req.ServiceRevisionArns {
		cluster, svc, at, found, err := s.findDeployment(ctx, fieldIndex("serviceRevisionArns", i), "service-revision", arn)
		if err != nil {
			return nil, err
		}
		if !found {
			out.Failures = append(out.Failures, shapes.Failure{Arn: arn, Reason: "MISSING"})
			continue
		}
		d := svc.Deployments[at]
		strategy := d.CapacityProviderStrategy
		if strategy == nil {
			strategy = []shapes.CapacityProviderStrategyItem{}
		}
		out.ServiceRevisions = append(out.ServiceRevisions, shapes.ServiceRevision{
			ServiceRevisionArn: s.serviceRevisionArn(cluster, svc.ServiceName, d.Id),
			ServiceArn:         svc.ServiceArn, ClusterArn: s.ARNs.Cluster(cluster),
			TaskDefinition: d.TaskDefinition, CapacityProviderStrategy: strategy, LaunchType: d.LaunchType,
			NetworkConfiguration: d.NetworkConfiguration, CreatedAt: d.CreatedAt,
			LoadBalancers: []shapes.LoadBalancer{}, ServiceRegistries: []shapes.ServiceRegistry{}, ContainerImages: []shapes.ContainerImage{},
		})
	}
	return out, nil
}

// StopServiceDeployment: Capstan's deployments have no stop of their own
// (UpdateService back to the previous task definition rolls back), so an
// in-progress one answers as ECS does for a stop it cannot make.
func (s *Service) StopServiceDeployment(ctx context.Context, req *shapes.StopServiceDeploymentRequest) (*shapes.StopServiceDeploymentResponse, error) {
	if req.ServiceDeploymentArn == "" {
		return nil, fault.Invalid("serviceDeploymentArn", "is required")
	}
	if req.StopType != "" && req.StopType != "ABORT" && req.StopType != "ROLLBACK" {
		return nil, fault.Invalid("stopType", "must be ABORT or ROLLBACK (got %q)", fleet.Clip(req.StopType))
	}
	_, svc, at, found, err := s.findDeployment(ctx, "serviceDeploymentArn", "service-deployment", req.ServiceDeploymentArn)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fault.Missing("ServiceDeploymentNotFoundException", "The service deployment %s does not exist.", req.ServiceDeploymentArn)
	}
	if status, _ := deploymentStatus(svc, svc.Deployments[at]); status != "IN_PROGRESS" {
		return nil, fault.Conflicting("ConflictException", "The service deployment %s is %s; only a deployment in progress can be stopped.", req.ServiceDeploymentArn, status)
	}
	return nil, fault.NotSupported("Stopping a service deployment is not supported: call UpdateService with the previous task definition to roll back.")
}
