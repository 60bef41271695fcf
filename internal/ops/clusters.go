package ops

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerClusters(h *api.Handler) {
	api.Register(h, "CreateCluster", s.CreateCluster)
	api.Register(h, "DescribeClusters", s.DescribeClusters)
	api.Register(h, "ListClusters", s.ListClusters)
	api.Register(h, "DeleteCluster", s.DeleteCluster)
}

func (s *Service) CreateCluster(ctx context.Context, req *shapes.CreateClusterRequest) (*shapes.CreateClusterResponse, error) {
	name := req.ClusterName
	if name == "" {
		name = "default"
	}
	if err := fleet.CheckName("clusterName", name); err != nil {
		return nil, err
	}
	if err := taskdef.CheckTags("tags", req.Tags); err != nil {
		return nil, err
	}
	for i, st := range req.Settings {
		if st.Name != "containerInsights" {
			return nil, fault.Invalid("settings", "item %d: name must be containerInsights", i)
		}
		if !slices.Contains([]string{"enabled", "disabled", "enhanced"}, st.Value) {
			return nil, fault.Invalid("settings", "containerInsights must be enabled, disabled or enhanced (got %q)", fleet.Clip(st.Value))
		}
	}
	if len(req.CapacityProviders) > 0 || len(req.DefaultCapacityProviderStrategy) > 0 {
		return nil, fault.Invalid("capacityProviders", "create the cluster first, then its managed-instances capacity providers (CreateCapacityProvider with cluster), then PutClusterCapacityProviders")
	}
	if req.ServiceConnectDefaults != nil {
		return nil, fault.NotSupported("serviceConnectDefaults: Service Connect is not supported")
	}
	var out store.Cluster
	err := fleet.Retry(ctx, func() error {
		cur, err := store.Get[store.Cluster](ctx, s.Store, store.ClusterKey(name))
		if err == nil && cur.Value.Status == "ACTIVE" {
			// CreateCluster on an existing cluster returns it, as ECS does.
			out = cur.Value
			return nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		c := store.Cluster{CreatedAt: s.Now()}
		c.ClusterName = name
		c.ClusterArn = s.ARNs.Cluster(name)
		c.Status = "ACTIVE"
		c.Tags = req.Tags
		c.Settings = req.Settings
		if c.Settings == nil {
			// As ECS: the caller's containerInsights account setting.
			insights, err := s.defaultInsights(ctx)
			if err != nil {
				return err
			}
			c.Settings = []shapes.ClusterSetting{{Name: "containerInsights", Value: insights}}
		}
		c.Configuration = req.Configuration
		tx := s.Store.Txn()
		if err == nil {
			tx.Update(store.ClusterKey(name), cur.Rev, c) // re-creating an INACTIVE cluster
		} else {
			tx.Create(store.ClusterKey(name), c)
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	cl, err := s.describeCluster(ctx, out, []string{"TAGS", "SETTINGS", "CONFIGURATIONS"})
	if err != nil {
		return nil, err
	}
	return &shapes.CreateClusterResponse{Cluster: cl}, nil
}

// describeCluster returns the API view of c, with derived counts.
func (s *Service) describeCluster(ctx context.Context, c store.Cluster, include []string) (*shapes.Cluster, error) {
	cl := c.Cluster
	n, err := s.ClusterCounts(ctx, cl.ClusterName)
	if err != nil {
		return nil, err
	}
	i32 := func(v int) *int32 { x := int32(v); return &x }
	cl.ActiveServicesCount, cl.PendingTasksCount = i32(n.ActiveServices), i32(n.Pending)
	cl.RunningTasksCount, cl.RegisteredContainerInstancesCount = i32(n.Running), i32(n.Instances)
	if !slices.Contains(include, "TAGS") {
		cl.Tags = nil
	}
	if !slices.Contains(include, "SETTINGS") {
		cl.Settings = nil
	}
	if !slices.Contains(include, "CONFIGURATIONS") {
		cl.Configuration = nil
	}
	if cl.CapacityProviders == nil {
		cl.CapacityProviders = []string{}
	}
	if cl.DefaultCapacityProviderStrategy == nil {
		cl.DefaultCapacityProviderStrategy = []shapes.CapacityProviderStrategyItem{}
	}
	if slices.Contains(include, "STATISTICS") {
		n, err := s.Store.Count(ctx, store.DaemonPrefix(cl.ClusterName))
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		cl.Statistics = []shapes.KeyValuePair{{Name: "daemonCount", Value: strconv.Itoa(n)}}
	}
	cl.Statistics = orEmpty(cl.Statistics) // ECS answers [] without STATISTICS
	return &cl, nil
}

func (s *Service) DescribeClusters(ctx context.Context, req *shapes.DescribeClustersRequest) (*shapes.DescribeClustersResponse, error) {
	refs := req.Clusters
	if len(refs) == 0 {
		refs = []string{"default"}
	}
	if len(refs) > 100 {
		return nil, fault.Invalid("clusters", "at most 100 clusters per call (got %d)", len(refs))
	}
	out := &shapes.DescribeClustersResponse{Clusters: []shapes.Cluster{}, Failures: []shapes.Failure{}}
	for i, ref := range refs {
		if s.foreignARN(ref, "cluster") {
			out.Failures = append(out.Failures, shapes.Failure{Arn: ref, Reason: "MISSING"})
			continue
		}
		name, err := s.ARNs.ClusterName(fieldIndex("clusters", i), ref)
		if err != nil {
			return nil, err
		}
		it, err := store.Get[store.Cluster](ctx, s.Store, store.ClusterKey(name))
		if errors.Is(err, store.ErrNotFound) {
			out.Failures = append(out.Failures, shapes.Failure{Arn: s.ARNs.Cluster(name), Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		cl, err := s.describeCluster(ctx, it.Value, req.Include)
		if err != nil {
			return nil, err
		}
		out.Clusters = append(out.Clusters, *cl)
	}
	return out, nil
}

func (s *Service) ListClusters(ctx context.Context, req *shapes.ListClustersRequest) (*shapes.ListClustersResponse, error) {
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, "clusters", 100)
	if err != nil {
		return nil, err
	}
	out := &shapes.ListClustersResponse{ClusterArns: []string{}}
	// Inactive clusters are skipped, so read page by page until full.
	after := p.After
	for {
		items, more, err := store.List[store.Cluster](ctx, s.Store, "clusters/", after, p.Limit-len(out.ClusterArns))
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		for _, it := range items {
			after = it.Key
			if it.Value.Status == "ACTIVE" {
				out.ClusterArns = append(out.ClusterArns, it.Value.ClusterArn)
			}
		}
		if !more || len(out.ClusterArns) == p.Limit {
			out.NextToken = fleet.NextToken("clusters", after, more)
			return out, nil
		}
	}
}

func (s *Service) DeleteCluster(ctx context.Context, req *shapes.DeleteClusterRequest) (*shapes.DeleteClusterResponse, error) {
	if req.Cluster == "" {
		return nil, fault.Invalid("cluster", "is required")
	}
	var out store.Cluster
	err := fleet.Retry(ctx, func() error {
		it, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return err
		}
		name := it.Value.ClusterName
		daemons, _, err := store.List[store.Daemon](ctx, s.Store, store.DaemonPrefix(name), "", 0)
		if err != nil {
			return err
		}
		if len(daemons) > 0 {
			return fault.Conflicting("ClusterContainsServicesException",
				"cluster %q still has %d daemon(s) (e.g. %s); delete them and wait for their deployments to finish", name, len(daemons), daemons[0].Value.Name)
		}
		cps, err := s.clusterCapacityProviders(ctx, name)
		if err != nil {
			return err
		}
		if len(cps) > 0 {
			return fault.Conflicting("ClusterContainsCapacityProviderException",
				"cluster %q still has %d capacity provider(s) (e.g. %s); delete them first", name, len(cps), cps[0].Value.Name)
		}
		c := it.Value
		c.Status = "INACTIVE"
		c.CapacityProviders = nil
		c.DefaultCapacityProviderStrategy = nil
		// Optimistic check: nothing may have been added to the cluster meanwhile.
		if _, err := s.Store.Txn().Update(it.Key, it.Rev, c).Commit(ctx); err != nil {
			return err
		}
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	cl, err := s.describeCluster(ctx, out, nil)
	if err != nil {
		return nil, err
	}
	return &shapes.DeleteClusterResponse{Cluster: cl}, nil
}
