package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
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
	return "arn:" + s.arns.partition + ":iam::" + s.arns.account + ":user/" + p.AccessKeyID
}

// addRevision takes the next revision number of a family and stores the
// revision build returns in the same transaction as the counter, so every
// number is used exactly once, even after its revision is deleted.
func addRevision[T any](ctx context.Context, s *Service, familyKey, family string, key func(int) string, build func(rev int) T) (T, error) {
	var out T
	err := retry(ctx, func() error {
		fam, err := store.Get[store.Family](ctx, s.st, familyKey)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		next := store.Family{Name: family, LastRevision: fam.Value.LastRevision + 1}
		v := build(next.LastRevision)
		tx := s.st.Txn()
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

// revisionRow is the part of a stored revision that listing needs; decoding
// only these members keeps lists cheap when definitions are large. The JSON
// names cover both kinds of task definition.
type revisionRow struct {
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
func (r revisionRow) sortKey() string { return fmt.Sprintf("%s\x00%010d", r.Family, r.Revision) }

// revisionRows reads the rows of every revision under prefix.
func (s *Service) revisionRows(ctx context.Context, prefix string) ([]revisionRow, error) {
	items, _, err := store.List[revisionRow](ctx, s.st, prefix, "", 0)
	if err != nil {
		return nil, storeErr(err)
	}
	rows := make([]revisionRow, len(items))
	for i, it := range items {
		rows[i] = it.Value
		rows[i].key = it.Key
	}
	return rows, nil
}

// latestActive returns the store key of the highest ACTIVE revision under
// prefix, or "" when the family has none.
func (s *Service) latestActive(ctx context.Context, prefix string) (string, error) {
	rows, err := s.revisionRows(ctx, prefix)
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

// pageRows sorts rows by family and revision (descending when desc) and
// returns the page after the row p.after names. Positions are compared by
// sort key, so a token stays valid when its row has been deleted since.
func pageRows(rows []revisionRow, desc bool, p page) (out []revisionRow, last string, more bool) {
	slices.SortFunc(rows, func(a, b revisionRow) int { return cmp.Compare(a.sortKey(), b.sortKey()) })
	if desc {
		slices.Reverse(rows)
	}
	start := 0
	if p.after != "" {
		start = len(rows)
		for i, r := range rows {
			if k := r.sortKey(); (!desc && k > p.after) || (desc && k < p.after) {
				start = i
				break
			}
		}
	}
	rows = rows[start:]
	if len(rows) > p.limit {
		rows, more = rows[:p.limit], true
	}
	if len(rows) > 0 {
		last = rows[len(rows)-1].sortKey()
	}
	return rows, last, more
}

// checkFamilyFilter validates a family or family-prefix list filter; an
// empty one matches everything.
func checkFamilyFilter(field, v string) error {
	if v == "" {
		return nil
	}
	return checkName(field, v)
}

func (s *Service) RegisterTaskDefinition(ctx context.Context, req *shapes.RegisterTaskDefinitionRequest) (*shapes.RegisterTaskDefinitionResponse, error) {
	if err := taskdef.CheckTask(req); err != nil {
		return nil, err
	}
	by := s.registeredBy(ctx)
	now := shapes.At(s.now())
	td, err := addRevision(ctx, s, store.TaskDefinitionFamilyKey(req.Family), req.Family,
		func(rev int) string { return store.TaskDefinitionKey(req.Family, rev) },
		func(rev int) store.TaskDefinition {
			return store.TaskDefinition{Tags: req.Tags, TaskDefinition: shapes.TaskDefinition{
				TaskDefinitionArn:       s.arns.taskDefinition(req.Family, rev),
				Family:                  req.Family,
				Revision:                ptr(int32(rev)),
				Status:                  "ACTIVE",
				RegisteredAt:            now,
				RegisteredBy:            by,
				Compatibilities:         []string{"EC2", "MANAGED_INSTANCES"},
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
	return &shapes.RegisterTaskDefinitionResponse{TaskDefinition: &td.TaskDefinition, Tags: td.Tags}, nil
}

// ECS answers a reference to a task definition it cannot find with a
// ClientException, not a NotFound.
func unknownTaskDefinition(field, format string, args ...any) error {
	return fault.ClientError(field+": "+format, args...)
}

// taskDefinition resolves a family (its latest ACTIVE revision),
// family:revision or ARN to the stored revision, in any status.
func (s *Service) taskDefinition(ctx context.Context, field, ref string) (store.Item[store.TaskDefinition], error) {
	family, rev, err := s.arns.familyRevision(field, "task-definition", ref)
	if err != nil {
		return store.Item[store.TaskDefinition]{}, err
	}
	key := store.TaskDefinitionKey(family, rev)
	if rev == 0 {
		if key, err = s.latestActive(ctx, store.TaskDefinitionPrefix(family)); err != nil {
			return store.Item[store.TaskDefinition]{}, err
		}
		if key == "" {
			return store.Item[store.TaskDefinition]{}, unknownTaskDefinition(field, "task definition family %q has no ACTIVE revision", family)
		}
	}
	it, err := store.Get[store.TaskDefinition](ctx, s.st, key)
	if errors.Is(err, store.ErrNotFound) {
		return it, unknownTaskDefinition(field, "task definition %s:%d does not exist", family, rev)
	}
	return it, storeErr(err)
}

// taskDefinitionRevision is taskDefinition for operations that act on one
// revision and so refuse a bare family.
func (s *Service) taskDefinitionRevision(ctx context.Context, field, ref string) (store.Item[store.TaskDefinition], error) {
	if _, rev, err := s.arns.familyRevision(field, "task-definition", ref); err != nil {
		return store.Item[store.TaskDefinition]{}, err
	} else if rev == 0 {
		return store.Item[store.TaskDefinition]{}, fault.Invalid(field, "must name a revision, as family:revision or an ARN (got %q)", clip(ref))
	}
	return s.taskDefinition(ctx, field, ref)
}

func (s *Service) DescribeTaskDefinition(ctx context.Context, req *shapes.DescribeTaskDefinitionRequest) (*shapes.DescribeTaskDefinitionResponse, error) {
	it, err := s.taskDefinition(ctx, "taskDefinition", req.TaskDefinition)
	if fe := fault.As(err); fe != nil && fe.Kind == fault.Client {
		return nil, fault.ClientError("Unable to describe task definition. %s", fe.Message)
	}
	if err != nil {
		return nil, err
	}
	out := &shapes.DescribeTaskDefinitionResponse{TaskDefinition: &it.Value.TaskDefinition}
	if slices.Contains(req.Include, "TAGS") {
		out.Tags = it.Value.Tags
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
	p, err := newPage(req.MaxResults, req.NextToken, scope, 100)
	if err != nil {
		return nil, err
	}
	prefix := "taskdefs/"
	if req.FamilyPrefix != "" {
		prefix = store.TaskDefinitionPrefix(req.FamilyPrefix)
	}
	rows, err := s.revisionRows(ctx, prefix)
	if err != nil {
		return nil, err
	}
	rows = slices.DeleteFunc(rows, func(r revisionRow) bool { return r.Status != status })
	rows, last, more := pageRows(rows, sort == "DESC", p)
	out := &shapes.ListTaskDefinitionsResponse{TaskDefinitionArns: make([]string, 0, len(rows))}
	for _, r := range rows {
		out.TaskDefinitionArns = append(out.TaskDefinitionArns, r.TaskDefinitionArn)
	}
	out.NextToken = nextToken(scope, last, more)
	return out, nil
}

func (s *Service) ListTaskDefinitionFamilies(ctx context.Context, req *shapes.ListTaskDefinitionFamiliesRequest) (*shapes.ListTaskDefinitionFamiliesResponse, error) {
	if err := checkFamilyFilter("familyPrefix", req.FamilyPrefix); err != nil {
		return nil, err
	}
	// Without a status ECS lists families with and without ACTIVE revisions.
	status := cmp.Or(req.Status, "ALL")
	scope := "taskdeffamilies:" + status + ":" + req.FamilyPrefix
	p, err := newPage(req.MaxResults, req.NextToken, scope, 100)
	if err != nil {
		return nil, err
	}
	out := &shapes.ListTaskDefinitionFamiliesResponse{Families: []string{}}
	// Family keys sort by name. Families that do not match are skipped, so
	// read page by page until full.
	after := p.after
	for {
		fams, more, err := store.List[store.Family](ctx, s.st, store.TaskDefinitionFamilyKey(req.FamilyPrefix), after, p.limit-len(out.Families))
		if err != nil {
			return nil, storeErr(err)
		}
		for _, f := range fams {
			after = f.Key
			rows, err := s.revisionRows(ctx, store.TaskDefinitionPrefix(f.Value.Name))
			if err != nil {
				return nil, err
			}
			// A family whose revisions were all deleted is no longer listed.
			if len(rows) == 0 {
				continue
			}
			active := slices.ContainsFunc(rows, func(r revisionRow) bool { return r.Status == "ACTIVE" })
			if status == "ALL" || (status == "ACTIVE") == active {
				out.Families = append(out.Families, f.Value.Name)
			}
		}
		if !more || len(out.Families) == p.limit {
			out.NextToken = nextToken(scope, after, more)
			return out, nil
		}
	}
}

func (s *Service) DeregisterTaskDefinition(ctx context.Context, req *shapes.DeregisterTaskDefinitionRequest) (*shapes.DeregisterTaskDefinitionResponse, error) {
	var out store.TaskDefinition
	err := retry(ctx, func() error {
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
		out.DeregisteredAt = shapes.At(s.now())
		_, err = s.st.Txn().Update(it.Key, it.Rev, out).Commit(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &shapes.DeregisterTaskDefinitionResponse{TaskDefinition: &out.TaskDefinition}, nil
}

func (s *Service) DeleteTaskDefinitions(ctx context.Context, req *shapes.DeleteTaskDefinitionsRequest) (*shapes.DeleteTaskDefinitionsResponse, error) {
	n := len(req.TaskDefinitions)
	if n == 0 || n > maxDeleteTaskDefinitions {
		return nil, fault.Invalid("taskDefinitions", "must name 1 to %d revisions (got %d)", maxDeleteTaskDefinitions, n)
	}
	refs := make([]string, n)
	for i, ref := range req.TaskDefinitions {
		family, rev, err := s.arns.familyRevision(fieldIndex("taskDefinitions", i), "task-definition", ref)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			return nil, fault.Invalid(fieldIndex("taskDefinitions", i), "must name a revision, as family:revision or an ARN (got %q)", clip(ref))
		}
		refs[i] = s.arns.taskDefinition(family, rev)
	}
	out := &shapes.DeleteTaskDefinitionsResponse{TaskDefinitions: []shapes.TaskDefinition{}, Failures: []shapes.Failure{}}
	for i, ref := range refs {
		field := fieldIndex("taskDefinitions", i)
		var deleted *store.TaskDefinition
		var failure *shapes.Failure
		err := retry(ctx, func() error {
			deleted, failure = nil, nil
			it, err := s.taskDefinition(ctx, field, ref)
			if fault.KindOf(err) == fault.Client {
				failure = &shapes.Failure{Arn: ref, Reason: "MISSING", Detail: "The specified task definition does not exist."}
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
			td.DeleteRequestedAt = shapes.At(s.now())
			// Until tasks and services exist nothing can reference a revision,
			// so its deletion completes at once: the record goes in the same
			// step. The family counter stays, so the number is never reused.
			// Once references exist, leave the record DELETE_IN_PROGRESS here
			// and remove it when the last one goes.
			if _, err := s.st.Txn().Delete(it.Key, it.Rev).Commit(ctx); err != nil {
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
			out.TaskDefinitions = append(out.TaskDefinitions, deleted.TaskDefinition)
		}
	}
	return out, nil
}
