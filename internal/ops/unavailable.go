package ops

import (
	"context"
	"errors"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// The ECS operations whose feature Capstan does not have: each checks
// what it names as ECS would (cluster, service, task, instance), then
// answers what ECS answers when the feature is not there, so that a client
// sees an error it knows rather than UnknownOperationException. docs/api.md
// lists them with the reason.

func (s *Service) registerUnavailable(h *api.Handler) {
	api.Register(h, "CreateTaskSet", s.CreateTaskSet)
	api.Register(h, "DeleteTaskSet", s.DeleteTaskSet)
	api.Register(h, "DescribeTaskSets", s.DescribeTaskSets)
	api.Register(h, "UpdateTaskSet", s.UpdateTaskSet)
	api.Register(h, "UpdateServicePrimaryTaskSet", s.UpdateServicePrimaryTaskSet)
	api.Register(h, "ContinueServiceDeployment", s.ContinueServiceDeployment)
	api.Register(h, "ListServicesByNamespace", s.ListServicesByNamespace)
	api.Register(h, "SubmitTaskStateChange", s.SubmitTaskStateChange)
	api.Register(h, "SubmitContainerStateChange", s.SubmitContainerStateChange)
	api.Register(h, "SubmitAttachmentStateChanges", s.SubmitAttachmentStateChanges)
	api.Register(h, "UpdateContainerAgent", s.UpdateContainerAgent)
	api.Register(h, "CreateExpressGatewayService", s.CreateExpressGatewayService)
	api.Register(h, "DescribeExpressGatewayService", s.DescribeExpressGatewayService)
	api.Register(h, "UpdateExpressGatewayService", s.UpdateExpressGatewayService)
	api.Register(h, "DeleteExpressGatewayService", s.DeleteExpressGatewayService)
}

// Task sets belong to services with the EXTERNAL deployment controller,
// which Capstan's services never have: ECS refuses task set calls on other
// services with this answer.
const taskSetsNeedExternal = "Amazon ECS only supports task set management on services configured to use external deployment controllers."

// taskSetService checks the cluster and service a task set call names,
// then refuses it as ECS does for a service without EXTERNAL.
func (s *Service) taskSetService(ctx context.Context, clusterRef, serviceRef string) error {
	if clusterRef == "" {
		return fault.Invalid("cluster", "is required")
	}
	if serviceRef == "" {
		return fault.Invalid("service", "is required")
	}
	cl, name, err := s.serviceCluster(ctx, clusterRef, "service", serviceRef)
	if err != nil {
		return err
	}
	it, err := store.Get[store.Service](ctx, s.Store, store.ServiceKey(cl.Value.ClusterName, name))
	if errors.Is(err, store.ErrNotFound) || err == nil && it.Value.Status == "INACTIVE" {
		return serviceNotFound(name)
	}
	if err != nil {
		return fleet.StoreErr(err)
	}
	return fault.Invalid("", taskSetsNeedExternal)
}

func (s *Service) CreateTaskSet(ctx context.Context, req *shapes.CreateTaskSetRequest) (*shapes.CreateTaskSetResponse, error) {
	return nil, s.taskSetService(ctx, req.Cluster, req.Service)
}

func (s *Service) DeleteTaskSet(ctx context.Context, req *shapes.DeleteTaskSetRequest) (*shapes.DeleteTaskSetResponse, error) {
	return nil, s.taskSetService(ctx, req.Cluster, req.Service)
}

func (s *Service) DescribeTaskSets(ctx context.Context, req *shapes.DescribeTaskSetsRequest) (*shapes.DescribeTaskSetsResponse, error) {
	return nil, s.taskSetService(ctx, req.Cluster, req.Service)
}

func (s *Service) UpdateTaskSet(ctx context.Context, req *shapes.UpdateTaskSetRequest) (*shapes.UpdateTaskSetResponse, error) {
	return nil, s.taskSetService(ctx, req.Cluster, req.Service)
}

func (s *Service) UpdateServicePrimaryTaskSet(ctx context.Context, req *shapes.UpdateServicePrimaryTaskSetRequest) (*shapes.UpdateServicePrimaryTaskSetResponse, error) {
	return nil, s.taskSetService(ctx, req.Cluster, req.Service)
}

// ContinueServiceDeployment resumes a deployment paused at a lifecycle
// hook; Capstan's deployments have none, so no hook ever waits.
func (s *Service) ContinueServiceDeployment(ctx context.Context, req *shapes.ContinueServiceDeploymentRequest) (*shapes.ContinueServiceDeploymentResponse, error) {
	if req.ServiceDeploymentArn == "" {
		return nil, fault.Invalid("serviceDeploymentArn", "is required")
	}
	if req.HookId == "" {
		return nil, fault.Invalid("hookId", "is required")
	}
	_, _, _, found, err := s.findDeployment(ctx, "serviceDeploymentArn", "service-deployment", req.ServiceDeploymentArn)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fault.Missing("ServiceDeploymentNotFoundException", "The service deployment %s does not exist.", req.ServiceDeploymentArn)
	}
	return nil, fault.Invalid("hookId", "no lifecycle hook %q is waiting on deployment %s: Capstan's service deployments have no lifecycle hooks", fleet.Clip(req.HookId), req.ServiceDeploymentArn)
}

// ListServicesByNamespace lists the services of a Cloud Map namespace;
// Capstan has no Cloud Map, so no namespace exists.
func (s *Service) ListServicesByNamespace(ctx context.Context, req *shapes.ListServicesByNamespaceRequest) (*shapes.ListServicesByNamespaceResponse, error) {
	if req.Namespace == "" {
		return nil, fault.Invalid("namespace", "is required")
	}
	if _, err := fleet.NewPage(req.MaxResults, req.NextToken, "servicesbynamespace", 10); err != nil {
		return nil, err
	}
	return nil, fault.Missing("NamespaceNotFoundException", "The specified namespace %s was not found.", fleet.Clip(req.Namespace))
}

// The Submit*StateChange calls are how ECS's agent reports when its
// websocket is down; Capstan's agents report over their session only.
func (s *Service) submitStateChange(ctx context.Context, clusterRef, op string) error {
	if _, err := s.ActiveCluster(ctx, "cluster", clusterRef); err != nil {
		return err
	}
	return fault.NotSupported("%s is not served: Capstan agents report task, container and attachment states over their agent session", op)
}

func (s *Service) SubmitTaskStateChange(ctx context.Context, req *shapes.SubmitTaskStateChangeRequest) (*shapes.SubmitTaskStateChangeResponse, error) {
	return nil, s.submitStateChange(ctx, req.Cluster, "SubmitTaskStateChange")
}

func (s *Service) SubmitContainerStateChange(ctx context.Context, req *shapes.SubmitContainerStateChangeRequest) (*shapes.SubmitContainerStateChangeResponse, error) {
	return nil, s.submitStateChange(ctx, req.Cluster, "SubmitContainerStateChange")
}

func (s *Service) SubmitAttachmentStateChanges(ctx context.Context, req *shapes.SubmitAttachmentStateChangesRequest) (*shapes.SubmitAttachmentStateChangesResponse, error) {
	return nil, s.submitStateChange(ctx, req.Cluster, "SubmitAttachmentStateChanges")
}

// UpdateContainerAgent: Capstan updates agents by replacing instances (a
// daemon rollout, or a new agent binary and re-registration), never in
// place, so no update is ever available through this call.
func (s *Service) UpdateContainerAgent(ctx context.Context, req *shapes.UpdateContainerAgentRequest) (*shapes.UpdateContainerAgentResponse, error) {
	if req.ContainerInstance == "" {
		return nil, fault.Invalid("containerInstance", "is required")
	}
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	id, err := s.InstanceID("containerInstance", cluster, req.ContainerInstance)
	if err != nil {
		return nil, err
	}
	it, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cluster, id))
	if errors.Is(err, store.ErrNotFound) || err == nil && it.Value.Status == "INACTIVE" {
		return nil, fault.Invalid("containerInstance", "container instance %s not found in cluster %s", id, cluster)
	}
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	if it.Value.CapacityProviderName != "" {
		return nil, fault.NotSupported("The container agent of a managed instance is updated by replacing the instance, not by UpdateContainerAgent.")
	}
	return nil, fault.Conflicting("NoUpdateAvailableException", "There is no update available for your container agent.")
}

// Express gateway services need Application Load Balancers and the
// resources ECS provisions for them: none exist here.
func (s *Service) CreateExpressGatewayService(ctx context.Context, req *shapes.CreateExpressGatewayServiceRequest) (*shapes.CreateExpressGatewayServiceResponse, error) {
	if req.Cluster != "" {
		if _, err := s.ActiveCluster(ctx, "cluster", req.Cluster); err != nil {
			return nil, err
		}
	}
	return nil, fault.NotSupported("Express gateway services are not supported: they need Application Load Balancers, which Capstan does not provision; create a service with CreateService")
}

// expressService answers for an express gateway service ARN: none exists.
func (s *Service) expressService(ref, code string) error {
	if ref == "" {
		return fault.Invalid("serviceArn", "is required")
	}
	if _, _, err := s.ARNs.ServiceRef("serviceArn", ref); err != nil {
		return err
	}
	return fault.Missing(code, "The express gateway service %s does not exist.", fleet.Clip(ref))
}

func (s *Service) DescribeExpressGatewayService(_ context.Context, req *shapes.DescribeExpressGatewayServiceRequest) (*shapes.DescribeExpressGatewayServiceResponse, error) {
	return nil, s.expressService(req.ServiceArn, "ResourceNotFoundException")
}

func (s *Service) UpdateExpressGatewayService(_ context.Context, req *shapes.UpdateExpressGatewayServiceRequest) (*shapes.UpdateExpressGatewayServiceResponse, error) {
	return nil, s.expressService(req.ServiceArn, "ServiceNotFoundException")
}

func (s *Service) DeleteExpressGatewayService(_ context.Context, req *shapes.DeleteExpressGatewayServiceRequest) (*shapes.DeleteExpressGatewayServiceResponse, error) {
	return nil, s.expressService(req.ServiceArn, "ServiceNotFoundException")
}
