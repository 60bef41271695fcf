package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

// errOwnerChanged stops a launch decided on a service record that has
// changed since; it is not a conflict to retry, the decision is stale.
var errOwnerChanged = errors.New("the service changed since the launch was decided")

// StartServiceTasks places up to n tasks of the service's primary
// deployment, for the services controller. It returns the IDs of the tasks
// started and why each of the others could not be placed. An error
// wrapping store.ErrConflict means the service changed since svc was read;
// a *fault.Error says why no task of the service can start now.
func (s *State) StartServiceTasks(ctx context.Context, svc store.Item[store.Service], n int) ([]string, []string, error) {
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
	rules, err := ParsePlacement(v.PlacementStrategy, v.PlacementConstraints)
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
		td, err := s.TaskDefinition(ctx, "taskDefinition", dep.TaskDefinition)
		if err != nil {
			return nil, nil, err
		}
		tags = td.Value.Tags
	}
	cp := ""
	if len(v.CapacityProviderStrategy) > 0 {
		cp = v.CapacityProviderStrategy[0].CapacityProvider
	}
	tasks, failures, err := s.StartTasks(ctx, TaskRequest{Cluster: v.Cluster, TaskDefinition: dep.TaskDefinition,
		Group: "service:" + v.ServiceName, StartedBy: dep.Id, Tags: tags, Count: n, Rules: rules,
		owner: &Guard{svc.Key, svc.Rev}, CapacityProvider: cp, HostAccess: svc.Value.HostAccess, NetworkConfiguration: v.NetworkConfiguration,
		ExecuteCommand: v.EnableExecuteCommand != nil && *v.EnableExecuteCommand})
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
func (s *State) StopServiceTasks(ctx context.Context, svc store.Item[store.Service], tasks []store.Item[store.Task], reason string) error {
	// A stop writes the task and its desired entry: as many per
	// transaction as the store takes, each checked against the service.
	per := max(1, (s.Store.MaxTxnOps()-8)/2)
	for len(tasks) > 0 {
		n := min(len(tasks), per)
		tx := s.Store.Txn().Unchanged(svc.Key, svc.Rev)
		for _, it := range tasks[:n] {
			if err := s.StopTaskTxn(ctx, tx, it, "ServiceSchedulerInitiated", reason); err != nil {
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
