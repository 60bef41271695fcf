package control

import (
	"context"
	"errors"
	"slices"

	"github.com/capstanhq/capstan/internal/api/shapes"

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
	ctx, err := s.st.ReadOnly(ctx)
	if err != nil {
		return nil, err
	}
	items, _, err := store.List[instanceProbe](ctx, s.st, store.ContainerInstancePrefix(cluster), "", 0)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		ci := it.Value
		if ci.Status == "INACTIVE" || ci.CP == "" {
			continue
		}
		cpArn := s.arns.capacityProvider(ci.CP)
		c, ok := out[cpArn]
		if !ok || !slices.Contains(cpArns, cpArn) {
			continue
		}
		c.Instances++
		rev, running, err := s.daemonOn(ctx, cluster, ci.ID, daemon)
		if err != nil {
			return nil, err
		}
		if running {
			if ci.Status == "DRAINING" {
				c.Draining[rev]++
			} else {
				c.Running[rev]++
			}
		}
		if !running && ci.Status == "ACTIVE" {
			c.WithoutDaemon++
		}
	}
	return out, nil
}

// instanceProbe is what counts and rollouts read of an instance: decoding
// only these fields keeps a fleet-wide pass cheap.
type instanceProbe struct {
	ID           string           `json:"capstanId"`
	Arn          string           `json:"containerInstanceArn"`
	Status       string           `json:"status"`
	CP           string           `json:"capacityProviderName"`
	RegisteredAt shapes.Timestamp `json:"registeredAt"`
	AccessKeyID  string           `json:"capstanAccessKeyId"`
}

type taskStatusProbe struct {
	LastStatus    string `json:"lastStatus"`
	DesiredStatus string `json:"desiredStatus"`
}

// daemonOn is the revision of a daemon's placement on an instance ("" for
// none) and whether its task runs that revision and is RUNNING.
func (s *Service) daemonOn(ctx context.Context, cluster, instance, daemon string) (rev string, running bool, err error) {
	p, err := store.Get[DaemonPlacement](ctx, s.st, DaemonPlacementKey(cluster, instance, daemon))
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	rev = p.Value.RevisionArn
	if p.Value.TaskID == "" || (p.Value.TaskRevisionArn != "" && p.Value.TaskRevisionArn != rev) {
		return rev, false, nil
	}
	t, err := store.Get[taskStatusProbe](ctx, s.st, store.TaskKey(cluster, p.Value.TaskID))
	if errors.Is(err, store.ErrNotFound) {
		return rev, false, nil
	}
	return rev, err == nil && t.Value.LastStatus == "RUNNING" && t.Value.DesiredStatus == "RUNNING", err
}
