package fleet

import (
	"context"
	"errors"
	"slices"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

// listTasksByView is ListTasks for filters the fleet view answers: the
// cluster's task keys are walked in order and each task is matched on its
// view entry, so a page costs no decoding. Decoding every record on the
// way to a page of running tasks among thousands stopped was most of
// ListTasks' cost in a rollout. A task the view does not know yet is read.
func (s *State) ListTasksByView(ctx context.Context, cluster string, p Page, scope string, viewMatch func(*IndexedTask) bool,
	match func(store.Task) bool, out *shapes.ListTasksResponse) (*shapes.ListTasksResponse, error) {
	prefix := store.TaskPrefix(cluster)
	arns, next, err := s.pageByView(ctx, prefix, p, scope, func(v fleetView, id string) (string, verdict) {
		switch t := v.cluster(cluster).tasks[id]; {
		case t == nil:
			return "", unknown
		case viewMatch(t):
			return s.ARNs.Task(cluster, id), yes
		}
		return "", no
	}, func(key string) (string, bool, error) {
		it, err := store.Get[store.Task](ctx, s.Store, key)
		if err != nil {
			return "", false, err
		}
		return it.Value.TaskArn, match(it.Value), nil
	})
	if err != nil {
		return nil, StoreErr(err)
	}
	out.TaskArns, out.NextToken = arns, next
	return out, nil
}

// verdict is what the fleet view says of one record for a list.
type verdict uint8

// pageByView pages the keys under prefix after p.after, in key order,
// deciding each in the fleet view (judge, under its read lock, with the
// key's ID after prefix) and reading only the records the view does not
// know yet (read: the ARN and whether it matches; a record gone since is
// left out). It returns the page's ARNs (never nil: an empty page is an
// empty list) and the next token.
func (s *State) pageByView(ctx context.Context, prefix string, p Page, scope string,
	judge func(v fleetView, id string) (string, verdict), read func(key string) (string, bool, error)) ([]string, string, error) {
	arns := []string{}
	after := p.After
	for {
		keys, more, err := store.Keys(ctx, s.Store, prefix, after, max(2*(p.Limit-len(arns)), 64))
		if err != nil {
			return nil, "", err
		}
		found := make([]string, len(keys))
		verdicts := make([]verdict, len(keys))
		v, err := s.fleetView(ctx)
		if err != nil {
			return nil, "", err
		}
		for i, k := range keys {
			found[i], verdicts[i] = judge(v, k[len(prefix):])
		}
		v.done()
		for i, k := range keys {
			if len(arns) == p.Limit {
				return arns, NextToken(scope, after, true), nil
			}
			after = k
			switch verdicts[i] {
			case yes:
				arns = append(arns, found[i])
			case unknown:
				arn, ok, err := read(k)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, "", err
				}
				if ok {
					arns = append(arns, arn)
				}
			}
		}
		if !more || len(arns) == p.Limit {
			return arns, NextToken(scope, after, more), nil
		}
	}
}

// listInstanceTasks is ListTasks for one container instance: its tasks are
// found in the fleet view and only they are read, in key order as the
// scan of the cluster's records would list them. That scan decoded every
// task of the cluster (30,000 at 5,000 instances) for an instance's few.
func (s *State) ListInstanceTasks(ctx context.Context, cluster, instance string, p Page, scope string, match func(store.Task) bool,
	out *shapes.ListTasksResponse) (*shapes.ListTasksResponse, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, StoreErr(err)
	}
	var keys []string
	for id, t := range v.cluster(cluster).tasks {
		if t.instance != instance {
			continue
		}
		if key := store.TaskKey(cluster, id); key > p.After {
			keys = append(keys, key)
		}
	}
	v.done()
	slices.Sort(keys)
	last := p.After
	for i, key := range keys {
		if len(out.TaskArns) == p.Limit {
			out.NextToken = NextToken(scope, last, i < len(keys))
			return out, nil
		}
		last = key
		it, err := store.Get[store.Task](ctx, s.Store, key)
		if errors.Is(err, store.ErrNotFound) {
			continue // gone since the view was read
		}
		if err != nil {
			return nil, StoreErr(err)
		}
		if match(it.Value) {
			out.TaskArns = append(out.TaskArns, it.Value.TaskArn)
		}
	}
	return out, nil
}

// desiredMatches applies ListTasks' desiredStatus filter; PENDING means
// desired RUNNING but not yet running.
func DesiredMatches(filter string, t store.Task) bool {
	switch filter {
	case "PENDING":
		return t.DesiredStatus == "RUNNING" && t.LastStatus != "RUNNING"
	default:
		return t.DesiredStatus == filter
	}
}

const (
	no verdict = iota
	yes
	unknown // not in the view yet: read the record
)
