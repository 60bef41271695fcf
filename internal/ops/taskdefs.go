package ops

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerTaskDefinitions(h *api.Handler) {
	api.Register(h, "RegisterTaskDefinition", s.RegisterTaskDefinition)
	api.Register(h, "DescribeTaskDefinition", s.DescribeTaskDefinition)
	api.Register(h, "ListTaskDefinitions", s.ListTaskDefinitions)
	api.Register(h, "ListTaskDefinitionFamilies", s.ListTaskDefinitionFamilies)
	api.Register(h, "DeregisterTaskDefinition", s.DeregisterTaskDefinition)
	api.Register(h, "DeleteTaskDefinitions", s.DeleteTaskDefinitions)
}

// Both kinds of task definition are families of immutable, numbered
// revisions; the helpers below serve both.

// maxDeleteTaskDefinitions is the ECS limit per DeleteTaskDefinitions call.
const maxDeleteTaskDefinitions = 10

// registeredBy is the ARN ECS reports as the principal that registered a
// revision; Capstan credentials are access keys without IAM users, so the
// key id stands in for the user name.
func (s *Service) registeredBy(ctx context.Context) string {
	p, ok := api.Caller(ctx)
	if !ok || p.AccessKeyID == "" {
		return ""
	}
	return "arn:" + s.ARNs.Partition + ":iam::" + s.ARNs.Account + ":user/" + p.AccessKeyID
}

// addRevision takes the next revision number of a family and stores the
// revision build returns in the same transaction as the counter, so every
// number is used exactly once, even after its revision is deleted.
func addRevision[T any](ctx context.Context, s *Service, familyKey, family string, key func(int) string, build func(rev int) T) (T, error) {
	var out T
	err := fleet.Retry(ctx, func() error {
		fam, err := store.Get[store.Family](ctx, s.Store, familyKey)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		next := store.Family{Name: family, LastRevision: fam.Value.LastRevision + 1}
		v := build(next.LastRevision)
		tx := s.Store.Txn()
		if err == nil {
			tx.Update(familyKey, fam.Rev, next)
		} else {
			tx.Create(familyKey, next)
		}
		tx.Create(key(next.LastRevision), v)
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		out = v
		return nil
	})
	return out, err
}

// pageRows sorts rows by family and revision (descending when desc) and
// returns the page after the row p.after names. Positions are compared by
// sort key, so a token stays valid when its row has been deleted since.
func pageRows(rows []fleet.RevisionRow, desc bool, p fleet.Page) (out []fleet.RevisionRow, last string, more bool) {
	slices.SortFunc(rows, func(a, b fleet.RevisionRow) int { return cmp.Compare(a.SortKey(), b.SortKey()) })
	if desc {
		slices.Reverse(rows)
	}
	start := 0
	if p.After != "" {
		start = len(rows)
		for i, r := range rows {
			if k := r.SortKey(); (!desc && k > p.After) || (desc && k < p.After) {
				start = i
				break
			}
		}
	}
	rows = rows[start:]
	if len(rows) > p.Limit {
		rows, more = rows[:p.Limit], true
	}
	if len(rows) > 0 {
		last = rows[len(rows)-1].SortKey()
	}
	return rows, last, more
}

// checkFamilyFilter validates a family or family-prefix list filter; an
// empty one matches everything.
func checkFamilyFilter(field, v string) error {
	if v == "" {
		return nil
	}
	return fleet.CheckName(field, v)
}

func (s *Service) RegisterTaskDefinition(ctx context.Context, req *shapes.RegisterTaskDefinitionRequest) (*shapes.RegisterTaskDefinitionResponse, error) {
	if err := taskdef.CheckTask(req); err != nil {
		return nil, err
	}
	by := s.registeredBy(ctx)
	now := shapes.At(s.Now())
	td, err := addRevision(ctx, s, store.TaskDefinitionFamilyKey(req.Family), req.Family,
		func(rev int) string { return store.TaskDefinitionKey(req.Family, rev) },
		func(rev int) store.TaskDefinition {
			return store.TaskDefinition{Tags: req.Tags, TaskDefinition: shapes.TaskDefinition{
				TaskDefinitionArn:       s.ARNs.TaskDefinition(req.Family, rev),
				Family:                  req.Family,
				Revision:                ptr(int32(rev)),
				Status:                  "ACTIVE",
				RegisteredAt:            now,
				RegisteredBy:            by,
				Compatibilities:         taskdef.Compatibilities(compatibilities(req.RequiresCompatibilities), &shapes.TaskDefinition{NetworkMode: req.NetworkMode, Cpu: req.Cpu, Memory: req.Memory}),
				ContainerDefinitions:    req.ContainerDefinitions,
				Cpu:                     req.Cpu,
				Memory:                  req.Memory,
				EnableFaultInjection:    req.EnableFaultInjection,
				EphemeralStorage:        req.EphemeralStorage,
				ExecutionRoleArn:        req.ExecutionRoleArn,
				TaskRoleArn:             req.TaskRoleArn,
				InferenceAccelerators:   req.InferenceAccelerators,
				IpcMode:                 req.IpcMode,
				PidMode:                 req.PidMode,
				NetworkMode:             req.NetworkMode,
				PlacementConstraints:    req.PlacementConstraints,
				ProxyConfiguration:      req.ProxyConfiguration,
				RequiresCompatibilities: req.RequiresCompatibilities,
				RuntimePlatform:         req.RuntimePlatform,
				Volumes:                 req.Volumes,
			}}
		})
	if err != nil {
		return nil, err
	}
	return &shapes.RegisterTaskDefinitionResponse{TaskDefinition: taskDefinitionView(td.TaskDefinition), Tags: td.Tags}, nil
}

// taskDefinitionRevision is taskDefinition for operations that act on one
// revision and so refuse a bare family, with ECS's messages for both.
func (s *Service) taskDefinitionRevision(ctx context.Context, field, ref string) (store.Item[store.TaskDefinition], error) {
	if _, rev, err := s.ARNs.FamilyRevision(field, "task-definition", ref); err != nil {
		return store.Item[store.TaskDefinition]{}, err
	} else if rev == 0 {
		return store.Item[store.TaskDefinition]{}, fault.ClientError("Revision is missing.")
	}
	it, err := s.TaskDefinition(ctx, field, ref)
	if fault.KindOf(err) == fault.Client {
		return it, fault.ClientError("The specified task definition does not exist.")
	}
	return it, err
}

func (s *Service) DescribeTaskDefinition(ctx context.Context, req *shapes.DescribeTaskDefinitionRequest) (*shapes.DescribeTaskDefinitionResponse, error) {
	it, err := s.TaskDefinition(ctx, "taskDefinition", req.TaskDefinition)
	if fault.KindOf(err) == fault.Client {
		return nil, fault.ClientError("Unable to describe task definition.")
	}
	if err != nil {
		return nil, err
	}
	out := &shapes.DescribeTaskDefinitionResponse{TaskDefinition: taskDefinitionView(it.Value.TaskDefinition)}
	if slices.Contains(req.Include, "TAGS") {
		out.Tags = orEmpty(it.Value.Tags)
	}
	return out, nil
}

func (s *Service) ListTaskDefinitions(ctx context.Context, req *shapes.ListTaskDefinitionsRequest) (*shapes.ListTaskDefinitionsResponse, error) {
	// ECS matches familyPrefix against whole family names here, unlike
	// ListTaskDefinitionFamilies.
	if err := checkFamilyFilter("familyPrefix", req.FamilyPrefix); err != nil {
		return nil, err
	}
	status := cmp.Or(req.Status, "ACTIVE")
	sort := cmp.Or(req.Sort, "ASC")
	scope := "taskdefs:" + status + ":" + sort + ":" + req.FamilyPrefix
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, scope, 100)
	if err != nil {
		return nil, err
	}
	prefix := "taskdefs/"
	if req.FamilyPrefix != "" {
		prefix = store.TaskDefinitionPrefix(req.FamilyPrefix)
	}
	rows, err := s.RevisionRows(ctx, prefix)
	if err != nil {
		return nil, err
	}
	rows = slices.DeleteFunc(rows, func(r fleet.RevisionRow) bool { return r.Status != status })
	rows, last, more := pageRows(rows, sort == "DESC", p)
	out := &shapes.ListTaskDefinitionsResponse{TaskDefinitionArns: make([]string, 0, len(rows))}
	for _, r := range rows {
		out.TaskDefinitionArns = append(out.TaskDefinitionArns, r.TaskDefinitionArn)
	}
	out.NextToken = fleet.NextToken(scope, last, more)
	return out, nil
}

func (s *Service) ListTaskDefinitionFamilies(ctx context.Context, req *shapes.ListTaskDefinitionFamiliesRequest) (*shapes.ListTaskDefinitionFamiliesResponse, error) {
	if err := checkFamilyFilter("familyPrefix", req.FamilyPrefix); err != nil {
		return nil, err
	}
	// Without a status ECS lists families with and without ACTIVE revisions.
	status := cmp.Or(req.Status, "ALL")
	scope := "taskdeffamilies:" + status + ":" + req.FamilyPrefix
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, scope, 100)
	if err != nil {
		return nil, err
	}
	out := &shapes.ListTaskDefinitionFamiliesResponse{Families: []string{}}
	// Family keys sort by name. Families that do not match are skipped, so
	// read page by page until full.
	after := p.After
	for {
		fams, more, err := store.List[store.Family](ctx, s.Store, store.TaskDefinitionFamilyKey(req.FamilyPrefix), after, p.Limit-len(out.Families))
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		for _, f := range fams {
			after = f.Key
			rows, err := s.RevisionRows(ctx, store.TaskDefinitionPrefix(f.Value.Name))
			if err != nil {
				return nil, err
			}
			// A family whose revisions were all deleted is no longer listed.
			if len(rows) == 0 {
				continue
			}
			active := slices.ContainsFunc(rows, func(r fleet.RevisionRow) bool { return r.Status == "ACTIVE" })
			if status == "ALL" || (status == "ACTIVE") == active {
				out.Families = append(out.Families, f.Value.Name)
			}
		}
		if !more || len(out.Families) == p.Limit {
			out.NextToken = fleet.NextToken(scope, after, more)
			return out, nil
		}
	}
}

func (s *Service) DeregisterTaskDefinition(ctx context.Context, req *shapes.DeregisterTaskDefinitionRequest) (*shapes.DeregisterTaskDefinitionResponse, error) {
	var out store.TaskDefinition
	err := fleet.Retry(ctx, func() error {
		it, err := s.taskDefinitionRevision(ctx, "taskDefinition", req.TaskDefinition)
		if err != nil {
			return err
		}
		out = it.Value
		// Deregistering twice returns the revision unchanged, as ECS does.
		if out.Status != "ACTIVE" {
			return nil
		}
		out.Status = "INACTIVE"
		out.DeregisteredAt = shapes.At(s.Now())
		_, err = s.Store.Txn().Update(it.Key, it.Rev, out).Commit(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &shapes.DeregisterTaskDefinitionResponse{TaskDefinition: taskDefinitionView(out.TaskDefinition)}, nil
}

func (s *Service) DeleteTaskDefinitions(ctx context.Context, req *shapes.DeleteTaskDefinitionsRequest) (*shapes.DeleteTaskDefinitionsResponse, error) {
	n := len(req.TaskDefinitions)
	if n == 0 || n > maxDeleteTaskDefinitions {
		return nil, fault.Invalid("taskDefinitions", "must name 1 to %d revisions (got %d)", maxDeleteTaskDefinitions, n)
	}
	refs := make([]string, n)
	for i, ref := range req.TaskDefinitions {
		family, rev, err := s.ARNs.FamilyRevision(fieldIndex("taskDefinitions", i), "task-definition", ref)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			return nil, fault.Invalid(fieldIndex("taskDefinitions", i), "must name a revision, as family:revision or an ARN (got %q)", fleet.Clip(ref))
		}
		refs[i] = s.ARNs.TaskDefinition(family, rev)
	}
	out := &shapes.DeleteTaskDefinitionsResponse{TaskDefinitions: []shapes.TaskDefinition{}, Failures: []shapes.Failure{}}
	for i, ref := range refs {
		field := fieldIndex("taskDefinitions", i)
		var deleted *store.TaskDefinition
		var failure *shapes.Failure
		err := fleet.Retry(ctx, func() error {
			deleted, failure = nil, nil
			it, err := s.TaskDefinition(ctx, field, ref)
			if fault.KindOf(err) == fault.Client {
				// The ARN as the caller gave it: there is no revision to name.
				failure = &shapes.Failure{Arn: req.TaskDefinitions[i], Reason: "MISSING", Detail: "The specified task definition does not exist."}
				return nil
			}
			if err != nil {
				return err
			}
			if it.Value.Status == "ACTIVE" {
				failure = &shapes.Failure{Arn: ref, Reason: "The specified task definition is still in ACTIVE status. Deregister it first, then delete it."}
				return nil
			}
			td := it.Value
			td.Status = "DELETE_IN_PROGRESS"
			td.DeleteRequestedAt = shapes.At(s.Now())
			// Until tasks and services exist nothing can reference a revision,
			// so its deletion completes at once: the record goes in the same
			// step. The family counter stays, so the number is never reused.
			// Once references exist, leave the record DELETE_IN_PROGRESS here
			// and remove it when the last one goes.
			if _, err := s.Store.Txn().Delete(it.Key, it.Rev).Commit(ctx); err != nil {
				return err
			}
			deleted = &td
			return nil
		})
		if err != nil {
			return nil, err
		}
		if failure != nil {
			out.Failures = append(out.Failures, *failure)
		}
		if deleted != nil {
			out.TaskDefinitions = append(out.TaskDefinitions, *taskDefinitionView(deleted.TaskDefinition))
		}
	}
	return out, nil
}
