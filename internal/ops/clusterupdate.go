package ops

import (
	"context"
	"slices"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

func (s *Service) registerClusterUpdates(h *api.Handler) {
	api.Register(h, "UpdateCluster", s.UpdateCluster)
	api.Register(h, "UpdateClusterSettings", s.UpdateClusterSettings)
}

// checkClusterSettings validates settings as CreateCluster does.
func checkClusterSettings(settings []shapes.ClusterSetting) error {
	for i, st := range settings {
		f := fieldIndex("settings", i)
		if st.Name != "containerInsights" {
			return fault.Invalid(f+".name", "must be containerInsights (got %q)", fleet.Clip(st.Name))
		}
		if !slices.Contains([]string{"enabled", "disabled", "enhanced"}, st.Value) {
			return fault.Invalid(f+".value", "containerInsights must be enabled, disabled or enhanced (got %q)", fleet.Clip(st.Value))
		}
	}
	return nil
}

// updateCluster applies change to an ACTIVE cluster with a revision check
// and answers its description with settings and configuration.
func (s *Service) updateCluster(ctx context.Context, ref string, change func(c *store.Cluster)) (*shapes.Cluster, error) {
	if ref == "" {
		return nil, fault.Invalid("cluster", "is required")
	}
	var out store.Cluster
	err := fleet.Retry(ctx, func() error {
		it, err := s.ActiveCluster(ctx, "cluster", ref)
		if err != nil {
			return err
		}
		c := it.Value
		change(&c)
		if _, err := s.Store.Txn().Update(it.Key, it.Rev, c).Commit(ctx); err != nil {
			return err
		}
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.describeCluster(ctx, out, []string{"SETTINGS", "CONFIGURATIONS", "TAGS"})
}

// mergeClusterSettings replaces settings by name, keeping the others.
func mergeClusterSettings(cur, in []shapes.ClusterSetting) []shapes.ClusterSetting {
	out := slices.Clone(cur)
	for _, st := range in {
		if i := slices.IndexFunc(out, func(x shapes.ClusterSetting) bool { return x.Name == st.Name }); i >= 0 {
			out[i] = st
		} else {
			out = append(out, st)
		}
	}
	return out
}

func (s *Service) UpdateCluster(ctx context.Context, req *shapes.UpdateClusterRequest) (*shapes.UpdateClusterResponse, error) {
	if err := checkClusterSettings(req.Settings); err != nil {
		return nil, err
	}
	if req.ServiceConnectDefaults != nil {
		return nil, fault.NotSupported("serviceConnectDefaults: Service Connect is not supported")
	}
	cl, err := s.updateCluster(ctx, req.Cluster, func(c *store.Cluster) {
		c.Settings = mergeClusterSettings(c.Settings, req.Settings)
		if req.Configuration != nil {
			c.Configuration = req.Configuration
		}
	})
	if err != nil {
		return nil, err
	}
	return &shapes.UpdateClusterResponse{Cluster: cl}, nil
}

func (s *Service) UpdateClusterSettings(ctx context.Context, req *shapes.UpdateClusterSettingsRequest) (*shapes.UpdateClusterSettingsResponse, error) {
	if len(req.Settings) == 0 {
		return nil, fault.Invalid("settings", "is required")
	}
	if err := checkClusterSettings(req.Settings); err != nil {
		return nil, err
	}
	cl, err := s.updateCluster(ctx, req.Cluster, func(c *store.Cluster) {
		c.Settings = mergeClusterSettings(c.Settings, req.Settings)
	})
	if err != nil {
		return nil, err
	}
	return &shapes.UpdateClusterSettingsResponse{Cluster: cl}, nil
}
