package ops

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerTags(h *api.Handler) {
	api.Register(h, "TagResource", s.TagResource)
	api.Register(h, "UntagResource", s.UntagResource)
	api.Register(h, "ListTagsForResource", s.ListTagsForResource)
}

// tagged reads and rewrites the tags of one stored object.
type tagged interface {
	tags(ctx context.Context) ([]shapes.Tag, error)
	setTags(ctx context.Context, tags []shapes.Tag) error
}

type taggedObject[T any] struct {
	s      *Service
	key    string
	active func(*T) bool
	get    func(*T) *[]shapes.Tag
	it     store.Item[T]
}

func (o *taggedObject[T]) load(ctx context.Context) error {
	it, err := store.Get[T](ctx, o.s.Store, o.key)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !o.active(&it.Value)) {
		return fault.Missing("ResourceNotFoundException", "the resource does not exist")
	}
	o.it = it
	return err
}

func (o *taggedObject[T]) tags(ctx context.Context) ([]shapes.Tag, error) {
	if err := o.load(ctx); err != nil {
		return nil, err
	}
	return *o.get(&o.it.Value), nil
}

func (o *taggedObject[T]) setTags(ctx context.Context, tags []shapes.Tag) error {
	v := o.it.Value
	*o.get(&v) = tags
	_, err := o.s.Store.Txn().Update(o.key, o.it.Rev, v).Commit(ctx)
	return err
}

// resolveTagged maps a resource ARN to its stored object.
func (s *Service) resolveTagged(arn string) (tagged, error) {
	bad := fault.Invalid("resourceArn", "%q is not the ARN of a cluster, capacity provider, task definition, daemon task definition, daemon, service, task or container instance of this account and region", fleet.Clip(arn))
	typ, path, ok := s.ARNs.Resource(arn)
	if !ok || !s.ARNs.InAccount(arn) {
		return nil, bad
	}
	switch typ {
	case "cluster":
		name, err := s.ARNs.ClusterName("resourceArn", arn)
		if err != nil {
			return nil, err
		}
		return &taggedObject[store.Cluster]{s: s, key: store.ClusterKey(name),
			active: func(c *store.Cluster) bool { return c.Status == "ACTIVE" },
			get:    func(c *store.Cluster) *[]shapes.Tag { return &c.Tags }}, nil
	case "capacity-provider":
		name, err := s.ARNs.CapacityProviderName("resourceArn", arn)
		if err != nil {
			return nil, err
		}
		return &taggedObject[store.CapacityProvider]{s: s, key: store.CapacityProviderKey(name),
			active: func(c *store.CapacityProvider) bool { return c.Status == "ACTIVE" },
			get:    func(c *store.CapacityProvider) *[]shapes.Tag { return &c.Tags }}, nil
	case "task-definition":
		family, rev, err := s.ARNs.FamilyRevision("resourceArn", typ, arn)
		if err != nil || rev == 0 {
			return nil, bad
		}
		return &taggedObject[store.TaskDefinition]{s: s, key: store.TaskDefinitionKey(family, rev),
			active: func(*store.TaskDefinition) bool { return true },
			get:    func(t *store.TaskDefinition) *[]shapes.Tag { return &t.Tags }}, nil
	case "daemon-task-definition":
		family, rev, err := s.ARNs.FamilyRevision("resourceArn", typ, arn)
		if err != nil || rev == 0 {
			return nil, bad
		}
		return &taggedObject[store.DaemonTaskDefinition]{s: s, key: store.DaemonTaskDefinitionKey(family, rev),
			active: func(t *store.DaemonTaskDefinition) bool { return t.Status != "DELETED" },
			get:    func(t *store.DaemonTaskDefinition) *[]shapes.Tag { return &t.Tags }}, nil
	case "daemon":
		cluster, name, err := s.ARNs.DaemonName("resourceArn", arn)
		if err != nil {
			return nil, err
		}
		return &taggedObject[store.Daemon]{s: s, key: store.DaemonKey(cluster, name),
			active: func(*store.Daemon) bool { return true },
			get:    func(d *store.Daemon) *[]shapes.Tag { return &d.Tags }}, nil
	case "service":
		cluster, name, err := s.ARNs.ServiceRef("resourceArn", arn)
		if err != nil {
			return nil, err
		}
		if cluster == "" { // the older ARN form, without the cluster
			cluster = "default"
		}
		return &taggedObject[store.Service]{s: s, key: store.ServiceKey(cluster, name),
			active: func(v *store.Service) bool { return v.Status != "INACTIVE" },
			get:    func(v *store.Service) *[]shapes.Tag { return &v.Tags }}, nil
	case "task":
		cluster, id, ok := strings.Cut(path, "/")
		if !ok {
			return nil, bad
		}
		if _, err := s.TaskID("resourceArn", cluster, arn); err != nil {
			return nil, err
		}
		return &taggedObject[store.Task]{s: s, key: store.TaskKey(cluster, id),
			active: func(*store.Task) bool { return true },
			get:    func(t *store.Task) *[]shapes.Tag { return &t.Tags }}, nil
	case "container-instance":
		cluster, _, ok := strings.Cut(path, "/")
		if !ok {
			return nil, bad
		}
		id, err := s.InstanceID("resourceArn", cluster, arn)
		if err != nil {
			return nil, err
		}
		return &taggedObject[store.ContainerInstance]{s: s, key: store.ContainerInstanceKey(cluster, id),
			active: func(ci *store.ContainerInstance) bool { return ci.Status != "INACTIVE" },
			get:    func(ci *store.ContainerInstance) *[]shapes.Tag { return &ci.Tags }}, nil
	}
	return nil, bad
}

func (s *Service) TagResource(ctx context.Context, req *shapes.TagResourceRequest) (*shapes.TagResourceResponse, error) {
	if err := taskdef.CheckTags("tags", req.Tags); err != nil {
		return nil, err
	}
	obj, err := s.resolveTagged(req.ResourceArn)
	if err != nil {
		return nil, err
	}
	if _, ok := obj.(*taggedObject[store.CapacityProvider]); ok {
		if err := s.checkAgentSettingTags("tags", req.Tags); err != nil {
			return nil, err
		}
	}
	err = fleet.Retry(ctx, func() error {
		cur, err := obj.tags(ctx)
		if err != nil {
			return err
		}
		next := slices.Clone(cur)
		for _, t := range req.Tags {
			i := slices.IndexFunc(next, func(x shapes.Tag) bool { return x.Key == t.Key })
			if i >= 0 {
				next[i] = t
			} else {
				next = append(next, t)
			}
		}
		if err := taskdef.CheckTags("tags", next); err != nil {
			return err
		}
		return obj.setTags(ctx, next)
	})
	if err != nil {
		return nil, err
	}
	return &shapes.TagResourceResponse{}, nil
}

func (s *Service) UntagResource(ctx context.Context, req *shapes.UntagResourceRequest) (*shapes.UntagResourceResponse, error) {
	obj, err := s.resolveTagged(req.ResourceArn)
	if err != nil {
		return nil, err
	}
	err = fleet.Retry(ctx, func() error {
		cur, err := obj.tags(ctx)
		if err != nil {
			return err
		}
		next := slices.DeleteFunc(slices.Clone(cur), func(t shapes.Tag) bool { return slices.Contains(req.TagKeys, t.Key) })
		if len(next) == len(cur) {
			return nil
		}
		return obj.setTags(ctx, next)
	})
	if err != nil {
		return nil, err
	}
	return &shapes.UntagResourceResponse{}, nil
}

func (s *Service) ListTagsForResource(ctx context.Context, req *shapes.ListTagsForResourceRequest) (*shapes.ListTagsForResourceResponse, error) {
	obj, err := s.resolveTagged(req.ResourceArn)
	if err != nil {
		return nil, err
	}
	tags, err := obj.tags(ctx)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	if tags == nil {
		tags = []shapes.Tag{}
	}
	return &shapes.ListTagsForResourceResponse{Tags: tags}, nil
}
