package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/controller/services"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerServices(h *api.Handler) {
	api.Register(h, "CreateService", s.CreateService)
	api.Register(h, "UpdateService", s.UpdateService)
	api.Register(h, "DeleteService", s.DeleteService)
	api.Register(h, "DescribeServices", s.DescribeServices)
	api.Register(h, "ListServices", s.ListServices)
}

// Service defaults where a request leaves them out (the ECS defaults for
// the rolling update deployment type).
const (
	DefaultMinimumHealthyPercent = 100
	DefaultMaximumPercent        = 200
	// maxServiceTasks bounds desiredCount (the ECS tasks-per-service quota).
	maxServiceTasks = 5000
)

func (a arns) service(cluster, name string) string {
	return a.base() + "service/" + cluster + "/" + name
}

func serviceNotFound(name string) error {
	return fault.Missing("ServiceNotFoundException", "service %q not found", name)
}

func serviceNotActive(name, status string) error {
	return fault.Conflicting("ServiceNotActiveException", "service %q is %s, not ACTIVE", name, status)
}

// serviceRef splits a service name or ARN. The ARN may name the cluster
// (service/CLUSTER/NAME) or not (the older service/NAME form).
func (a arns) serviceRef(field, ref string) (cluster, name string, err error) {
	name = ref
	if strings.HasPrefix(ref, "arn:") {
		typ, path, ok := a.resource(ref)
		if !ok || typ != "service" || !a.inAccount(ref) {
			return "", "", fault.Invalid(field, "%q is not a service ARN of this account and region (%s)", clip(ref), a.service("CLUSTER", "NAME"))
		}
		name = path
		if c, n, ok := strings.Cut(path, "/"); ok {
			cluster, name = c, n
		}
	}
	if err := checkName(field, name); err != nil {
		return "", "", err
	}
	return cluster, name, nil
}

// serviceCluster resolves the cluster of a request about one service: the
// request's cluster, else the one the service ARN names; both must agree.
func (s *Service) serviceCluster(ctx context.Context, clusterRef, field, ref string) (store.Item[store.Cluster], string, error) {
	arnCluster, name, err := s.arns.serviceRef(field, ref)
	if err != nil {
		return store.Item[store.Cluster]{}, "", err
	}
	if clusterRef == "" && arnCluster != "" {
		clusterRef = arnCluster
	}
	cl, err := s.activeCluster(ctx, "cluster", clusterRef)
	if err != nil {
		return cl, "", err
	}
	if arnCluster != "" && arnCluster != cl.Value.ClusterName {
		return cl, "", fault.Invalid(field, "service %s is not in cluster %q", clip(ref), cl.Value.ClusterName)
	}
	return cl, name, nil
}

// listedService resolves the service a ListTasks call filters on.
func (s *Service) listedService(ctx context.Context, cluster, ref string) (string, error) {
	arnCluster, name, err := s.arns.serviceRef("serviceName", ref)
	if err != nil {
		return "", err
	}
	it, err := store.Get[store.Service](ctx, s.st, store.ServiceKey(cluster, name))
	if errors.Is(err, store.ErrNotFound) || err == nil && (it.Value.Status == "INACTIVE" || arnCluster != "" && arnCluster != cluster) {
		return "", serviceNotFound(name)
	}
	return name, storeErr(err)
}

// refuseServiceFeatures refuses the service features Capstan does not run,
// so that nothing is accepted and then silently left undone.
func refuseServiceFeatures(nc *shapes.NetworkConfiguration, lbs []shapes.LoadBalancer, regs []shapes.ServiceRegistry,
	sc *shapes.ServiceConnectConfiguration, vols []shapes.ServiceVolumeConfiguration, lattice []shapes.VpcLatticeConfiguration,
	ctl *shapes.DeploymentController, platform string) error {
	switch {
	case nc != nil:
		return fault.NotSupported("networkConfiguration: the awsvpc network mode is not supported; services run tasks in bridge, host or none mode")
	case len(lbs) > 0:
		return fault.NotSupported("loadBalancers: load balancers are not available in Capstan")
	case len(regs) > 0:
		return fault.NotSupported("serviceRegistries: service discovery registries are not available in Capstan")
	case sc != nil && sc.Enabled != nil && *sc.Enabled:
		return fault.NotSupported("serviceConnectConfiguration: Service Connect is not supported")
	case len(vols) > 0:
		return fault.NotSupported("volumeConfigurations: managed volumes are not supported")
	case len(lattice) > 0:
		return fault.NotSupported("vpcLatticeConfigurations: VPC Lattice is not supported")
	case ctl != nil && ctl.Type != "ECS":
		return fault.NotSupported("deploymentController: only the ECS (rolling update) deployment controller is supported (got %s)", ctl.Type)
	case platform != "":
		return fault.Invalid("platformVersion", "applies to Fargate only; Capstan runs tasks on registered instances")
	}
	return nil
}

// serviceDeploymentConfig applies a request's deploymentConfiguration over
// cur (nil for a new service) and checks the result.
func serviceDeploymentConfig(cur, in *shapes.DeploymentConfiguration) (*shapes.DeploymentConfiguration, error) {
	out := shapes.DeploymentConfiguration{
		MinimumHealthyPercent:    ptr(int32(DefaultMinimumHealthyPercent)),
		MaximumPercent:           ptr(int32(DefaultMaximumPercent)),
		Strategy:                 "ROLLING",
		DeploymentCircuitBreaker: &shapes.DeploymentCircuitBreaker{Enable: ptr(false), Rollback: ptr(false)},
	}
	if cur != nil {
		out = *cur
	}
	if in == nil {
		return &out, nil
	}
	const f = "deploymentConfiguration"
	switch {
	case in.Strategy != "" && in.Strategy != "ROLLING":
		return nil, fault.NotSupported("%s.strategy: only ROLLING deployments are supported (got %s)", f, in.Strategy)
	case in.CanaryConfiguration != nil || in.LinearConfiguration != nil || len(in.LifecycleHooks) > 0:
		return nil, fault.NotSupported("%s: canary, linear and lifecycle hooks belong to blue/green deployments, which are not supported", f)
	case in.DeploymentCircuitBreaker != nil && *in.DeploymentCircuitBreaker.Enable:
		return nil, fault.NotSupported("%s.deploymentCircuitBreaker: the deployment circuit breaker is not available yet; set enable to false", f)
	case in.Alarms != nil && *in.Alarms.Enable:
		return nil, fault.NotSupported("%s.alarms: CloudWatch alarms are not available in Capstan; set enable to false", f)
	}
	if in.MinimumHealthyPercent != nil {
		if v := *in.MinimumHealthyPercent; v < 0 || v > 100 {
			return nil, fault.Invalid(f+".minimumHealthyPercent", "must be between 0 and 100 (got %d)", v)
		}
		out.MinimumHealthyPercent = ptr(*in.MinimumHealthyPercent)
	}
	if in.MaximumPercent != nil {
		if v := *in.MaximumPercent; v < 100 {
			return nil, fault.Invalid(f+".maximumPercent", "must be at least 100 (got %d)", v)
		}
		out.MaximumPercent = ptr(*in.MaximumPercent)
	}
	if in.DeploymentCircuitBreaker != nil {
		out.DeploymentCircuitBreaker = &shapes.DeploymentCircuitBreaker{Enable: ptr(false), Rollback: ptr(*in.DeploymentCircuitBreaker.Rollback)}
	}
	if in.Alarms != nil {
		out.Alarms = &shapes.DeploymentAlarms{AlarmNames: slices.Clone(in.Alarms.AlarmNames), Enable: ptr(false), Rollback: ptr(*in.Alarms.Rollback)}
	}
	if in.BakeTimeInMinutes != nil {
		out.BakeTimeInMinutes = ptr(*in.BakeTimeInMinutes)
	}
	return &out, nil
}

// serviceCapacity resolves how a service gets instances: a launch type
// (EC2 only) or a capacity provider strategy whose providers belong to the
// cluster. Neither means the cluster's default strategy, else EC2.
func (s *Service) serviceCapacity(ctx context.Context, cl store.Item[store.Cluster], launchType string, strategy []shapes.CapacityProviderStrategyItem) (string, []shapes.CapacityProviderStrategyItem, []guard, error) {
	if launchType != "" && len(strategy) > 0 {
		return "", nil, nil, fault.Invalid("launchType", "give a launch type or a capacityProviderStrategy, not both")
	}
	if launchType != "" {
		if launchType != "EC2" {
			return "", nil, nil, fault.NotSupported("launchType: Capstan runs services on registered instances with the EC2 launch type or a capacity provider strategy (got %s)", launchType)
		}
		return launchType, nil, nil, nil
	}
	field := "capacityProviderStrategy"
	if len(strategy) == 0 {
		if strategy = cl.Value.DefaultCapacityProviderStrategy; len(strategy) == 0 {
			return "EC2", nil, nil, nil
		}
		field = "cluster.defaultCapacityProviderStrategy"
	}
	if len(strategy) > 20 {
		return "", nil, nil, fault.Invalid(field, "at most 20 capacity providers (got %d)", len(strategy))
	}
	var out []shapes.CapacityProviderStrategyItem
	var guards []guard
	withBase := 0
	for i, item := range strategy {
		f := fieldIndex(field, i) + ".capacityProvider"
		cp, err := s.clusterCapacityProvider(ctx, f, item.CapacityProvider, cl.Value.ClusterName)
		if err != nil {
			return "", nil, nil, err
		}
		name := cp.Value.Name
		if !slices.Contains(cl.Value.CapacityProviders, name) {
			return "", nil, nil, fault.Invalid(f, "capacity provider %q is not associated with cluster %q (PutClusterCapacityProviders)", name, cl.Value.ClusterName)
		}
		if slices.ContainsFunc(out, func(x shapes.CapacityProviderStrategyItem) bool { return x.CapacityProvider == name }) {
			return "", nil, nil, fault.Invalid(f, "capacity provider %q is listed twice", name)
		}
		if item.Base != nil && *item.Base > 0 {
			withBase++
		}
		out = append(out, shapes.CapacityProviderStrategyItem{CapacityProvider: name, Base: item.Base, Weight: item.Weight})
		guards = append(guards, guard{cp.Key, cp.Rev})
	}
	if withBase > 1 {
		return "", nil, nil, fault.Invalid(field, "a base may be set on one capacity provider only")
	}
	return "", out, guards, nil
}

// newServiceDeployment is a PRIMARY deployment of the service as it is now.
func (s *Service) newServiceDeployment(v *shapes.Service, now time.Time) shapes.Deployment {
	id := "ecs-svc/" + s.ids.numeric()
	return shapes.Deployment{
		Id: id, Status: "PRIMARY", TaskDefinition: v.TaskDefinition, DesiredCount: ptr(*v.DesiredCount),
		CreatedAt: shapes.At(now), UpdatedAt: shapes.At(now), LaunchType: v.LaunchType,
		CapacityProviderStrategy: slices.Clone(v.CapacityProviderStrategy),
		RolloutState:             "IN_PROGRESS", RolloutStateReason: "ECS deployment " + id + " in progress.",
	}
}

func checkDesiredCount(n *int32) error {
	if n != nil && (*n < 0 || *n > maxServiceTasks) {
		return fault.Invalid("desiredCount", "must be between 0 and %d (got %d)", maxServiceTasks, *n)
	}
	return nil
}

func checkGracePeriod(n *int32) error {
	if n != nil && *n < 0 {
		return fault.Invalid("healthCheckGracePeriodSeconds", "must not be negative (got %d)", *n)
	}
	return nil
}

func (s *Service) CreateService(ctx context.Context, req *shapes.CreateServiceRequest) (*shapes.CreateServiceResponse, error) {
	if err := checkName("serviceName", req.ServiceName); err != nil {
		return nil, err
	}
	if req.SchedulingStrategy == "DAEMON" {
		return nil, fault.NotSupported("schedulingStrategy: DAEMON services are not supported; run per-instance tasks with CreateDaemon, which also orders them before application tasks")
	}
	if err := refuseServiceFeatures(req.NetworkConfiguration, req.LoadBalancers, req.ServiceRegistries, req.ServiceConnectConfiguration,
		req.VolumeConfigurations, req.VpcLatticeConfigurations, req.DeploymentController, req.PlatformVersion); err != nil {
		return nil, err
	}
	if req.TaskDefinition == "" {
		return nil, fault.Invalid("taskDefinition", "is required")
	}
	if req.DesiredCount == nil {
		return nil, fault.Invalid("desiredCount", "is required for the REPLICA scheduling strategy")
	}
	if err := checkDesiredCount(req.DesiredCount); err != nil {
		return nil, err
	}
	if err := checkGracePeriod(req.HealthCheckGracePeriodSeconds); err != nil {
		return nil, err
	}
	if err := checkClientToken(req.ClientToken); err != nil {
		return nil, err
	}
	if err := taskdef.CheckTags("tags", req.Tags); err != nil {
		return nil, err
	}
	dc, err := serviceDeploymentConfig(nil, req.DeploymentConfiguration)
	if err != nil {
		return nil, err
	}
	if _, err := parsePlacement(req.PlacementStrategy, req.PlacementConstraints); err != nil {
		return nil, err
	}
	hash := requestHash(req)
	var out store.Service
	err = retry(ctx, func() error {
		cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return err
		}
		cluster := cl.Value.ClusterName
		key := store.ServiceKey(cluster, req.ServiceName)
		cur, err := store.Get[store.Service](ctx, s.st, key)
		exists := err == nil
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if exists && cur.Value.Status != "INACTIVE" {
			if req.ClientToken != "" && cur.Value.ClientToken == req.ClientToken && cur.Value.RequestHash == hash {
				out = cur.Value
				return nil
			}
			return fault.Invalid("serviceName", "creation of service %q was not idempotent: a service of that name is %s in cluster %q", req.ServiceName, cur.Value.Status, cluster)
		}
		td, err := s.activeTaskDefinition(ctx, "taskDefinition", req.TaskDefinition)
		if err != nil {
			return err
		}
		launchType, strategy, guards, err := s.serviceCapacity(ctx, cl, req.LaunchType, req.CapacityProviderStrategy)
		if err != nil {
			return err
		}
		now := s.now()
		svc := store.Service{Cluster: cluster, ClientToken: req.ClientToken, RequestHash: hash}
		v := &svc.Service
		v.ServiceName, v.ServiceArn, v.ClusterArn, v.Status = req.ServiceName, s.arns.service(cluster, req.ServiceName), cl.Value.ClusterArn, "ACTIVE"
		v.TaskDefinition = td.Value.TaskDefinitionArn
		v.DesiredCount = ptr(*req.DesiredCount)
		v.LaunchType, v.CapacityProviderStrategy = launchType, strategy
		v.DeploymentConfiguration = dc
		v.DeploymentController = &shapes.DeploymentController{Type: "ECS"}
		v.SchedulingStrategy = "REPLICA"
		v.PlacementStrategy, v.PlacementConstraints = req.PlacementStrategy, req.PlacementConstraints
		v.CreatedAt = shapes.At(now)
		v.PropagateTags = req.PropagateTags
		if v.PropagateTags == "" {
			v.PropagateTags = "NONE"
		}
		v.EnableECSManagedTags = ptr(req.EnableECSManagedTags != nil && *req.EnableECSManagedTags)
		v.EnableExecuteCommand = ptr(req.EnableExecuteCommand != nil && *req.EnableExecuteCommand)
		v.HealthCheckGracePeriodSeconds = ptr(int32(0))
		if req.HealthCheckGracePeriodSeconds != nil {
			v.HealthCheckGracePeriodSeconds = ptr(*req.HealthCheckGracePeriodSeconds)
		}
		v.AvailabilityZoneRebalancing = req.AvailabilityZoneRebalancing
		v.RoleArn = req.Role
		v.Tags = req.Tags
		v.Deployments = []shapes.Deployment{s.newServiceDeployment(v, now)}

		tx := s.st.Txn().Unchanged(cl.Key, cl.Rev).Unchanged(td.Key, td.Rev)
		for _, g := range guards {
			tx.Unchanged(g.key, g.rev)
		}
		if exists {
			tx.Update(key, cur.Rev, svc) // a deleted service's name is free again
		} else {
			tx.Create(key, svc)
		}
		// A re-created service starts without the old one's events.
		ekey := store.ServiceEventsKey(cluster, req.ServiceName)
		if ev, err := store.Get[store.ServiceEvents](ctx, s.st, ekey); err == nil {
			tx.Delete(ekey, ev.Rev)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		out = svc
		return nil
	})
	if err != nil {
		return nil, err
	}
	v, err := s.describeService(ctx, out, true)
	if err != nil {
		return nil, err
	}
	return &shapes.CreateServiceResponse{Service: v}, nil
}

func (s *Service) UpdateService(ctx context.Context, req *shapes.UpdateServiceRequest) (*shapes.UpdateServiceResponse, error) {
	if err := refuseServiceFeatures(req.NetworkConfiguration, req.LoadBalancers, req.ServiceRegistries, req.ServiceConnectConfiguration,
		req.VolumeConfigurations, req.VpcLatticeConfigurations, req.DeploymentController, req.PlatformVersion); err != nil {
		return nil, err
	}
	if err := checkDesiredCount(req.DesiredCount); err != nil {
		return nil, err
	}
	if err := checkGracePeriod(req.HealthCheckGracePeriodSeconds); err != nil {
		return nil, err
	}
	if req.PlacementStrategy != nil || req.PlacementConstraints != nil {
		if _, err := parsePlacement(req.PlacementStrategy, req.PlacementConstraints); err != nil {
			return nil, err
		}
	}
	var out store.Service
	err := retry(ctx, func() error {
		cl, name, err := s.serviceCluster(ctx, req.Cluster, "service", req.Service)
		if err != nil {
			return err
		}
		it, err := store.Get[store.Service](ctx, s.st, store.ServiceKey(cl.Value.ClusterName, name))
		if errors.Is(err, store.ErrNotFound) {
			return serviceNotFound(name)
		}
		if err != nil {
			return err
		}
		svc := it.Value
		v := &svc.Service
		if v.Status != "ACTIVE" {
			return serviceNotActive(name, v.Status)
		}
		tx := s.st.Txn().Unchanged(cl.Key, cl.Rev)
		redeploy := req.ForceNewDeployment != nil && *req.ForceNewDeployment
		if req.TaskDefinition != "" {
			td, err := s.activeTaskDefinition(ctx, "taskDefinition", req.TaskDefinition)
			if err != nil {
				return err
			}
			tx.Unchanged(td.Key, td.Rev)
			if td.Value.TaskDefinitionArn != v.TaskDefinition {
				v.TaskDefinition, redeploy = td.Value.TaskDefinitionArn, true
			}
		}
		if len(req.CapacityProviderStrategy) > 0 {
			_, strategy, guards, err := s.serviceCapacity(ctx, cl, "", req.CapacityProviderStrategy)
			if err != nil {
				return err
			}
			for _, g := range guards {
				tx.Unchanged(g.key, g.rev)
			}
			if v.LaunchType != "" || !slices.EqualFunc(strategy, v.CapacityProviderStrategy, sameStrategyItem) {
				v.LaunchType, v.CapacityProviderStrategy, redeploy = "", strategy, true
			}
		}
		// A placement change applies to new tasks only: it takes a new
		// deployment to move the running ones.
		if req.PlacementStrategy != nil && !slices.Equal(req.PlacementStrategy, v.PlacementStrategy) {
			v.PlacementStrategy, redeploy = req.PlacementStrategy, true
		}
		if req.PlacementConstraints != nil && !slices.Equal(req.PlacementConstraints, v.PlacementConstraints) {
			v.PlacementConstraints, redeploy = req.PlacementConstraints, true
		}
		if v.DeploymentConfiguration, err = serviceDeploymentConfig(v.DeploymentConfiguration, req.DeploymentConfiguration); err != nil {
			return err
		}
		if req.DesiredCount != nil {
			v.DesiredCount = ptr(*req.DesiredCount)
		}
		if req.HealthCheckGracePeriodSeconds != nil {
			v.HealthCheckGracePeriodSeconds = ptr(*req.HealthCheckGracePeriodSeconds)
		}
		if req.PropagateTags != "" {
			v.PropagateTags = req.PropagateTags
		}
		if req.EnableECSManagedTags != nil {
			v.EnableECSManagedTags = ptr(*req.EnableECSManagedTags)
		}
		if req.EnableExecuteCommand != nil {
			v.EnableExecuteCommand = ptr(*req.EnableExecuteCommand)
		}
		if req.AvailabilityZoneRebalancing != "" {
			v.AvailabilityZoneRebalancing = req.AvailabilityZoneRebalancing
		}
		now := s.now()
		deps := slices.Clone(v.Deployments)
		if redeploy {
			for i := range deps {
				if deps[i].Status == "PRIMARY" {
					deps[i].Status, deps[i].UpdatedAt = "ACTIVE", shapes.At(now)
				}
			}
			deps = append([]shapes.Deployment{s.newServiceDeployment(v, now)}, deps...)
		}
		for i := range deps {
			if deps[i].Status == "PRIMARY" && *deps[i].DesiredCount != *v.DesiredCount {
				deps[i].DesiredCount, deps[i].UpdatedAt = ptr(*v.DesiredCount), shapes.At(now)
			}
		}
		v.Deployments = deps
		if _, err := tx.Update(it.Key, it.Rev, svc).Commit(ctx); err != nil {
			return err
		}
		out = svc
		return nil
	})
	if err != nil {
		return nil, err
	}
	v, err := s.describeService(ctx, out, false)
	if err != nil {
		return nil, err
	}
	return &shapes.UpdateServiceResponse{Service: v}, nil
}

func sameStrategyItem(a, b shapes.CapacityProviderStrategyItem) bool {
	n := func(p *int32) int32 {
		if p == nil {
			return 0
		}
		return *p
	}
	return a.CapacityProvider == b.CapacityProvider && n(a.Base) == n(b.Base) && n(a.Weight) == n(b.Weight)
}

// DeleteService marks the service DRAINING; the services controller stops
// its tasks and makes it INACTIVE when they have stopped.
func (s *Service) DeleteService(ctx context.Context, req *shapes.DeleteServiceRequest) (*shapes.DeleteServiceResponse, error) {
	var out store.Service
	err := retry(ctx, func() error {
		cl, name, err := s.serviceCluster(ctx, req.Cluster, "service", req.Service)
		if err != nil {
			return err
		}
		it, err := store.Get[store.Service](ctx, s.st, store.ServiceKey(cl.Value.ClusterName, name))
		if errors.Is(err, store.ErrNotFound) || err == nil && it.Value.Status == "INACTIVE" {
			return serviceNotFound(name)
		}
		if err != nil {
			return err
		}
		svc := it.Value
		if svc.Status == "DRAINING" {
			out = svc // already being deleted
			return nil
		}
		force := req.Force != nil && *req.Force
		if *svc.DesiredCount > 0 && !force {
			return fault.Invalid("service", "service %q still wants %d tasks; scale it to 0 with UpdateService first, or delete it with force", name, *svc.DesiredCount)
		}
		svc.Status = "DRAINING"
		svc.DesiredCount = ptr(int32(0))
		for i := range svc.Deployments {
			if svc.Deployments[i].Status == "PRIMARY" {
				svc.Deployments[i].DesiredCount = ptr(int32(0))
				svc.Deployments[i].UpdatedAt = shapes.At(s.now())
			}
		}
		if _, err := s.st.Txn().Update(it.Key, it.Rev, svc).Commit(ctx); err != nil {
			return err
		}
		out = svc
		return nil
	})
	if err != nil {
		return nil, err
	}
	v, err := s.describeService(ctx, out, false)
	if err != nil {
		return nil, err
	}
	return &shapes.DeleteServiceResponse{Service: v}, nil
}

func (s *Service) DescribeServices(ctx context.Context, req *shapes.DescribeServicesRequest) (*shapes.DescribeServicesResponse, error) {
	if len(req.Services) == 0 || len(req.Services) > 10 {
		return nil, fault.Invalid("services", "must name 1 to 10 services")
	}
	type ref struct{ cluster, name string }
	refs := make([]ref, len(req.Services))
	clusterRef := req.Cluster
	for i, r := range req.Services {
		c, n, err := s.arns.serviceRef(fieldIndex("services", i), r)
		if err != nil {
			return nil, err
		}
		refs[i] = ref{c, n}
		if clusterRef == "" && c != "" {
			clusterRef = c
		}
	}
	cl, err := s.activeCluster(ctx, "cluster", clusterRef)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	groups := make([]string, len(refs))
	for i, r := range refs {
		groups[i] = "service:" + r.name
	}
	byGroup, err := s.tasksByGroup(ctx, cluster, groups...)
	if err != nil {
		return nil, storeErr(err)
	}
	tags := slices.Contains(req.Include, "TAGS")
	out := &shapes.DescribeServicesResponse{Services: []shapes.Service{}, Failures: []shapes.Failure{}}
	for i, r := range refs {
		it, err := store.Get[store.Service](ctx, s.st, store.ServiceKey(cluster, r.name))
		if errors.Is(err, store.ErrNotFound) || err == nil && r.cluster != "" && r.cluster != cluster {
			arn := req.Services[i]
			if !strings.HasPrefix(arn, "arn:") {
				arn = s.arns.service(cluster, r.name)
			}
			out.Failures = append(out.Failures, shapes.Failure{Arn: arn, Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, storeErr(err)
		}
		events, err := s.serviceEvents(ctx, it.Value)
		if err != nil {
			return nil, err
		}
		out.Services = append(out.Services, s.serviceView(it.Value, byGroup["service:"+r.name], events, tags))
	}
	return out, nil
}

func (s *Service) ListServices(ctx context.Context, req *shapes.ListServicesRequest) (*shapes.ListServicesResponse, error) {
	cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	prefix := store.ServicePrefix(cl.Value.ClusterName)
	scope := prefix + "\x00" + req.LaunchType + "\x00" + req.SchedulingStrategy + "\x00" + req.ResourceManagementType
	p, err := newPage(req.MaxResults, req.NextToken, scope, 10)
	if err != nil {
		return nil, err
	}
	out := &shapes.ListServicesResponse{ServiceArns: []string{}}
	// Every service is a customer-managed REPLICA service.
	if req.SchedulingStrategy == "DAEMON" || req.ResourceManagementType == "ECS" {
		return out, nil
	}
	after := p.after
	for {
		items, more, err := store.List[store.Service](ctx, s.st, prefix, after, p.limit-len(out.ServiceArns))
		if err != nil {
			return nil, storeErr(err)
		}
		for _, it := range items {
			after = it.Key
			v := it.Value
			if v.Status == "INACTIVE" || req.LaunchType != "" && v.LaunchType != req.LaunchType {
				continue
			}
			out.ServiceArns = append(out.ServiceArns, v.ServiceArn)
		}
		if !more || len(out.ServiceArns) == p.limit {
			out.NextToken = nextToken(scope, after, more)
			return out, nil
		}
	}
}

// describeService is the API view of one service, read fresh.
func (s *Service) describeService(ctx context.Context, svc store.Service, tags bool) (*shapes.Service, error) {
	byGroup, err := s.tasksByGroup(ctx, svc.Cluster, "service:"+svc.ServiceName)
	if err != nil {
		return nil, storeErr(err)
	}
	events, err := s.serviceEvents(ctx, svc)
	if err != nil {
		return nil, err
	}
	v := s.serviceView(svc, byGroup["service:"+svc.ServiceName], events, tags)
	return &v, nil
}

func (s *Service) serviceEvents(ctx context.Context, svc store.Service) ([]shapes.ServiceEvent, error) {
	it, err := store.Get[store.ServiceEvents](ctx, s.st, store.ServiceEventsKey(svc.Cluster, svc.ServiceName))
	if errors.Is(err, store.ErrNotFound) {
		return []shapes.ServiceEvent{}, nil
	}
	if err != nil {
		return nil, storeErr(err)
	}
	return it.Value.Events, nil
}

// tasksByGroup lists a cluster's tasks of the given groups by group, from
// the fleet view.
func (s *Service) tasksByGroup(ctx context.Context, cluster string, groups ...string) (map[string][]services.Task, error) {
	m := map[string][]services.Task{}
	for _, g := range groups {
		ts, err := s.groupTasks(ctx, cluster, g, nil)
		if err != nil {
			return nil, err
		}
		m[g] = ts
	}
	return m, nil
}

// serviceView is the API view of a service, with counts derived from its
// tasks: RUNNING ones are running, wanted ones not yet RUNNING are pending.
// An ACTIVE (older) deployment wants the tasks it still has.
func (s *Service) serviceView(svc store.Service, tasks []services.Task, events []shapes.ServiceEvent, tags bool) shapes.Service {
	v := svc.Service
	type counts struct{ running, pending, live, failed int32 }
	per := map[string]*counts{}
	var running, pending int32
	for _, t := range tasks {
		c := per[t.Deployment]
		if c == nil {
			c = &counts{}
			per[t.Deployment] = c
		}
		switch {
		case t.LastStatus == "RUNNING":
			running++
			c.running++
		case t.LastStatus != "STOPPED" && t.Desired == "RUNNING":
			pending++
			c.pending++
		}
		if t.LastStatus != "STOPPED" {
			c.live++
		} else if failedLaunch(t) {
			c.failed++
		}
	}
	v.RunningCount, v.PendingCount = ptr(running), ptr(pending)
	v.Deployments = make([]shapes.Deployment, len(svc.Deployments))
	for i, d := range svc.Deployments {
		c := per[d.Id]
		if c == nil {
			c = &counts{}
		}
		d.RunningCount, d.PendingCount, d.FailedTasks = ptr(c.running), ptr(c.pending), ptr(c.failed)
		if d.Status != "PRIMARY" {
			d.DesiredCount = ptr(c.live)
		}
		if d.CapacityProviderStrategy == nil && d.LaunchType == "" {
			d.CapacityProviderStrategy = []shapes.CapacityProviderStrategyItem{}
		}
		v.Deployments[i] = d
	}
	v.Events = events
	if !tags {
		v.Tags = nil
	} else if v.Tags == nil {
		v.Tags = []shapes.Tag{}
	}
	if v.LoadBalancers == nil {
		v.LoadBalancers = []shapes.LoadBalancer{}
	}
	if v.ServiceRegistries == nil {
		v.ServiceRegistries = []shapes.ServiceRegistry{}
	}
	if v.PlacementConstraints == nil {
		v.PlacementConstraints = []shapes.PlacementConstraint{}
	}
	if v.PlacementStrategy == nil {
		v.PlacementStrategy = []shapes.PlacementStrategy{}
	}
	return v
}

// failedLaunch reports a task that stopped on its own before it ran.
func failedLaunch(t services.Task) bool {
	return t.StopCode == "TaskFailedToStart" || t.StopCode == "EssentialContainerExited" && t.StartedAt.IsZero()
}

// errOwnerChanged stops a launch decided on a service record that has
// changed since; it is not a conflict to retry, the decision is stale.
var errOwnerChanged = errors.New("the service changed since the launch was decided")

func (s *Service) ownerUnchanged(ctx context.Context, g guard) error {
	it, err := store.Get[store.Service](ctx, s.st, g.key)
	if errors.Is(err, store.ErrNotFound) || err == nil && it.Rev != g.rev {
		return errOwnerChanged
	}
	return err
}

// serviceTaskDefinition resolves the task definition a service launches.
// ECS keeps services running on a revision deregistered after they were
// deployed, so INACTIVE is fine; a revision being deleted is not.
func (s *Service) serviceTaskDefinition(ctx context.Context, field, ref string) (store.Item[store.TaskDefinition], error) {
	it, err := s.taskDefinition(ctx, field, ref)
	if err == nil && it.Value.Status != "ACTIVE" && it.Value.Status != "INACTIVE" {
		return it, fault.ClientError("%s: task definition %s is %s and starts no new tasks", field, it.Value.TaskDefinitionArn, it.Value.Status)
	}
	return it, err
}

// StartServiceTasks places up to n tasks of the service's primary
// deployment, for the services controller. It returns the IDs of the tasks
// started and why each of the others could not be placed. An error
// wrapping store.ErrConflict means the service changed since svc was read;
// a *fault.Error says why no task of the service can start now.
func (s *Service) StartServiceTasks(ctx context.Context, svc store.Item[store.Service], n int) ([]string, []string, error) {
	v := svc.Value
	var dep *shapes.Deployment
	for i := range v.Deployments {
		if v.Deployments[i].Status == "PRIMARY" {
			dep = &v.Deployments[i]
		}
	}
	if dep == nil || v.Status != "ACTIVE" {
		return nil, nil, fmt.Errorf("service %s has no deployment to start tasks for", v.ServiceArn)
	}
	rules, err := parsePlacement(v.PlacementStrategy, v.PlacementConstraints)
	if err != nil {
		return nil, nil, err
	}
	if len(rules.strategy) == 0 {
		// Replicas of a service are worth more apart than packed.
		rules.strategy = []shapes.PlacementStrategy{{Type: "spread", Field: "instanceId"}}
	}
	var tags []shapes.Tag
	switch v.PropagateTags {
	case "SERVICE":
		tags = v.Tags
	case "TASK_DEFINITION":
		td, err := s.taskDefinition(ctx, "taskDefinition", dep.TaskDefinition)
		if err != nil {
			return nil, nil, err
		}
		tags = td.Value.Tags
	}
	cp := ""
	if len(v.CapacityProviderStrategy) > 0 {
		cp = v.CapacityProviderStrategy[0].CapacityProvider
	}
	tasks, failures, err := s.startTasks(ctx, taskRequest{cluster: v.Cluster, taskDefinition: dep.TaskDefinition,
		group: "service:" + v.ServiceName, startedBy: dep.Id, tags: tags, count: n, rules: rules,
		owner: &guard{svc.Key, svc.Rev}, capacityProvider: cp})
	switch {
	case errors.Is(err, errOwnerChanged):
		return nil, nil, fmt.Errorf("service %s: %w", v.ServiceArn, store.ErrConflict)
	case errors.Is(err, errNoInstances):
		return nil, slices.Repeat([]string{noInstances}, n), nil
	case err != nil:
		return nil, nil, err
	}
	ids := make([]string, 0, len(tasks))
	for _, t := range tasks {
		ids = append(ids, t.TaskArn[strings.LastIndexByte(t.TaskArn, '/')+1:])
	}
	reasons := make([]string, 0, len(failures))
	for _, f := range failures {
		reasons = append(reasons, f.Reason)
	}
	return ids, reasons, nil
}

// StopServiceTasks stops tasks for the services controller, each still at
// the revision it decided on, with the same service record. An error
// wrapping store.ErrConflict means something changed since.
func (s *Service) StopServiceTasks(ctx context.Context, svc store.Item[store.Service], tasks []store.Item[store.Task], reason string) error {
	// A stop writes the task and its desired entry: as many per
	// transaction as the store takes, each checked against the service.
	per := max(1, (s.st.MaxTxnOps()-8)/2)
	for len(tasks) > 0 {
		n := min(len(tasks), per)
		tx := s.st.Txn().Unchanged(svc.Key, svc.Rev)
		for _, it := range tasks[:n] {
			if err := s.stopTaskTxn(ctx, tx, it, "ServiceSchedulerInitiated", reason); err != nil {
				return err
			}
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		tasks = tasks[n:]
	}
	return nil
}
