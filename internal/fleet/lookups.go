package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// guard is an object a write depends on and must find unchanged.
type Guard struct {
	Key string
	Rev int64
}

func clusterNotFound(name string) error {
	return fault.Missing("ClusterNotFoundException", "Cluster not found.")
}

// activeCluster reads a cluster that must exist and be ACTIVE.
func (s *State) ActiveCluster(ctx context.Context, field, ref string) (store.Item[store.Cluster], error) {
	name, err := s.ARNs.ClusterName(field, ref)
	if err != nil {
		return store.Item[store.Cluster]{}, err
	}
	it, err := store.Get[store.Cluster](ctx, s.Store, store.ClusterKey(name))
	if errors.Is(err, store.ErrNotFound) || (err == nil && it.Value.Status != "ACTIVE") {
		return it, clusterNotFound(name)
	}
	return it, StoreErr(err)
}

// activeTaskDefinition resolves a task definition new tasks may use.
func (s *State) ActiveTaskDefinition(ctx context.Context, field, ref string) (store.Item[store.TaskDefinition], error) {
	it, err := s.TaskDefinition(ctx, field, ref)
	if err != nil {
		return it, err
	}
	if it.Value.Status != "ACTIVE" {
		return it, fault.ClientError("%s: task definition %s is %s; new tasks need an ACTIVE revision", field, it.Value.TaskDefinitionArn, it.Value.Status)
	}
	return it, nil
}

func (s *State) ownerUnchanged(ctx context.Context, g Guard) error {
	it, err := store.Get[store.Service](ctx, s.Store, g.Key)
	if errors.Is(err, store.ErrNotFound) || err == nil && it.Rev != g.Rev {
		return errOwnerChanged
	}
	return err
}

// serviceTaskDefinition resolves the task definition a service launches.
// ECS keeps services running on a revision deregistered after they were
// deployed, so INACTIVE is fine; a revision being deleted is not.
func (s *State) serviceTaskDefinition(ctx context.Context, field, ref string) (store.Item[store.TaskDefinition], error) {
	it, err := s.TaskDefinition(ctx, field, ref)
	if err == nil && it.Value.Status != "ACTIVE" && it.Value.Status != "INACTIVE" {
		return it, fault.ClientError("%s: task definition %s is %s and starts no new tasks", field, it.Value.TaskDefinitionArn, it.Value.Status)
	}
	return it, err
}

// revisionRow is the part of a stored revision that listing needs; decoding
// only these members keeps lists cheap when definitions are large. The JSON
// names cover both kinds of task definition.
type RevisionRow struct {
	Family            string           `json:"family"`
	Revision          int              `json:"revision"`
	Status            string           `json:"status"`
	TaskDefinitionArn string           `json:"taskDefinitionArn"`
	DaemonArn         string           `json:"daemonTaskDefinitionArn"`
	RegisteredAt      shapes.Timestamp `json:"registeredAt"`
	RegisteredBy      string           `json:"registeredBy"`
	DeleteRequestedAt shapes.Timestamp `json:"deleteRequestedAt"`
	key               string
}

// sortKey orders rows by family name, then by revision number. The NUL
// separator sorts before every family character, so "web" comes before
// "web-api", as a plain comparison of family names has it.
func (r RevisionRow) SortKey() string { return fmt.Sprintf("%s\x00%010d", r.Family, r.Revision) }

// revisionRows reads the rows of every revision under prefix.
func (s *State) RevisionRows(ctx context.Context, prefix string) ([]RevisionRow, error) {
	items, _, err := store.List[RevisionRow](ctx, s.Store, prefix, "", 0)
	if err != nil {
		return nil, StoreErr(err)
	}
	rows := make([]RevisionRow, len(items))
	for i, it := range items {
		rows[i] = it.Value
		rows[i].key = it.Key
	}
	return rows, nil
}

// latestActive returns the store key of the highest ACTIVE revision under
// prefix, or "" when the family has none.
func (s *State) LatestActive(ctx context.Context, prefix string) (string, error) {
	rows, err := s.RevisionRows(ctx, prefix)
	if err != nil {
		return "", err
	}
	best := -1
	for i, r := range rows {
		if r.Status == "ACTIVE" && (best < 0 || r.Revision > rows[best].Revision) {
			best = i
		}
	}
	if best < 0 {
		return "", nil
	}
	return rows[best].key, nil
}

// clusterCapacityProvider reads an ACTIVE capacity provider of a cluster.
func (s *State) ClusterCapacityProvider(ctx context.Context, field, ref, cluster string) (store.Item[store.CapacityProvider], error) {
	name, err := s.ARNs.CapacityProviderName(field, ref)
	if err != nil {
		return store.Item[store.CapacityProvider]{}, err
	}
	it, err := store.Get[store.CapacityProvider](ctx, s.Store, store.CapacityProviderKey(name))
	if errors.Is(err, store.ErrNotFound) || (err == nil && it.Value.Status != "ACTIVE") {
		return it, fault.Invalid(field, "capacity provider %q does not exist", name)
	}
	if err != nil {
		return it, err
	}
	if cluster != "" && it.Value.Cluster != cluster {
		return it, fault.Invalid(field, "capacity provider %q belongs to cluster %q, not %q", name, it.Value.Cluster, cluster)
	}
	return it, nil
}
