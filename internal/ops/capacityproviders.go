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
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerCapacityProviders(h *api.Handler) {
	api.Register(h, "CreateCapacityProvider", s.CreateCapacityProvider)
	api.Register(h, "DescribeCapacityProviders", s.DescribeCapacityProviders)
	api.Register(h, "UpdateCapacityProvider", s.UpdateCapacityProvider)
	api.Register(h, "DeleteCapacityProvider", s.DeleteCapacityProvider)
	api.Register(h, "PutClusterCapacityProviders", s.PutClusterCapacityProviders)
}

// clusterCapacityProviders lists the ACTIVE capacity providers of a cluster.
func (s *Service) clusterCapacityProviders(ctx context.Context, cluster string) ([]store.Item[store.CapacityProvider], error) {
	all, _, err := store.List[store.CapacityProvider](ctx, s.Store, "capacityproviders/", "", 0)
	if err != nil {
		return nil, err
	}
	var out []store.Item[store.CapacityProvider]
	for _, it := range all {
		if it.Value.Cluster == cluster && it.Value.Status == "ACTIVE" {
			out = append(out, it)
		}
	}
	return out, nil
}

func checkInstancesProvider(field string, roleArn string, lt *shapes.InstanceLaunchTemplate, opt *shapes.InfrastructureOptimization) error {
	if roleArn != "" && !strings.HasPrefix(roleArn, "arn:") {
		return fault.Invalid(field+".infrastructureRoleArn", "must be an IAM role ARN (got %q)", fleet.Clip(roleArn))
	}
	if opt != nil && opt.ScaleInAfter != nil {
		if v := *opt.ScaleInAfter; v != -1 && (v < 0 || v > 3600) {
			return fault.Invalid(field+".infrastructureOptimization.scaleInAfter", "must be -1 (never scale in) or 0-3600 seconds (got %d)", v)
		}
	}
	if lt == nil {
		return nil
	}
	if lt.NetworkConfiguration != nil && len(lt.NetworkConfiguration.Subnets) == 0 {
		return fault.Invalid(field+".instanceLaunchTemplate.networkConfiguration.subnets", "must name at least one subnet")
	}
	if r := lt.InstanceRequirements; r != nil {
		if r.VCpuCount != nil {
			if r.VCpuCount.Min == nil || *r.VCpuCount.Min < 1 {
				return fault.Invalid(field+".instanceLaunchTemplate.instanceRequirements.vCpuCount.min", "must be at least 1")
			}
			if r.VCpuCount.Max != nil && *r.VCpuCount.Max < *r.VCpuCount.Min {
				return fault.Invalid(field+".instanceLaunchTemplate.instanceRequirements.vCpuCount.max", "must not be less than min")
			}
		}
		if r.MemoryMiB != nil {
			if r.MemoryMiB.Min == nil || *r.MemoryMiB.Min < 128 {
				return fault.Invalid(field+".instanceLaunchTemplate.instanceRequirements.memoryMiB.min", "must be at least 128")
			}
			if r.MemoryMiB.Max != nil && *r.MemoryMiB.Max < *r.MemoryMiB.Min {
				return fault.Invalid(field+".instanceLaunchTemplate.instanceRequirements.memoryMiB.max", "must not be less than min")
			}
		}
	}
	if lt.StorageConfiguration != nil && lt.StorageConfiguration.StorageSizeGiB != nil && *lt.StorageConfiguration.StorageSizeGiB < 1 {
		return fault.Invalid(field+".instanceLaunchTemplate.storageConfiguration.storageSizeGiB", "must be at least 1")
	}
	return nil
}

func (s *Service) CreateCapacityProvider(ctx context.Context, req *shapes.CreateCapacityProviderRequest) (*shapes.CreateCapacityProviderResponse, error) {
	if err := fleet.CheckName("name", req.Name); err != nil {
		return nil, err
	}
	for _, p := range []string{"aws", "ecs", "fargate"} {
		if strings.HasPrefix(strings.ToLower(req.Name), p) {
			return nil, fault.Invalid("name", "must not start with %q", p)
		}
	}
	if err := taskdef.CheckTags("tags", req.Tags); err != nil {
		return nil, err
	}
	if err := s.checkAgentSettingTags("tags", req.Tags); err != nil {
		return nil, err
	}
	if req.AutoScalingGroupProvider != nil {
		return nil, fault.NotSupported("autoScalingGroupProvider: Capstan provisions managed instances itself; use managedInstancesProvider")
	}
	mip := req.ManagedInstancesProvider
	if mip == nil {
		return nil, fault.Invalid("managedInstancesProvider", "is required")
	}
	if req.Cluster == "" {
		return nil, fault.Invalid("cluster", "is required for a managed-instances capacity provider")
	}
	if err := checkInstancesProvider("managedInstancesProvider", mip.InfrastructureRoleArn, mip.InstanceLaunchTemplate, mip.InfrastructureOptimization); err != nil {
		return nil, err
	}
	var out store.CapacityProvider
	err := fleet.Retry(ctx, func() error {
		cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return err
		}
		key := store.CapacityProviderKey(req.Name)
		cur, err := store.Get[store.CapacityProvider](ctx, s.Store, key)
		if err == nil && cur.Value.Status != "INACTIVE" {
			return fault.Invalid("name", "capacity provider %q already exists", req.Name)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		cp := store.CapacityProvider{CreatedAt: s.Now()}
		cp.Name = req.Name
		cp.CapacityProviderArn = s.ARNs.CapacityProvider(req.Name)
		cp.Cluster = cl.Value.ClusterName
		cp.Status = "ACTIVE"
		cp.Type = "MANAGED_INSTANCES"
		cp.UpdateStatus = "CREATE_COMPLETE"
		cp.Tags = req.Tags
		cp.ManagedInstancesProvider = &shapes.ManagedInstancesProvider{
			InfrastructureRoleArn:      mip.InfrastructureRoleArn,
			InstanceLaunchTemplate:     mip.InstanceLaunchTemplate,
			PropagateTags:              mip.PropagateTags,
			InfrastructureOptimization: mip.InfrastructureOptimization,
			AutoRepairConfiguration:    mip.AutoRepairConfiguration,
		}
		// A managed-instances capacity provider is usable in its cluster at once.
		c := cl.Value
		if !slices.Contains(c.CapacityProviders, req.Name) {
			c.CapacityProviders = append(c.CapacityProviders, req.Name)
		}
		tx := s.Store.Txn().Update(cl.Key, cl.Rev, c)
		if err == nil {
			tx.Update(key, cur.Rev, cp)
		} else {
			tx.Create(key, cp)
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		out = cp
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &shapes.CreateCapacityProviderResponse{CapacityProvider: &out.CapacityProvider}, nil
}

func (s *Service) DescribeCapacityProviders(ctx context.Context, req *shapes.DescribeCapacityProvidersRequest) (*shapes.DescribeCapacityProvidersResponse, error) {
	out := &shapes.DescribeCapacityProvidersResponse{CapacityProviders: []shapes.CapacityProvider{}, Failures: []shapes.Failure{}}
	withTags := slices.Contains(req.Include, "TAGS")
	view := func(cp store.CapacityProvider) shapes.CapacityProvider {
		v := cp.CapacityProvider
		if !withTags {
			v.Tags = nil
		}
		return v
	}
	cluster := ""
	if req.Cluster != "" {
		it, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return nil, err
		}
		cluster = it.Value.ClusterName
	}
	if len(req.CapacityProviders) > 0 {
		if len(req.CapacityProviders) > 100 {
			return nil, fault.Invalid("capacityProviders", "at most 100 per call (got %d)", len(req.CapacityProviders))
		}
		for i, ref := range req.CapacityProviders {
			name, err := s.ARNs.CapacityProviderName(fieldIndex("capacityProviders", i), ref)
			if err != nil {
				return nil, err
			}
			it, err := store.Get[store.CapacityProvider](ctx, s.Store, store.CapacityProviderKey(name))
			if errors.Is(err, store.ErrNotFound) || (err == nil && cluster != "" && it.Value.Cluster != cluster) {
				out.Failures = append(out.Failures, shapes.Failure{Arn: s.ARNs.CapacityProvider(name), Reason: "MISSING"})
				continue
			}
			if err != nil {
				return nil, fleet.StoreErr(err)
			}
			out.CapacityProviders = append(out.CapacityProviders, view(it.Value))
		}
		return out, nil
	}
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, "capacityproviders/"+cluster, 10)
	if err != nil {
		return nil, err
	}
	after := p.After
	for {
		items, more, err := store.List[store.CapacityProvider](ctx, s.Store, "capacityproviders/", after, p.Limit-len(out.CapacityProviders))
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		for _, it := range items {
			after = it.Key
			if cluster == "" || it.Value.Cluster == cluster {
				out.CapacityProviders = append(out.CapacityProviders, view(it.Value))
			}
		}
		if !more || len(out.CapacityProviders) == p.Limit {
			out.NextToken = fleet.NextToken("capacityproviders/"+cluster, after, more)
			return out, nil
		}
	}
}

func (s *Service) UpdateCapacityProvider(ctx context.Context, req *shapes.UpdateCapacityProviderRequest) (*shapes.UpdateCapacityProviderResponse, error) {
	if req.AutoScalingGroupProvider != nil {
		return nil, fault.NotSupported("autoScalingGroupProvider: Capstan provisions managed instances itself; use managedInstancesProvider")
	}
	mip := req.ManagedInstancesProvider
	if mip == nil {
		return nil, fault.Invalid("managedInstancesProvider", "is required")
	}
	var lt *shapes.InstanceLaunchTemplate
	if u := mip.InstanceLaunchTemplate; u != nil {
		lt = &shapes.InstanceLaunchTemplate{
			Ec2InstanceProfileArn:           u.Ec2InstanceProfileArn,
			NetworkConfiguration:            u.NetworkConfiguration,
			StorageConfiguration:            u.StorageConfiguration,
			Monitoring:                      u.Monitoring,
			InstanceRequirements:            u.InstanceRequirements,
			InstanceMetadataTagsPropagation: u.InstanceMetadataTagsPropagation,
			LocalStorageConfiguration:       u.LocalStorageConfiguration,
			CapacityReservations:            u.CapacityReservations,
		}
	}
	if err := checkInstancesProvider("managedInstancesProvider", mip.InfrastructureRoleArn, lt, mip.InfrastructureOptimization); err != nil {
		return nil, err
	}
	var out store.CapacityProvider
	err := fleet.Retry(ctx, func() error {
		cluster := ""
		if req.Cluster != "" {
			cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
			if err != nil {
				return err
			}
			cluster = cl.Value.ClusterName
		}
		it, err := s.ClusterCapacityProvider(ctx, "name", req.Name, cluster)
		if err != nil {
			return err
		}
		cp := it.Value
		cur := cp.ManagedInstancesProvider
		next := *cur
		next.InfrastructureRoleArn = mip.InfrastructureRoleArn
		if lt != nil {
			// Fields the update shape lacks keep their values.
			lt.CapacityOptionType = cur.InstanceLaunchTemplate.CapacityOptionType
			lt.FipsEnabled = cur.InstanceLaunchTemplate.FipsEnabled
			lt.NitroEnclavesEnabled = cur.InstanceLaunchTemplate.NitroEnclavesEnabled
			if lt.NetworkConfiguration == nil {
				lt.NetworkConfiguration = cur.InstanceLaunchTemplate.NetworkConfiguration
			}
			next.InstanceLaunchTemplate = lt
		}
		if mip.PropagateTags != "" {
			next.PropagateTags = mip.PropagateTags
		}
		if mip.InfrastructureOptimization != nil {
			next.InfrastructureOptimization = mip.InfrastructureOptimization
		}
		if mip.AutoRepairConfiguration != nil {
			next.AutoRepairConfiguration = mip.AutoRepairConfiguration
		}
		cp.ManagedInstancesProvider = &next
		cp.UpdateStatus = "UPDATE_COMPLETE"
		if _, err := s.Store.Txn().Update(it.Key, it.Rev, cp).Commit(ctx); err != nil {
			return err
		}
		out = cp
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &shapes.UpdateCapacityProviderResponse{CapacityProvider: &out.CapacityProvider}, nil
}

// daemonsUsing lists the daemons of a cluster that target a capacity provider.
func (s *Service) daemonsUsing(ctx context.Context, cluster, cpArn string) ([]string, error) {
	ds, _, err := store.List[store.Daemon](ctx, s.Store, store.DaemonPrefix(cluster), "", 0)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range ds {
		if slices.Contains(d.Value.Spec.CapacityProviderArns, cpArn) {
			names = append(names, d.Value.Name)
		}
	}
	return names, nil
}

func (s *Service) DeleteCapacityProvider(ctx context.Context, req *shapes.DeleteCapacityProviderRequest) (*shapes.DeleteCapacityProviderResponse, error) {
	var out store.CapacityProvider
	err := fleet.Retry(ctx, func() error {
		cluster := ""
		if req.Cluster != "" {
			cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
			if err != nil {
				return err
			}
			cluster = cl.Value.ClusterName
		}
		it, err := s.ClusterCapacityProvider(ctx, "capacityProvider", req.CapacityProvider, cluster)
		if err != nil {
			return err
		}
		cp := it.Value
		users, err := s.daemonsUsing(ctx, cp.Cluster, cp.CapacityProviderArn)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return fault.ClientError("capacity provider %q is used by daemon(s) %s; delete them and wait for their deployments to finish", cp.Name, strings.Join(users, ", "))
		}
		cl, err := store.Get[store.Cluster](ctx, s.Store, store.ClusterKey(cp.Cluster))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		tx := s.Store.Txn()
		if err == nil {
			c := cl.Value
			c.CapacityProviders = slices.DeleteFunc(slices.Clone(c.CapacityProviders), func(n string) bool { return n == cp.Name })
			c.DefaultCapacityProviderStrategy = slices.DeleteFunc(slices.Clone(c.DefaultCapacityProviderStrategy), func(i shapes.CapacityProviderStrategyItem) bool {
				return i.CapacityProvider == cp.Name
			})
			tx.Update(cl.Key, cl.Rev, c)
		}
		cp.Status = "INACTIVE"
		cp.UpdateStatus = "DELETE_COMPLETE"
		tx.Update(it.Key, it.Rev, cp)
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		out = cp
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &shapes.DeleteCapacityProviderResponse{CapacityProvider: &out.CapacityProvider}, nil
}

func (s *Service) PutClusterCapacityProviders(ctx context.Context, req *shapes.PutClusterCapacityProvidersRequest) (*shapes.PutClusterCapacityProvidersResponse, error) {
	var out store.Cluster
	err := fleet.Retry(ctx, func() error {
		cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return err
		}
		name := cl.Value.ClusterName
		var names []string
		for i, ref := range req.CapacityProviders {
			it, err := s.ClusterCapacityProvider(ctx, fieldIndex("capacityProviders", i), ref, name)
			if err != nil {
				return err
			}
			if slices.Contains(names, it.Value.Name) {
				return fault.Invalid(fieldIndex("capacityProviders", i), "capacity provider %q is listed twice", it.Value.Name)
			}
			names = append(names, it.Value.Name)
		}
		base := 0
		for i, item := range req.DefaultCapacityProviderStrategy {
			f := fieldIndex("defaultCapacityProviderStrategy", i)
			cpName, err := s.ARNs.CapacityProviderName(f+".capacityProvider", item.CapacityProvider)
			if err != nil {
				return err
			}
			if !slices.Contains(names, cpName) {
				return fault.Invalid(f+".capacityProvider", "capacity provider %q must also be in capacityProviders", cpName)
			}
			if item.Base != nil && *item.Base > 0 {
				base++
			}
		}
		if base > 1 {
			return fault.Invalid("defaultCapacityProviderStrategy", "only one capacity provider may have a base")
		}
		// A capacity provider a daemon targets cannot leave the cluster.
		for _, old := range cl.Value.CapacityProviders {
			if slices.Contains(names, old) {
				continue
			}
			users, err := s.daemonsUsing(ctx, name, s.ARNs.CapacityProvider(old))
			if err != nil {
				return err
			}
			if len(users) > 0 {
				return fault.Conflicting("ResourceInUseException", "capacity provider %q is used by daemon(s) %s", old, strings.Join(users, ", "))
			}
		}
		c := cl.Value
		c.CapacityProviders = names
		c.DefaultCapacityProviderStrategy = req.DefaultCapacityProviderStrategy
		if _, err := s.Store.Txn().Update(cl.Key, cl.Rev, c).Commit(ctx); err != nil {
			return err
		}
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	cl, err := s.describeCluster(ctx, out, []string{"SETTINGS"})
	if err != nil {
		return nil, err
	}
	return &shapes.PutClusterCapacityProvidersResponse{Cluster: cl}, nil
}
