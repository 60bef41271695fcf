package ops

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerInstances(h *api.Handler) {
	api.Register(h, "RegisterContainerInstance", s.RegisterContainerInstance)
	api.Register(h, "DeregisterContainerInstance", s.DeregisterContainerInstance)
	api.Register(h, "DescribeContainerInstances", s.DescribeContainerInstances)
	api.Register(h, "ListContainerInstances", s.ListContainerInstances)
	api.Register(h, "UpdateContainerInstancesState", s.UpdateContainerInstancesState)
	api.Register(h, "DiscoverPollEndpoint", s.DiscoverPollEndpoint)
}

var attributeName = regexp.MustCompile(`^[A-Za-z0-9_./-]{1,128}$`)

func checkAttributes(field string, attrs []shapes.Attribute) error {
	if len(attrs) > 10+64 {
		return fault.Invalid(field, "at most 74 attributes")
	}
	for i, a := range attrs {
		if !attributeName.MatchString(a.Name) {
			return fault.Invalid(fieldIndex(field, i)+".name", "must be 1-128 letters, numbers, and _ . / -")
		}
		if len(a.Value) > 128 {
			return fault.Invalid(fieldIndex(field, i)+".value", "must be at most 128 characters")
		}
	}
	return nil
}

// RegisterContainerInstance registers an instance, or re-registers the one
// the caller names (or the one its agent credential is bound to), keeping
// its ID and tasks.
func (s *Service) RegisterContainerInstance(ctx context.Context, req *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error) {
	// The model makes totalResources optional. A re-registration without
	// it keeps what the instance registered before; a new instance must
	// say, since the server cannot see the host.
	derive := len(req.TotalResources) == 0
	total, err := fleet.ParseResources("totalResources", req.TotalResources)
	if err != nil && !derive {
		return nil, err
	}
	if err := checkAttributes("attributes", req.Attributes); err != nil {
		return nil, err
	}
	if err := taskdef.CheckTags("tags", req.Tags); err != nil {
		return nil, err
	}
	caller, _ := api.Caller(ctx)
	var out store.ContainerInstance
	err = fleet.Retry(ctx, func() error {
		cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return err
		}
		cluster := cl.Value.ClusterName
		var cred store.Item[store.AgentCredential]
		id := ""
		if caller.Role == auth.RoleAgent {
			cred, err = store.Get[store.AgentCredential](ctx, s.Store, store.CredentialKey(caller.AccessKeyID))
			if err != nil {
				return fault.Denied("agent credential %s is no longer valid", caller.AccessKeyID)
			}
			if cred.Value.Cluster != cluster {
				return fault.Denied("agent credential %s belongs to cluster %q, not %q", caller.AccessKeyID, cred.Value.Cluster, cluster)
			}
			id = cred.Value.InstanceID
			if id != "" && req.ContainerInstanceArn == "" {
				// The bound instance was deregistered: the credential moves to a new one.
				if cur, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cluster, id)); err == nil && cur.Value.Status == "INACTIVE" {
					if cred.Value.Managed {
						// A retired provisioned instance is being terminated.
						return fault.Denied("container instance %s was retired; its credential registers nothing else", id)
					}
					id = ""
				}
			}
		}
		if req.ContainerInstanceArn != "" {
			named, err := s.InstanceID("containerInstanceArn", cluster, req.ContainerInstanceArn)
			if err != nil {
				return err
			}
			if id != "" && named != id {
				return fault.Denied("agent credential %s is bound to container instance %s", caller.AccessKeyID, id)
			}
			id = named
		}
		tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev)
		var ci store.ContainerInstance
		var write func()
		if id != "" {
			cur, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cluster, id))
			if errors.Is(err, store.ErrNotFound) {
				return fault.ClientError("container instance %s does not exist in cluster %q", id, cluster)
			}
			if err != nil {
				return err
			}
			if cur.Value.Status == "INACTIVE" {
				return fault.ClientError("container instance %s was deregistered; register as a new instance (start the agent with a fresh data directory)", id)
			}
			ci = cur.Value
			if derive {
				if total, err = fleet.ParseResources("totalResources", ci.RegisteredResources); err != nil {
					return err
				}
			}
			// Re-registration keeps placements: what tasks hold stays held.
			rem, err := s.Remaining(ctx, ci, total)
			if err != nil {
				return err
			}
			ci.RemainingResources = rem.Shapes()
			write = func() { tx.Update(cur.Key, cur.Rev, ci) }
		} else {
			if derive {
				return fault.Invalid("totalResources", "a new container instance must give its CPU and MEMORY (the server cannot see the host); the ECS agent and Capstan's agent send them")
			}
			id = fleet.NewInstanceID()
			ci = store.ContainerInstance{ID: id, Cluster: cluster}
			ci.ContainerInstanceArn = s.ARNs.ContainerInstance(cluster, id)
			ci.Ec2InstanceId = "i-" + id[:17]
			ci.Status = "ACTIVE"
			ci.RegisteredAt = shapes.At(s.Now())
			ci.RemainingResources = total.Shapes()
			ci.Version = ptr(int64(1))
			if caller.Role == auth.RoleAgent {
				ci.AccessKeyID = caller.AccessKeyID
				ci.CapacityProviderName = cred.Value.CapacityProvider
			}
			if ci.CapacityProviderName != "" {
				// Daemons come first: the daemons controller activates the
				// instance once its critical daemons run.
				ci.Status = "REGISTERING"
			}
			key := store.ContainerInstanceKey(cluster, id)
			write = func() { tx.Create(key, ci) }
		}
		ci.RegisteredResources = total.Shapes()
		ci.VersionInfo = req.VersionInfo
		ci.Attributes = keepCustomAttributes(mergeAttributes(req.Attributes), ci)
		if req.Tags != nil {
			ci.Tags = req.Tags
		}
		*ci.Version = *ci.Version + 1
		write() // the transaction encodes values when given: after every field is set
		if caller.Role == auth.RoleAgent && cred.Value.InstanceID != id {
			c := cred.Value
			c.InstanceID = id
			tx.Update(cred.Key, cred.Rev, c)
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		s.InstanceChanged(ctx, ci)
		out = ci
		return nil
	})
	if err != nil {
		return nil, err
	}
	view, err := s.InstanceView(ctx, out, true)
	if err != nil {
		return nil, err
	}
	fillContainerInstance(view)
	return &shapes.RegisterContainerInstanceResponse{ContainerInstance: view}, nil
}

// mergeAttributes adds the attributes Capstan always reports: the OS, and
// the zone tasks report ("local"), unless the agent reports its own zone.
func mergeAttributes(in []shapes.Attribute) []shapes.Attribute {
	out := []shapes.Attribute{{Name: "ecs.os-type", Value: "linux"}, {Name: "ecs.os-family", Value: "LINUX"}}
	zone := true
	for _, a := range in {
		if a.Name != "ecs.os-type" && a.Name != "ecs.os-family" {
			out = append(out, a)
		}
		zone = zone && a.Name != "ecs.availability-zone"
	}
	if zone {
		out = append(out, shapes.Attribute{Name: "ecs.availability-zone", Value: "local"})
	}
	return out
}

func (s *Service) DescribeContainerInstances(ctx context.Context, req *shapes.DescribeContainerInstancesRequest) (*shapes.DescribeContainerInstancesResponse, error) {
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	if len(req.ContainerInstances) == 0 {
		return nil, fault.ClientError("Container Instances cannot be empty.")
	}
	if len(req.ContainerInstances) > 100 {
		return nil, fault.Invalid("containerInstances", "must name 1 to 100 container instances")
	}
	out := &shapes.DescribeContainerInstancesResponse{ContainerInstances: []shapes.ContainerInstance{}, Failures: []shapes.Failure{}}
	found := make([]store.ContainerInstance, 0, len(req.ContainerInstances))
	ids := make([]string, 0, len(req.ContainerInstances))
	for i, ref := range req.ContainerInstances {
		if s.foreignARN(ref, "container-instance") {
			out.Failures = append(out.Failures, shapes.Failure{Arn: ref, Reason: "MISSING"})
			continue
		}
		id, err := s.InstanceID(fieldIndex("containerInstances", i), cl.Value.ClusterName, ref)
		if err != nil {
			return nil, err
		}
		it, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cl.Value.ClusterName, id))
		if errors.Is(err, store.ErrNotFound) {
			out.Failures = append(out.Failures, shapes.Failure{Arn: s.ARNs.ContainerInstance(cl.Value.ClusterName, id), Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		found, ids = append(found, it.Value), append(ids, id)
	}
	// One read of the fleet view for all of them: a read per instance
	// queued behind the view's writer once each.
	counts, err := s.TaskCounts(ctx, cl.Value.ClusterName, ids)
	if err != nil {
		return nil, err
	}
	tags := slices.Contains(req.Include, "CONTAINER_INSTANCE_HEALTH") || slices.Contains(req.Include, "TAGS")
	for _, ci := range found {
		v, err := s.InstanceViewCounted(ctx, ci, tags, counts[ci.ID])
		if err != nil {
			return nil, err
		}
		fillContainerInstance(v)
		out.ContainerInstances = append(out.ContainerInstances, *v)
	}
	return out, nil
}

func (s *Service) ListContainerInstances(ctx context.Context, req *shapes.ListContainerInstancesRequest) (*shapes.ListContainerInstancesResponse, error) {
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	filter, err := fleet.ParseInstanceFilter(req.Filter)
	if err != nil {
		return nil, err
	}
	prefix := store.ContainerInstancePrefix(cl.Value.ClusterName)
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, prefix+"\x00"+req.Status+"\x00"+req.Filter, 100)
	if err != nil {
		return nil, err
	}
	// The view holds what the filters read (status, attributes), so a page
	// decodes nothing: listing 5,000 instances decoded every record.
	cluster := cl.Value.ClusterName
	matches := func(status string, attrs map[string]string) bool {
		return (req.Status == "" && status != "INACTIVE" || req.Status != "" && status == req.Status) && filter.Match(attrs)
	}
	arns, next, err := s.InstanceArnsByView(ctx, cluster, prefix, p, prefix+"\x00"+req.Status+"\x00"+req.Filter, matches)
	if err != nil {
		return nil, fleet.StoreErr(err)
	}
	return &shapes.ListContainerInstancesResponse{ContainerInstanceArns: arns, NextToken: next}, nil
}

func (s *Service) UpdateContainerInstancesState(ctx context.Context, req *shapes.UpdateContainerInstancesStateRequest) (*shapes.UpdateContainerInstancesStateResponse, error) {
	if req.Status != "ACTIVE" && req.Status != "DRAINING" {
		return nil, fault.Invalid("status", "must be ACTIVE or DRAINING (got %q)", fleet.Clip(req.Status))
	}
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	if len(req.ContainerInstances) == 0 || len(req.ContainerInstances) > 10 {
		return nil, fault.Invalid("containerInstances", "must name 1 to 10 container instances")
	}
	out := &shapes.UpdateContainerInstancesStateResponse{ContainerInstances: []shapes.ContainerInstance{}, Failures: []shapes.Failure{}}
	for i, ref := range req.ContainerInstances {
		id, err := s.InstanceID(fieldIndex("containerInstances", i), cl.Value.ClusterName, ref)
		if err != nil {
			return nil, err
		}
		var ci store.ContainerInstance
		err = fleet.Retry(ctx, func() error {
			it, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cl.Value.ClusterName, id))
			if err != nil {
				return err
			}
			ci = it.Value
			if ci.Status == "INACTIVE" || ci.Status == "DEREGISTERING" {
				return fault.ClientError("container instance %s is %s", id, ci.Status)
			}
			if req.Status == "ACTIVE" && ci.Status != "ACTIVE" {
				// Daemons first: REGISTERING until its critical daemons run.
				var changed bool
				ci, changed, err = s.activate(ctx, it)
				if err == nil && changed {
					s.InstanceChanged(ctx, ci)
				}
				return err
			}
			if ci.Status == req.Status {
				return nil
			}
			// An operator's drain: not a repair, nor a rollout's.
			ci.Status, ci.StatusReason = req.Status, ""
			*ci.Version++
			if _, err = s.Store.Txn().Update(it.Key, it.Rev, ci).Commit(ctx); err == nil {
				s.InstanceChanged(ctx, ci)
			}
			return err
		})
		if errors.Is(err, store.ErrNotFound) {
			out.Failures = append(out.Failures, shapes.Failure{Arn: s.ARNs.ContainerInstance(cl.Value.ClusterName, id), Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, err
		}
		v, err := s.InstanceView(ctx, ci, false)
		if err != nil {
			return nil, err
		}
		fillContainerInstance(v)
		out.ContainerInstances = append(out.ContainerInstances, *v)
	}
	return out, nil
}

func (s *Service) DeregisterContainerInstance(ctx context.Context, req *shapes.DeregisterContainerInstanceRequest) (*shapes.DeregisterContainerInstanceResponse, error) {
	return s.Deregister(ctx, req, "TaskFailedToStart", "Container instance deregistration forced by a user")
}

func (s *Service) DiscoverPollEndpoint(ctx context.Context, req *shapes.DiscoverPollEndpointRequest) (*DiscoverPollResponse, error) {
	if s.Endpoint() == "" {
		return nil, fmt.Errorf("no advertised endpoint configured")
	}
	return discoverPoll(s.Endpoint()) // discoverpoll.go
}
