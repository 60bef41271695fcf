package control

import (
	"cmp"
	"context"
	"errors"
	"strings"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
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
	now := shapes.At(s.now())
	td, err := addRevision(ctx, s, store.DaemonTaskDefinitionFamilyKey(req.Family), req.Family,
		func(rev int) string { return store.DaemonTaskDefinitionKey(req.Family, rev) },
		func(rev int) store.DaemonTaskDefinition {
			return store.DaemonTaskDefinition{Tags: req.Tags, DaemonTaskDefinition: shapes.DaemonTaskDefinition{
				DaemonTaskDefinitionArn: s.arns.daemonTaskDefinition(req.Family, rev),
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
	family, rev, err := s.arns.familyRevision(field, "daemon-task-definition", ref)
	if err != nil {
		return store.Item[store.DaemonTaskDefinition]{}, err
	}
	key := store.DaemonTaskDefinitionKey(family, rev)
	if rev == 0 {
		if key, err = s.latestActive(ctx, store.DaemonTaskDefinitionPrefix(family)); err != nil {
			return store.Item[store.DaemonTaskDefinition]{}, err
		}
		if key == "" {
			return store.Item[store.DaemonTaskDefinition]{}, fault.ClientError("%s: daemon task definition family %q has no ACTIVE revision", field, family)
		}
	}
	it, err := store.Get[store.DaemonTaskDefinition](ctx, s.st, key)
	if errors.Is(err, store.ErrNotFound) {
		return it, fault.ClientError("%s: daemon task definition %s:%d does not exist", field, family, rev)
	}
	return it, storeErr(err)
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
	p, err := newPage(req.MaxResults, req.NextToken, scope, 100)
	if err != nil {
		return nil, err
	}
	// Both filters may be given; a revision must then pass both.
	prefix := "daemontaskdefs/" + req.FamilyPrefix
	if req.Family != "" {
		prefix = store.DaemonTaskDefinitionPrefix(req.Family)
	}
	rows, err := s.revisionRows(ctx, prefix)
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
	out.NextToken = nextToken(scope, last, more)
	return out, nil
}

// lastRegistered keeps the highest revision of each family. The status
// filter applies afterwards: a family whose last revision was deleted does
// not fall back to an older one.
func lastRegistered(rows []revisionRow) []revisionRow {
	last := map[string]int{}
	for i, r := range rows {
		if j, ok := last[r.Family]; !ok || r.Revision > rows[j].Revision {
			last[r.Family] = i
		}
	}
	out := make([]revisionRow, 0, len(last))
	for _, i := range last {
		out = append(out, rows[i])
	}
	return out
}

func (s *Service) DeleteDaemonTaskDefinition(ctx context.Context, req *shapes.DeleteDaemonTaskDefinitionRequest) (*shapes.DeleteDaemonTaskDefinitionResponse, error) {
	const field = "daemonTaskDefinition"
	if _, rev, err := s.arns.familyRevision(field, "daemon-task-definition", req.DaemonTaskDefinition); err != nil {
		return nil, err
	} else if rev == 0 {
		return nil, fault.Invalid(field, "must name a revision, as family:revision or an ARN (got %q)", clip(req.DaemonTaskDefinition))
	}
	var arn string
	err := retry(ctx, func() error {
		it, err := s.daemonTaskDefinition(ctx, field, req.DaemonTaskDefinition)
		if err != nil {
			return err
		}
		td := it.Value
		if td.Status != "ACTIVE" {
			return fault.ClientError("%s: daemon task definition %s is %s; only ACTIVE revisions can be deleted", field, td.DaemonTaskDefinitionArn, td.Status)
		}
		td.Status = "DELETE_IN_PROGRESS"
		td.DeleteRequestedAt = shapes.At(s.now())
		if _, err := s.st.Txn().Update(it.Key, it.Rev, td).Commit(ctx); err != nil {
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
	if err := s.finishDaemonTaskDefinitionDeletes(ctx); err != nil {
		s.log.Warn("complete daemon task definition deletes", "err", err)
	}
	return &shapes.DeleteDaemonTaskDefinitionResponse{DaemonTaskDefinitionArn: arn}, nil
}

// finishDaemonTaskDefinitionDeletes marks DELETED every DELETE_IN_PROGRESS
// daemon task definition that no daemon uses any longer: neither as its
// current definition nor through a revision of a daemon that still exists.
// Call it whenever a daemon or daemon revision goes away.
func (s *Service) finishDaemonTaskDefinitionDeletes(ctx context.Context) error {
	rows, err := s.revisionRows(ctx, "daemontaskdefs/")
	if err != nil {
		return err
	}
	var pending []revisionRow
	for _, r := range rows {
		if r.Status == "DELETE_IN_PROGRESS" {
			pending = append(pending, r)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	used, err := s.daemonTaskDefinitionsInUse(ctx)
	if err != nil {
		return err
	}
	for _, r := range pending {
		if used[r.DaemonArn] {
			continue
		}
		err := retry(ctx, func() error {
			it, err := store.Get[store.DaemonTaskDefinition](ctx, s.st, r.key)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			if err != nil || it.Value.Status != "DELETE_IN_PROGRESS" {
				return err
			}
			it.Value.Status = "DELETED"
			_, err = s.st.Txn().Update(it.Key, it.Rev, it.Value).Commit(ctx)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// daemonTaskDefinitionsInUse returns the ARNs of the daemon task definitions
// that daemons, or revisions of daemons that still exist, refer to.
func (s *Service) daemonTaskDefinitionsInUse(ctx context.Context) (map[string]bool, error) {
	daemons, _, err := store.List[store.Daemon](ctx, s.st, "daemons/", "", 0)
	if err != nil {
		return nil, storeErr(err)
	}
	used := map[string]bool{}
	exists := map[string]bool{}
	for _, d := range daemons {
		used[d.Value.Spec.TaskDefinitionArn] = true
		exists[d.Key] = true
	}
	revs, _, err := store.List[store.DaemonRevision](ctx, s.st, "daemonrevisions/", "", 0)
	if err != nil {
		return nil, storeErr(err)
	}
	for _, r := range revs {
		// Keys are daemonrevisions/CLUSTER/DAEMON/ID.
		p := strings.Split(strings.TrimPrefix(r.Key, "daemonrevisions/"), "/")
		if len(p) == 3 && exists[store.DaemonKey(p[0], p[1])] {
			used[r.Value.DaemonTaskDefinitionArn] = true
		}
	}
	return used, nil
}
