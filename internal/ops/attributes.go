package ops

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// Attributes live on the container instance record: the fleet view and
// placement read them from there, and a re-registering agent keeps the
// ones PutAttributes set (store.ContainerInstance.CustomAttributes).

func (s *Service) registerAttributes(h *api.Handler) {
	api.Register(h, "PutAttributes", s.PutAttributes)
	api.Register(h, "DeleteAttributes", s.DeleteAttributes)
	api.Register(h, "ListAttributes", s.ListAttributes)
}

const (
	attrTargetType  = "container-instance"
	maxCustomAttrs  = 10 // per instance, as ECS
	maxAttrsPerCall = 10
)

var (
	customAttrName  = regexp.MustCompile(`^[A-Za-z0-9_./\\-]{1,128}$`)
	customAttrValue = regexp.MustCompile(`^[A-Za-z0-9_./\\@: -]{1,128}$`)
)

// reservedAttr says whether the instance itself reports the attribute:
// ecs.* and capstan.* describe the instance and its agent.
func reservedAttr(name string) bool {
	return strings.HasPrefix(name, "ecs.") || strings.HasPrefix(name, "capstan.")
}

// checkAttributeTargets validates attrs and resolves each target to an
// instance ID; withValues checks values as well (PutAttributes).
func (s *Service) checkAttributeTargets(cluster string, attrs []shapes.Attribute, withValues bool) ([]string, error) {
	if len(attrs) == 0 {
		return nil, fault.Invalid("attributes", "at least one attribute is required")
	}
	if len(attrs) > maxAttrsPerCall {
		return nil, fault.Invalid("attributes", "at most %d attributes per call (got %d)", maxAttrsPerCall, len(attrs))
	}
	ids := make([]string, len(attrs))
	for i, a := range attrs {
		f := fieldIndex("attributes", i)
		if !customAttrName.MatchString(a.Name) {
			return nil, fault.Invalid(f+".name", "must be 1-128 letters, numbers, hyphens, underscores, periods, forward or back slashes (got %q)", fleet.Clip(a.Name))
		}
		if reservedAttr(a.Name) {
			return nil, fault.Invalid(f+".name", "%q is reported by the instance itself; names starting with ecs. or capstan. cannot be set or deleted", fleet.Clip(a.Name))
		}
		if withValues && a.Value != "" && (!customAttrValue.MatchString(a.Value) || strings.TrimSpace(a.Value) != a.Value) {
			return nil, fault.Invalid(f+".value", "must be 1-128 letters, numbers, hyphens, underscores, periods, at signs, slashes, colons or inner spaces (got %q)", fleet.Clip(a.Value))
		}
		if a.TargetType != "" && a.TargetType != attrTargetType {
			return nil, fault.Invalid(f+".targetType", "must be %s (got %q)", attrTargetType, fleet.Clip(a.TargetType))
		}
		if a.TargetId == "" {
			return nil, fault.Invalid(f+".targetId", "is required: the container instance's ID or ARN")
		}
		id, err := s.InstanceID(f+".targetId", cluster, a.TargetId)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

// changeAttributes applies put (or delete) to each target instance in one
// transaction, so that a bad target leaves nothing written.
func (s *Service) changeAttributes(ctx context.Context, clusterRef string, attrs []shapes.Attribute, put bool) error {
	return fleet.Retry(ctx, func() error {
		cl, err := s.ActiveCluster(ctx, "cluster", clusterRef)
		if err != nil {
			return err
		}
		cluster := cl.Value.ClusterName
		ids, err := s.checkAttributeTargets(cluster, attrs, put)
		if err != nil {
			return err
		}
		items := map[string]*store.Item[store.ContainerInstance]{}
		var order []string
		for i, id := range ids {
			it := items[id]
			if it == nil {
				got, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cluster, id))
				if errors.Is(err, store.ErrNotFound) || err == nil && got.Value.Status == "INACTIVE" {
					return fault.Missing("TargetNotFoundException", "Could not find the container instance %s in cluster %s (attributes[%d].targetId).", fleet.Clip(attrs[i].TargetId), cluster, i)
				}
				if err != nil {
					return err
				}
				it = &got
				items[id] = it
				order = append(order, id)
			}
			ci := &it.Value
			a := attrs[i]
			at := slices.IndexFunc(ci.Attributes, func(x shapes.Attribute) bool { return x.Name == a.Name })
			if put {
				kept := shapes.Attribute{Name: a.Name, Value: a.Value}
				if at >= 0 {
					ci.Attributes[at] = kept
				} else {
					ci.Attributes = append(ci.Attributes, kept)
				}
				if !slices.Contains(ci.CustomAttributes, a.Name) {
					ci.CustomAttributes = append(ci.CustomAttributes, a.Name)
				}
				if n := customCount(ci.Attributes); n > maxCustomAttrs {
					return fault.Conflicting("AttributeLimitExceededException", "You can have at most %d custom attributes on container instance %s (it would have %d).", maxCustomAttrs, id, n)
				}
				continue
			}
			if at >= 0 && (a.Value == "" || ci.Attributes[at].Value == a.Value) {
				ci.Attributes = slices.Delete(ci.Attributes, at, at+1)
				ci.CustomAttributes = slices.DeleteFunc(ci.CustomAttributes, func(n string) bool { return n == a.Name })
			}
		}
		tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev)
		for _, id := range order {
			it := items[id]
			if it.Value.Version == nil {
				it.Value.Version = ptr(int64(0))
			}
			*it.Value.Version++
			tx.Update(it.Key, it.Rev, it.Value)
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		for _, id := range order {
			s.InstanceChanged(ctx, items[id].Value)
		}
		return nil
	})
}

// customCount counts the attributes the instance does not report itself.
func customCount(attrs []shapes.Attribute) int {
	n := 0
	for _, a := range attrs {
		if !reservedAttr(a.Name) {
			n++
		}
	}
	return n
}

// echoAttributes is the response's view of the request's attributes:
// targets as full ARNs, as ECS returns them.
func (s *Service) echoAttributes(clusterRef string, attrs []shapes.Attribute) []shapes.Attribute {
	cluster, _ := s.ARNs.ClusterName("cluster", clusterRef)
	out := make([]shapes.Attribute, len(attrs))
	for i, a := range attrs {
		a.TargetType = attrTargetType
		if id, err := s.InstanceID("targetId", cluster, a.TargetId); err == nil {
			a.TargetId = s.ARNs.ContainerInstance(cluster, id)
		}
		out[i] = a
	}
	return out
}

func (s *Service) PutAttributes(ctx context.Context, req *shapes.PutAttributesRequest) (*shapes.PutAttributesResponse, error) {
	if err := s.changeAttributes(ctx, req.Cluster, req.Attributes, true); err != nil {
		return nil, err
	}
	return &shapes.PutAttributesResponse{Attributes: s.echoAttributes(req.Cluster, req.Attributes)}, nil
}

func (s *Service) DeleteAttributes(ctx context.Context, req *shapes.DeleteAttributesRequest) (*shapes.DeleteAttributesResponse, error) {
	if err := s.changeAttributes(ctx, req.Cluster, req.Attributes, false); err != nil {
		return nil, err
	}
	return &shapes.DeleteAttributesResponse{Attributes: s.echoAttributes(req.Cluster, req.Attributes)}, nil
}

// ListAttributes lists the attributes of a cluster's active instances,
// built-in ones included, by instance then name.
func (s *Service) ListAttributes(ctx context.Context, req *shapes.ListAttributesRequest) (*shapes.ListAttributesResponse, error) {
	if req.TargetType != attrTargetType {
		return nil, fault.Invalid("targetType", "must be %s (got %q)", attrTargetType, fleet.Clip(req.TargetType))
	}
	if req.AttributeValue != "" && req.AttributeName == "" {
		return nil, fault.Invalid("attributeValue", "needs attributeName")
	}
	scope := "attributes\x00" + req.AttributeName + "\x00" + req.AttributeValue
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, scope, 100)
	if err != nil {
		return nil, err
	}
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	out := &shapes.ListAttributesResponse{Attributes: []shapes.Attribute{}}
	after := ""
	last := ""
	for {
		items, more, err := store.List[store.ContainerInstance](ctx, s.Store, store.ContainerInstancePrefix(cluster), after, 100)
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		for _, it := range items {
			after = it.Key
			ci := it.Value
			if ci.Status == "INACTIVE" {
				continue
			}
			attrs := slices.Clone(ci.Attributes)
			slices.SortFunc(attrs, func(a, b shapes.Attribute) int { return strings.Compare(a.Name, b.Name) })
			for _, a := range attrs {
				pos := ci.ID + "/" + a.Name
				if pos <= p.After || req.AttributeName != "" && a.Name != req.AttributeName ||
					req.AttributeValue != "" && a.Value != req.AttributeValue {
					continue
				}
				if len(out.Attributes) == p.Limit {
					out.NextToken = fleet.NextToken(scope, last, true)
					return out, nil
				}
				out.Attributes = append(out.Attributes, shapes.Attribute{Name: a.Name, Value: a.Value,
					TargetType: attrTargetType, TargetId: ci.ContainerInstanceArn})
				last = pos
			}
		}
		if !more {
			return out, nil
		}
	}
}

// keepCustomAttributes adds to what a re-registering agent reports the
// attributes PutAttributes set on the instance before.
func keepCustomAttributes(reported []shapes.Attribute, ci store.ContainerInstance) []shapes.Attribute {
	for _, name := range ci.CustomAttributes {
		if slices.ContainsFunc(reported, func(a shapes.Attribute) bool { return a.Name == name }) {
			continue
		}
		if i := slices.IndexFunc(ci.Attributes, func(a shapes.Attribute) bool { return a.Name == name }); i >= 0 {
			reported = append(reported, ci.Attributes[i])
		}
	}
	return reported
}
