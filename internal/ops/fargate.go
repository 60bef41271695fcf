package ops

import (
	"context"
	"slices"

	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// launchType FARGATE places on managed instances: the managed-instances
// capacity provider the cluster's default strategy names first, else the
// cluster's only one. Capstan has no Fargate; this keeps requests written
// for it working where a managed instance can run the task.
func (s *Service) fargateCapacity(ctx context.Context, cl store.Item[store.Cluster]) (string, error) {
	var managed []string
	for _, name := range cl.Value.CapacityProviders {
		cp, err := s.ClusterCapacityProvider(ctx, "launchType", name, cl.Value.ClusterName)
		if err != nil {
			continue // not one of the cluster's managed providers
		}
		if cp.Value.Type == "MANAGED_INSTANCES" {
			managed = append(managed, cp.Value.Name)
		}
	}
	for _, item := range cl.Value.DefaultCapacityProviderStrategy {
		if slices.Contains(managed, item.CapacityProvider) {
			return item.CapacityProvider, nil
		}
	}
	if len(managed) == 1 {
		return managed[0], nil
	}
	return "", fault.Invalid("launchType", "FARGATE runs tasks on a managed-instances capacity provider of the cluster; cluster %q has %d and no default strategy naming one: give a capacityProviderStrategy",
		cl.Value.ClusterName, len(managed))
}

// errNotFargate is ECS's answer to launchType FARGATE with a definition
// that cannot run there.
var errNotFargate = &fault.Error{Kind: fault.InvalidParameter, Message: "Task definition does not support launch_type FARGATE."}
