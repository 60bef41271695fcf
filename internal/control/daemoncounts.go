package control

import (
	"context"
	"slices"

	"github.com/capstanhq/capstan/internal/store"
)

// DaemonCount is how a daemon stands on the instances of one capacity
// provider: instances running it at a revision, draining instances still
// running it, and instances without a running task of it.
type DaemonCount struct {
	Running       map[string]int // by revision ARN
	Draining      map[string]int // by revision ARN
	WithoutDaemon int
	Instances     int // instances in scope (not INACTIVE)
}

// DaemonCounts counts, per capacity provider ARN, the daemon's tasks on the
// cluster's instances. It reads placements and tasks, the same records the
// daemons controller acts on.
func (s *Service) DaemonCounts(ctx context.Context, cluster, daemon string, cpArns []string) (map[string]*DaemonCount, error) {
	out := map[string]*DaemonCount{}
	for _, cp := range cpArns {
		out[cp] = &DaemonCount{Running: map[string]int{}, Draining: map[string]int{}}
	}
	items, _, err := store.List[store.ContainerInstance](ctx, s.st, store.ContainerInstancePrefix(cluster), "", 0)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		ci := it.Value
		if ci.Status == "INACTIVE" || ci.CapacityProviderName == "" {
			continue
		}
		cpArn := s.arns.capacityProvider(ci.CapacityProviderName)
		c, ok := out[cpArn]
		if !ok || !slices.Contains(cpArns, cpArn) {
			continue
		}
		c.Instances++
		p, err := store.Get[DaemonPlacement](ctx, s.st, DaemonPlacementKey(cluster, ci.ID, daemon))
		running := false
		if err == nil && p.Value.TaskID != "" {
			if t, err := store.Get[store.Task](ctx, s.st, store.TaskKey(cluster, p.Value.TaskID)); err == nil && t.Value.LastStatus == "RUNNING" {
				running = true
				if ci.Status == "DRAINING" {
					c.Draining[p.Value.RevisionArn]++
				} else {
					c.Running[p.Value.RevisionArn]++
				}
			}
		}
		if !running && ci.Status == "ACTIVE" {
			c.WithoutDaemon++
		}
	}
	return out, nil
}
