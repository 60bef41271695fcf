package fleet

import (
	"context"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// agentFailures are ECS's per-instance failures for a RunTask that found
// no instance to place on although the cluster has ACTIVE instances: each
// one whose agent is not connected is reported with reason AGENT, as ECS
// reports a disconnected agent. Nil when there is no such instance.
func (s *State) agentFailures(ctx context.Context, cluster string) ([]shapes.Failure, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, err
	}
	defer v.done()
	var ids []string
	for _, fi := range v.cluster(cluster).instances {
		if fi.rec && fi.status == "ACTIVE" && !fi.connected {
			ids = append(ids, fi.id)
		}
	}
	slices.SortFunc(ids, strings.Compare)
	var out []shapes.Failure
	for _, id := range ids {
		out = append(out, shapes.Failure{Arn: s.ARNs.ContainerInstance(cluster, id), Reason: "AGENT"})
	}
	return out, nil
}

// placementFailure is a RunTask failure for a task that fit nowhere: ECS's
// reason code (RESOURCE:MEMORY, RESOURCE:CPU, RESOURCE:PORTS), which
// scripts compare, with Capstan's explanation as the detail.
func placementFailure(why string) shapes.Failure {
	code, _, _ := strings.Cut(why, "; ")
	code, _, _ = strings.Cut(code, " (")
	if code == why {
		return shapes.Failure{Reason: why}
	}
	return shapes.Failure{Reason: code, Detail: why}
}
