package ops

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/servicedeploy"
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

func serviceNotFound(name string) error {
	return fault.Missing("ServiceNotFoundException", "Service not found.")
}

func serviceNotActive(name, status string) error {
	return fault.Conflicting("ServiceNotActiveException", "Service was not ACTIVE.")
}

// serviceCluster resolves the cluster of a request about one service: the
// request's cluster, else the one the service ARN names; both must agree.
func (s *Service) serviceCluster(ctx context.Context, clusterRef, field, ref string) (store.Item[store.Cluster], string, error) {
	arnCluster, name, err := s.ARNs.ServiceRef(field, ref)
	if err != nil {
		return store.Item[store.Cluster]{}, "", err
	}
	if clusterRef == "" && arnCluster != "" {
		clusterRef = arnCluster
	}
	cl, err := s.ActiveCluster(ctx, "cluster", clusterRef)
	if err != nil {
		return cl, "", err
	}
	if arnCluster != "" && arnCluster != cl.Value.ClusterName {
		return cl, "", fault.Invalid(field, "service %s is not in cluster %q", fleet.Clip(ref), cl.Value.ClusterName)
	}
	return cl, name, nil
}

// listedService resolves the service a ListTasks call filters on.
func (s *Service) listedService(ctx context.Context, cluster, ref string) (string, error) {
	arnCluster, name, err := s.ARNs.ServiceRef("serviceName", ref)
	if err != nil {
		return "", err
	}
	it, err := store.Get[store.Service](ctx, s.Store, store.ServiceKey(cluster, name))
	if errors.Is(err, store.ErrNotFound) || err == nil && (it.Value.Status == "INACTIVE" || arnCluster != "" && arnCluster != cluster) {
		return "", serviceNotFound(name)
	}
	return name, fleet.StoreErr(err)
}

// refuseServiceFeatures refuses the service features Capstan does not run,
// so that nothing is accepted and then silently left undone.
func refuseServiceFeatures(nc *shapes.NetworkConfiguration, lbs []shapes.LoadBalancer, regs []shapes.ServiceRegistry,
	sc *shapes.ServiceConnectConfiguration, vols []shapes.ServiceVolumeConfiguration, lattice []shapes.VpcLatticeConfiguration,
	ctl *shapes.DeploymentController, platform string) error {
	if nc != nil {
		// Checked against the task definition's networkMode once it is read.
		if err := fleet.CheckNetworkConfiguration("awsvpc", nc, false); err != nil {
			return err
		}
	}
	switch {
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
	}
	// platform, a Fargate platform version, is accepted and ignored.
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
// (EC2, or FARGATE: the managed-instances provider it places on) or a
// capacity provider strategy whose providers belong to the cluster. Neither means the cluster's default strategy, else EC2.
func (s *Service) serviceCapacity(ctx context.Context, cl store.Item[store.Cluster], launchType string, strategy []shapes.CapacityProviderStrategyItem) (string, []shapes.CapacityProviderStrategyItem, []fleet.Guard, error) {
	if launchType != "" && len(strategy) > 0 {
		return "", nil, nil, fault.Invalid("launchType", "give a launch type or a capacityProviderStrategy, not both")
	}
	field := "capacityProviderStrategy"
	switch launchType {
	case "":
	case "EC2":
		return launchType, nil, nil, nil
	case "FARGATE":
		// Recorded as the managed-instances strategy it places on.
		cp, err := s.fargateCapacity(ctx, cl)
		if err != nil {
			return "", nil, nil, err
		}
		strategy, field = []shapes.CapacityProviderStrategyItem{{CapacityProvider: cp}}, "launchType"
	default:
		return "", nil, nil, fault.NotSupported("launchType: Capstan runs services on registered instances with the EC2 launch type, on managed instances with FARGATE, or with a capacity provider strategy (got %s)", launchType)
	}
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
	var guards []fleet.Guard
	withBase := 0
	for i, item := range strategy {
		f := fieldIndex(field, i) + ".capacityProvider"
		cp, err := s.ClusterCapacityProvider(ctx, f, item.CapacityProvider, cl.Value.ClusterName)
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
		guards = append(guards, fleet.Guard{Key: cp.Key, Rev: cp.Rev})
	}
	if withBase > 1 {
		return "", nil, nil, fault.Invalid(field, "a base may be set on one capacity provider only")
	}
	return "", out, guards, nil
}

// newServiceDeployment is a PRIMARY deployment of the service as it is now.
func (s *Service) newServiceDeployment(v *shapes.Service, now time.Time) shapes.Deployment {
	id := "ecs-svc/" + s.IDs.Numeric()
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
	if err := fleet.CheckName("serviceName", req.ServiceName); err != nil {
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
	if _, err := fleet.ParsePlacement(req.PlacementStrategy, req.PlacementConstraints); err != nil {
		return nil, err
	}
	hash := requestHash(req)
	var out store.Service
	err = fleet.Retry(ctx, func() error {
		cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return err
		}
		cluster := cl.Value.ClusterName
		key := store.ServiceKey(cluster, req.ServiceName)
		cur, err := store.Get[store.Service](ctx, s.Store, key)
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
		td, err := s.ActiveTaskDefinition(ctx, "taskDefinition", req.TaskDefinition)
		if err != nil {
			return err
		}
		if err := fleet.CheckNetworkConfiguration(td.Value.NetworkMode, req.NetworkConfiguration, true); err != nil {
			return err
		}
		if req.LaunchType == "FARGATE" && !slices.Contains(td.Value.Compatibilities, "FARGATE") {
			return errNotFargate
		}
		launchType, strategy, guards, err := s.serviceCapacity(ctx, cl, req.LaunchType, req.CapacityProviderStrategy)
		if err != nil {
			return err
		}
		now := s.Now()
		// The call was authorized, host access included.
		svc := store.Service{Cluster: cluster, ClientToken: req.ClientToken, RequestHash: hash, HostAccess: true}
		v := &svc.Service
		v.ServiceName, v.ServiceArn, v.ClusterArn, v.Status = req.ServiceName, s.ARNs.Service(cluster, req.ServiceName), cl.Value.ClusterArn, "ACTIVE"
		v.TaskDefinition = td.Value.TaskDefinitionArn
		v.DesiredCount = ptr(*req.DesiredCount)
		v.LaunchType, v.CapacityProviderStrategy = launchType, strategy
		v.DeploymentConfiguration = dc
		v.DeploymentController = &shapes.DeploymentController{Type: "ECS"}
		v.SchedulingStrategy = "REPLICA"
		v.PlacementStrategy, v.PlacementConstraints = req.PlacementStrategy, req.PlacementConstraints
		v.NetworkConfiguration = req.NetworkConfiguration
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

		tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev).Unchanged(td.Key, td.Rev)
		for _, g := range guards {
			tx.Unchanged(g.Key, g.Rev)
		}
		if exists {
			tx.Update(key, cur.Rev, svc) // a deleted service's name is free again
		} else {
			tx.Create(key, svc)
		}
		// A re-created service starts without the old one's events.
		ekey := store.ServiceEventsKey(cluster, req.ServiceName)
		if ev, err := store.Get[store.ServiceEvents](ctx, s.Store, ekey); err == nil {
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
		if _, err := fleet.ParsePlacement(req.PlacementStrategy, req.PlacementConstraints); err != nil {
			return nil, err
		}
	}
	var out store.Service
	err := fleet.Retry(ctx, func() error {
		cl, name, err := s.serviceCluster(ctx, req.Cluster, "service", req.Service)
		if err != nil {
			return err
		}
		it, err := store.Get[store.Service](ctx, s.Store, store.ServiceKey(cl.Value.ClusterName, name))
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
		svc.HostAccess = true // the call was authorized for the definition it leaves in place
		tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev)
		redeploy := req.ForceNewDeployment != nil && *req.ForceNewDeployment
		if req.TaskDefinition != "" {
			td, err := s.ActiveTaskDefinition(ctx, "taskDefinition", req.TaskDefinition)
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
				tx.Unchanged(g.Key, g.Rev)
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
		if req.NetworkConfiguration != nil {
			v.NetworkConfiguration, redeploy = req.NetworkConfiguration, true
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
		now := s.Now()
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
	err := fleet.Retry(ctx, func() error {
		cl, name, err := s.serviceCluster(ctx, req.Cluster, "service", req.Service)
		if err != nil {
			return err
		}
		it, err := store.Get[store.Service](ctx, s.Store, store.ServiceKey(cl.Value.ClusterName, name))
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
			return fault.Invalid("", "The service cannot be stopped while it is scaled above 0.")
		}
		svc.Status = "DRAINING"
		svc.DesiredCount = ptr(int32(0))
		for i := range svc.Deployments {
			if svc.Deployments[i].Status == "PRIMARY" {
				svc.Deployments[i].DesiredCount = ptr(int32(0))
				svc.Deployments[i].UpdatedAt = shapes.At(s.Now())
			}
		}
		if _, err := s.Store.Txn().Update(it.Key, it.Rev, svc).Commit(ctx); err != nil {
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
	if len(req.Services) == 0 {
		return nil, fault.Invalid("", "Services cannot be empty.") // ECS's words
	}
	if len(req.Services) > 10 {
		return nil, fault.Invalid("services", "must name 1 to 10 services")
	}
	type ref struct{ cluster, name string }
	refs := make([]ref, len(req.Services))
	clusterRef := req.Cluster
	var foreign []shapes.Failure
	for i, r := range req.Services {
		if s.foreignARN(r, "service") {
			foreign = append(foreign, shapes.Failure{Arn: r, Reason: "MISSING"})
			continue
		}
		c, n, err := s.ARNs.ServiceRef(fieldIndex("services", i), r)
		if err != nil {
			return nil, err
		}
		refs[i] = ref{c, n}
		if clusterRef == "" && c != "" {
			clusterRef = c
		}
	}
	cl, err := s.ActiveCluster(ctx, "cluster", clusterRef)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	groups := make([]string, 0, len(refs))
	for _, r := range refs {
		if r.name != "" {
			groups = append(groups, "service:"+r.name)
		}
	}
	byGroup, err := s.tasksByGroup(ctx, cluster, groups...)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	tags := slices.Contains(req.Include, "TAGS")
	out := &shapes.DescribeServicesResponse{Services: []shapes.Service{}, Failures: orEmpty(foreign)}
	for i, r := range refs {
		if r.name == "" { // a foreign ARN, already a failure
			continue
		}
		it, err := store.Get[store.Service](ctx, s.Store, store.ServiceKey(cluster, r.name))
		if errors.Is(err, store.ErrNotFound) || err == nil && r.cluster != "" && r.cluster != cluster {
			arn := req.Services[i]
			if !strings.HasPrefix(arn, "arn:") {
				arn = s.ARNs.Service(cluster, r.name)
			}
			out.Failures = append(out.Failures, shapes.Failure{Arn: arn, Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, fleet.StoreErr(err)
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
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	prefix := store.ServicePrefix(cl.Value.ClusterName)
	scope := prefix + "\x00" + req.LaunchType + "\x00" + req.SchedulingStrategy + "\x00" + req.ResourceManagementType
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, scope, 10)
	if err != nil {
		return nil, err
	}
	out := &shapes.ListServicesResponse{ServiceArns: []string{}}
	// Every service is a customer-managed REPLICA service.
	if req.SchedulingStrategy == "DAEMON" || req.ResourceManagementType == "ECS" {
		return out, nil
	}
	after := p.After
	for {
		items, more, err := store.List[store.Service](ctx, s.Store, prefix, after, p.Limit-len(out.ServiceArns))
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		for _, it := range items {
			after = it.Key
			v := it.Value
			if v.Status == "INACTIVE" || req.LaunchType != "" && v.LaunchType != req.LaunchType {
				continue
			}
			out.ServiceArns = append(out.ServiceArns, v.ServiceArn)
		}
		if !more || len(out.ServiceArns) == p.Limit {
			out.NextToken = fleet.NextToken(scope, after, more)
			return out, nil
		}
	}
}

// describeService is the API view of one service, read fresh.
func (s *Service) describeService(ctx context.Context, svc store.Service, tags bool) (*shapes.Service, error) {
	byGroup, err := s.tasksByGroup(ctx, svc.Cluster, "service:"+svc.ServiceName)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	events, err := s.serviceEvents(ctx, svc)
	if err != nil {
		return nil, err
	}
	v := s.serviceView(svc, byGroup["service:"+svc.ServiceName], events, tags)
	return &v, nil
}

func (s *Service) serviceEvents(ctx context.Context, svc store.Service) ([]shapes.ServiceEvent, error) {
	it, err := store.Get[store.ServiceEvents](ctx, s.Store, store.ServiceEventsKey(svc.Cluster, svc.ServiceName))
	if errors.Is(err, store.ErrNotFound) {
		return []shapes.ServiceEvent{}, nil
	}
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	return it.Value.Events, nil
}

// tasksByGroup lists a cluster's tasks of the given groups by group, from
// the fleet view.
func (s *Service) tasksByGroup(ctx context.Context, cluster string, groups ...string) (map[string][]servicedeploy.Task, error) {
	m := map[string][]servicedeploy.Task{}
	for _, g := range groups {
		ts, err := s.GroupTasks(ctx, cluster, g, nil)
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
func (s *Service) serviceView(svc store.Service, tasks []servicedeploy.Task, events []shapes.ServiceEvent, tags bool) shapes.Service {
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
	v.Events = orEmpty(events)
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
func failedLaunch(t servicedeploy.Task) bool {
	return t.StopCode == "TaskFailedToStart" || t.StopCode == "EssentialContainerExited" && t.StartedAt.IsZero()
}
