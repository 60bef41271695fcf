package ops

import (
	"cmp"
	"context"
	"errors"
	"strings"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerDaemonTaskDefinitions(h *api.Handler) {
	api.Register(h, "RegisterDaemonTaskDefinition", s.RegisterDaemonTaskDefinition)
	api.Register(h, "DescribeDaemonTaskDefinition", s.DescribeDaemonTaskDefinition)
	api.Register(h, "ListDaemonTaskDefinitions", s.ListDaemonTaskDefinitions)
	api.Register(h, "DeleteDaemonTaskDefinition", s.DeleteDaemonTaskDefinition)
}

// Daemon task definition revisions go ACTIVE → DELETE_IN_PROGRESS → DELETED
// and are kept when DELETED, so that waiters and describes still see them.

func (s *Service) RegisterDaemonTaskDefinition(ctx context.Context, req *shapes.RegisterDaemonTaskDefinitionRequest) (*shapes.RegisterDaemonTaskDefinitionResponse, error) {
	if err := taskdef.CheckDaemon(req); err != nil {
		return nil, err
	}
	by := s.registeredBy(ctx)
	now := shapes.At(s.Now())
	td, err := addRevision(ctx, s, store.DaemonTaskDefinitionFamilyKey(req.Family), req.Family,
		func(rev int) string { return store.DaemonTaskDefinitionKey(req.Family, rev) },
		func(rev int) store.DaemonTaskDefinition {
			return store.DaemonTaskDefinition{Tags: req.Tags, DaemonTaskDefinition: shapes.DaemonTaskDefinition{
				DaemonTaskDefinitionArn: s.ARNs.DaemonTaskDefinition(req.Family, rev),
				Family:                  req.Family,
				Revision:                ptr(int32(rev)),
				Status:                  "ACTIVE",
				RegisteredAt:            now,
				RegisteredBy:            by,
				ContainerDefinitions:    req.ContainerDefinitions,
				Cpu:                     req.Cpu,
				Memory:                  req.Memory,
				ExecutionRoleArn:        req.ExecutionRoleArn,
				TaskRoleArn:             req.TaskRoleArn,
				PidMode:                 req.PidMode,
				IpcMode:                 req.IpcMode,
				Volumes:                 req.Volumes,
			}}
		})
	if err != nil {
		return nil, err
	}
	return &shapes.RegisterDaemonTaskDefinitionResponse{DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn}, nil
}

// daemonTaskDefinition resolves a family (its latest ACTIVE revision),
// family:revision or ARN to the stored revision, in any status. An unknown
// one is a ClientException naming field: the model has no NotFound for it.
func (s *Service) daemonTaskDefinition(ctx context.Context, field, ref string) (store.Item[store.DaemonTaskDefinition], error) {
	family, rev, err := s.ARNs.FamilyRevision(field, "daemon-task-definition", ref)
	if err != nil {
		return store.Item[store.DaemonTaskDefinition]{}, err
	}
	key := store.DaemonTaskDefinitionKey(family, rev)
	if rev == 0 {
		if key, err = s.LatestActive(ctx, store.DaemonTaskDefinitionPrefix(family)); err != nil {
			return store.Item[store.DaemonTaskDefinition]{}, err
		}
		if key == "" {
			return store.Item[store.DaemonTaskDefinition]{}, fault.ClientError("%s: daemon task definition family %q has no ACTIVE revision", field, family)
		}
	}
	it, err := store.Get[store.DaemonTaskDefinition](ctx, s.Store, key)
	if errors.Is(err, store.ErrNotFound) {
		return it, fault.ClientError("%s: daemon task definition %s:%d does not exist", field, family, rev)
	}
	return it, fleet.StoreErr(err)
}

// activeDaemonTaskDefinition resolves a family, family:revision or ARN to an
// ACTIVE revision, for operations that start using it. Callers that store a
// reference should commit with Unchanged(it.Key, it.Rev), so that a
// concurrent delete cannot complete underneath them.
func (s *Service) activeDaemonTaskDefinition(ctx context.Context, field, ref string) (store.Item[store.DaemonTaskDefinition], error) {
	it, err := s.daemonTaskDefinition(ctx, field, ref)
	if err != nil {
		return it, err
	}
	if st := it.Value.Status; st != "ACTIVE" {
		return it, fault.ClientError("%s: daemon task definition %s is %s; register a new revision", field, it.Value.DaemonTaskDefinitionArn, st)
	}
	return it, nil
}

func (s *Service) DescribeDaemonTaskDefinition(ctx context.Context, req *shapes.DescribeDaemonTaskDefinitionRequest) (*shapes.DescribeDaemonTaskDefinitionResponse, error) {
	it, err := s.daemonTaskDefinition(ctx, "daemonTaskDefinition", req.DaemonTaskDefinition)
	if err != nil {
		return nil, err
	}
	// The shape has no tags; callers read them with ListTagsForResource.
	return &shapes.DescribeDaemonTaskDefinitionResponse{DaemonTaskDefinition: &it.Value.DaemonTaskDefinition}, nil
}

func (s *Service) ListDaemonTaskDefinitions(ctx context.Context, req *shapes.ListDaemonTaskDefinitionsRequest) (*shapes.ListDaemonTaskDefinitionsResponse, error) {
	if err := checkFamilyFilter("familyPrefix", req.FamilyPrefix); err != nil {
		return nil, err
	}
	if err := checkFamilyFilter("family", req.Family); err != nil {
		return nil, err
	}
	status := cmp.Or(req.Status, "ACTIVE")
	sort := cmp.Or(req.Sort, "ASC")
	scope := strings.Join([]string{"daemontaskdefs", status, sort, req.Revision, req.Family, req.FamilyPrefix}, ":")
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, scope, 100)
	if err != nil {
		return nil, err
	}
	// Both filters may be given; a revision must then pass both.
	prefix := "daemontaskdefs/" + req.FamilyPrefix
	if req.Family != "" {
		prefix = store.DaemonTaskDefinitionPrefix(req.Family)
	}
	rows, err := s.RevisionRows(ctx, prefix)
	if err != nil {
		return nil, err
	}
	if req.Revision == "LAST_REGISTERED" {
		rows = lastRegistered(rows)
	}
	kept := rows[:0]
	for _, r := range rows {
		if !strings.HasPrefix(r.Family, req.FamilyPrefix) {
			continue
		}
		// ALL includes DELETED, which the filter enum cannot name.
		if status == "ALL" || r.Status == status {
			kept = append(kept, r)
		}
	}
	rows, last, more := pageRows(kept, sort == "DESC", p)
	out := &shapes.ListDaemonTaskDefinitionsResponse{DaemonTaskDefinitions: make([]shapes.DaemonTaskDefinitionSummary, 0, len(rows))}
	for _, r := range rows {
		out.DaemonTaskDefinitions = append(out.DaemonTaskDefinitions, shapes.DaemonTaskDefinitionSummary{
			Arn: r.DaemonArn, Status: r.Status, RegisteredAt: r.RegisteredAt, RegisteredBy: r.RegisteredBy, DeleteRequestedAt: r.DeleteRequestedAt,
		})
	}
	out.NextToken = fleet.NextToken(scope, last, more)
	return out, nil
}

// lastRegistered keeps the highest revision of each family. The status
// filter applies afterwards: a family whose last revision was deleted does
// not fall back to an older one.
func lastRegistered(rows []fleet.RevisionRow) []fleet.RevisionRow {
	last := map[string]int{}
	for i, r := range rows {
		if j, ok := last[r.Family]; !ok || r.Revision > rows[j].Revision {
			last[r.Family] = i
		}
	}
	out := make([]fleet.RevisionRow, 0, len(last))
	for _, i := range last {
		out = append(out, rows[i])
	}
	return out
}

func (s *Service) DeleteDaemonTaskDefinition(ctx context.Context, req *shapes.DeleteDaemonTaskDefinitionRequest) (*shapes.DeleteDaemonTaskDefinitionResponse, error) {
	const field = "daemonTaskDefinition"
	if _, rev, err := s.ARNs.FamilyRevision(field, "daemon-task-definition", req.DaemonTaskDefinition); err != nil {
		return nil, err
	} else if rev == 0 {
		return nil, fault.Invalid(field, "must name a revision, as family:revision or an ARN (got %q)", fleet.Clip(req.DaemonTaskDefinition))
	}
	var arn string
	err := fleet.Retry(ctx, func() error {
		it, err := s.daemonTaskDefinition(ctx, field, req.DaemonTaskDefinition)
		if err != nil {
			return err
		}
		td := it.Value
		if td.Status != "ACTIVE" {
			return fault.ClientError("%s: daemon task definition %s is %s; only ACTIVE revisions can be deleted", field, td.DaemonTaskDefinitionArn, td.Status)
		}
		td.Status = "DELETE_IN_PROGRESS"
		td.DeleteRequestedAt = shapes.At(s.Now())
		if _, err := s.Store.Txn().Update(it.Key, it.Rev, td).Commit(ctx); err != nil {
			return err
		}
		arn = td.DaemonTaskDefinitionArn
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The delete is recorded; completing it is a sweep that any later call
	// repeats, so a failure here only delays it.
	if err := s.FinishDaemonTaskDefinitionDeletes(ctx); err != nil {
		s.Log.Warn("complete daemon task definition deletes", "err", err)
	}
	return &shapes.DeleteDaemonTaskDefinitionResponse{DaemonTaskDefinitionArn: arn}, nil
}
