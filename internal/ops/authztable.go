package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// This file says, for every operation, what IAM authorizes it against:
// the action, the resource ARNs and the condition keys, following AWS's
// service authorization reference for ECS where it speaks. The evaluation
// (authz.go) asks policies about what authTargetOf returns;
// docs/permissions.md shows authTable, rendered by TestAuthTableDocs.

// authTarget is what one call is authorized against.
type authTarget struct {
	Action     string              // "ecs:RunTask", "ecs:CreateDaemon", "capstan:ListAuditEvents" for extensions
	Resources  []string            // ARNs; "*" where the reference lists no resource type
	Conditions map[string][]string // condition keys to values
	// PerResource holds the keys whose values differ from one resource to
	// the next (their tags, their cluster), by resource ARN; Conditions then
	// leaves them out, so that one resource's values never stand in for
	// another's. requests() merges them.
	PerResource map[string]map[string][]string
	// Also lists further checks the same call must pass: as on AWS, tags
	// given to a call that creates a resource are authorized as
	// ecs:TagResource too, with ecs:CreateAction naming the call's action;
	// a task definition that asks for host access is authorized as the
	// permission-only action capstan:HostAccess, so that no policy grants
	// it by granting the call alone.
	Also []authTarget
}

// authRequest is one question for the policy evaluator.
type authRequest struct {
	Action     string
	Resource   string
	Conditions map[string][]string
}

// requests flattens t into one question per action and resource, each
// with every condition key that applies to that resource; the call is
// allowed only when every one is.
func (t authTarget) requests() []authRequest {
	out := make([]authRequest, 0, len(t.Resources))
	for _, r := range t.Resources {
		conds := t.Conditions
		if own := t.PerResource[r]; len(own) > 0 {
			conds = maps.Clone(t.Conditions)
			if conds == nil {
				conds = map[string][]string{}
			}
			maps.Copy(conds, own)
		}
		out = append(out, authRequest{Action: t.Action, Resource: r, Conditions: conds})
	}
	for _, a := range t.Also {
		out = append(out, a.requests()...)
	}
	return out
}

// Condition keys. Tag keys are prefixes completed by the tag's key.
const (
	condCluster              = "ecs:cluster"
	condCapacityProvider     = "ecs:capacity-provider"
	condTaskDefinition       = "ecs:task-definition"
	condDaemonTaskDefinition = "ecs:daemon-task-definition"
	condDaemon               = "ecs:daemon"
	condService              = "ecs:service"
	condContainerInstances   = "ecs:container-instances"
	condContainerName        = "ecs:container-name"
	condPrivileged           = "ecs:privileged"
	condCreateAction         = "ecs:CreateAction"
	condTagKeys              = "aws:TagKeys"
	condRequestTag           = "aws:RequestTag/"
	condResourceTag          = "aws:ResourceTag/"
	condECSResourceTag       = "ecs:ResourceTag/" // the reference's ECS-specific twin of aws:ResourceTag
	condHostAccess           = "capstan:HostAccess"
	condHostAccessKinds      = "capstan:HostAccessKinds"
)

// Names of the tag keys as the docs write them.
const (
	docRequestTag  = condRequestTag + "${TagKey}"
	docResourceTag = condResourceTag + "${TagKey}"
)

// docKey is the name the docs give a supplied key: tag keys by their
// pattern, ecs:ResourceTag/ with its aws: twin.
func docKey(k string) string {
	switch {
	case strings.HasPrefix(k, condRequestTag):
		return docRequestTag
	case strings.HasPrefix(k, condResourceTag), strings.HasPrefix(k, condECSResourceTag):
		return docResourceTag
	}
	return k
}

// authSpec is one row of the table.
type authSpec struct {
	action    string
	resources string   // what the call is checked against, as the docs say it
	keys      []string // condition keys the reference lists for the action that the table supplies
	extra     []string // keys Capstan supplies beyond the reference's for the action
	also      []string // further checks, as the docs say them
	newReq    func() any
	build     func(b *authBuild, req any) error
}

// authOp makes a row whose builder takes the operation's input type.
func authOp[R any](action, resources string, keys, extra []string, build func(b *authBuild, r *R) error) authSpec {
	return authSpec{action: action, resources: resources, keys: keys, extra: extra,
		newReq: func() any { return new(R) },
		build: func(b *authBuild, req any) error {
			r, ok := req.(*R)
			if !ok {
				return fmt.Errorf("ops: authorizing %s: request is %T, want %T", b.op, req, r)
			}
			return build(b, r)
		}}
}

// Further checks, as the docs say them.
const (
	alsoTagging    = "`ecs:TagResource` when tags are given"
	alsoHostAccess = "`capstan:HostAccess` when the task definition asks for host access"
)

// withTagging marks a row whose tags at creation are also checked as
// ecs:TagResource.
func (sp authSpec) withTagging() authSpec {
	sp.also = append(slices.Clip(sp.also), alsoTagging)
	return sp
}

// withHostAccess marks a row whose task definition's host access is also
// checked as capstan:HostAccess.
func (sp authSpec) withHostAccess() authSpec {
	sp.also = append(slices.Clip(sp.also), alsoHostAccess)
	return sp
}

// keys lists condition keys, for the rows.
func keys(k ...string) []string { return k }

// authTargetOf computes what a call is authorized against from its decoded
// request (req is the pointer the operation receives). Errors are the
// request's own faults (a malformed ARN) or the store's.
func (s *Service) authTargetOf(ctx context.Context, op string, req any) (authTarget, error) {
	sp, ok := authTable[op]
	if !ok {
		return authTarget{}, fmt.Errorf("ops: no authorization entry for operation %s", op)
	}
	if api.ReadOnly(op) {
		// A read may judge by records a moment old rather than wait for
		// the process's latest writes (the caller's own scope is set only
		// after authorization); a write reads at the latest, as it will.
		ctx = s.Store.InScope(ctx, new(store.Scope), true)
	}
	if raw, ok := req.(json.RawMessage); ok {
		// The request as JSON: for callers that cannot import the
		// operation's type (the console asking before it offers a button).
		r := sp.newReq()
		if err := json.Unmarshal(raw, r); err != nil {
			return authTarget{}, fault.Invalid("request", "is not a %s request: %v", op, err)
		}
		req = r
	}
	b := &authBuild{s: s, op: op, ctx: ctx, t: authTarget{Action: sp.action}}
	if err := sp.build(b, req); err != nil {
		return authTarget{}, err
	}
	return b.done(), nil
}

// Texts of the resources column.
const (
	resAll         = "`*`"
	resCluster     = "cluster"
	resService     = "service"
	resDaemon      = "daemon"
	resTaskDefRev  = "task definition (`family:revision`)"
	resDaemonTDRev = "daemon task definition (`family:revision`)"
)

// authTable covers every operation Capstan serves: the ECS operations
// register.go adds and the CapstanV1 extensions. Extensions take the
// capstan: prefix, or the ECS action they are a variant of.
var authTable = map[string]authSpec{
	// Clusters.
	"CreateCluster": authOp("ecs:CreateCluster", resCluster,
		keys(docRequestTag, condTagKeys, condCapacityProvider), keys(condCluster),
		func(b *authBuild, r *shapes.CreateClusterRequest) error {
			_, arn, err := b.clusterArn("clusterName", r.ClusterName)
			if err != nil {
				return err
			}
			b.resource(arn, map[string][]string{condCluster: {arn}})
			cps, err := b.capacityProviderArns("capacityProviders", r.CapacityProviders)
			if err != nil {
				return err
			}
			strategy, err := b.strategyArns("defaultCapacityProviderStrategy", r.DefaultCapacityProviderStrategy)
			if err != nil {
				return err
			}
			b.set(condCapacityProvider, append(cps, strategy...)...)
			b.requestTags(r.Tags)
			b.tagOnCreate(arn, r.Tags, arn)
			return nil
		}).withTagging(),
	"DescribeClusters": authOp("ecs:DescribeClusters", "each cluster named (`default` when none)",
		keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.DescribeClustersRequest) error {
			refs := r.Clusters
			if len(refs) == 0 {
				refs = []string{"default"}
			}
			for i, ref := range refs {
				if _, _, err := b.cluster(fieldIndex("clusters", i), ref); err != nil {
					return err
				}
			}
			return nil
		}),
	"ListClusters": authOp("ecs:ListClusters", resAll, nil, nil,
		func(*authBuild, *shapes.ListClustersRequest) error { return nil }),
	"DeleteCluster": authOp("ecs:DeleteCluster", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.DeleteClusterRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),

	// Capacity providers: Capstan's belong to one cluster, so they carry it.
	"CreateCapacityProvider": authOp("ecs:CreateCapacityProvider", "capacity provider",
		keys(docRequestTag, condTagKeys), keys(condCluster),
		func(b *authBuild, r *shapes.CreateCapacityProviderRequest) error {
			name, err := b.s.ARNs.CapacityProviderName("name", r.Name)
			if err != nil {
				return err
			}
			_, clusterArn, err := b.clusterArn("cluster", r.Cluster)
			if err != nil {
				return err
			}
			arn := b.s.ARNs.CapacityProvider(name)
			b.resource(arn, map[string][]string{condCluster: {clusterArn}})
			b.requestTags(r.Tags)
			b.tagOnCreate(arn, r.Tags, clusterArn)
			return nil
		}).withTagging(),
	"DescribeCapacityProviders": authOp("ecs:DescribeCapacityProviders",
		"each capacity provider named; `capacity-provider/*` when none", keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.DescribeCapacityProvidersRequest) error {
			if len(r.CapacityProviders) == 0 {
				b.resource(b.s.ARNs.CapacityProvider("*"), nil)
				if r.Cluster != "" {
					_, arn, err := b.clusterArn("cluster", r.Cluster)
					if err != nil {
						return err
					}
					b.set(condCluster, arn)
				}
				return nil
			}
			for i, ref := range r.CapacityProviders {
				if err := b.capacityProvider(fieldIndex("capacityProviders", i), ref, r.Cluster); err != nil {
					return err
				}
			}
			return nil
		}),
	"UpdateCapacityProvider": authOp("ecs:UpdateCapacityProvider", "capacity provider", keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.UpdateCapacityProviderRequest) error {
			return b.capacityProvider("name", r.Name, r.Cluster)
		}),
	"DeleteCapacityProvider": authOp("ecs:DeleteCapacityProvider", "capacity provider", keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.DeleteCapacityProviderRequest) error {
			return b.capacityProvider("capacityProvider", r.CapacityProvider, r.Cluster)
		}),
	"PutClusterCapacityProviders": authOp("ecs:PutClusterCapacityProviders", resCluster,
		keys(docResourceTag, condCapacityProvider), keys(condCluster),
		func(b *authBuild, r *shapes.PutClusterCapacityProvidersRequest) error {
			if _, _, err := b.cluster("cluster", r.Cluster); err != nil {
				return err
			}
			cps, err := b.capacityProviderArns("capacityProviders", r.CapacityProviders)
			if err != nil {
				return err
			}
			strategy, err := b.strategyArns("defaultCapacityProviderStrategy", r.DefaultCapacityProviderStrategy)
			if err != nil {
				return err
			}
			b.set(condCapacityProvider, append(cps, strategy...)...)
			return nil
		}),

	// Task definitions. The reference gives Describe and Deregister no
	// resource type, so they are checked against *.
	"RegisterTaskDefinition": authOp("ecs:RegisterTaskDefinition", "the revision it will create",
		keys(docRequestTag, condTagKeys, condPrivileged), keys(condHostAccess, condHostAccessKinds),
		func(b *authBuild, r *shapes.RegisterTaskDefinitionRequest) error {
			if err := fleet.CheckName("family", r.Family); err != nil {
				return err
			}
			arn, err := b.nextRevision("task-definition", store.TaskDefinitionFamilyKey(r.Family), r.Family)
			if err != nil {
				return err
			}
			b.resource(arn, nil)
			b.requestTags(r.Tags)
			flags := make([]*bool, len(r.ContainerDefinitions))
			for i := range r.ContainerDefinitions {
				flags[i] = r.ContainerDefinitions[i].Privileged
			}
			b.set(condPrivileged, privileged(flags...))
			b.hostAccess(&shapes.TaskDefinition{NetworkMode: r.NetworkMode, PidMode: r.PidMode, IpcMode: r.IpcMode,
				Volumes: r.Volumes, ContainerDefinitions: r.ContainerDefinitions}, arn, "")
			b.tagOnCreate(arn, r.Tags, "")
			return nil
		}).withHostAccess().withTagging(),
	"DescribeTaskDefinition": authOp("ecs:DescribeTaskDefinition", resAll, nil, nil,
		func(*authBuild, *shapes.DescribeTaskDefinitionRequest) error { return nil }),
	"ListTaskDefinitions": authOp("ecs:ListTaskDefinitions", resAll, nil, nil,
		func(*authBuild, *shapes.ListTaskDefinitionsRequest) error { return nil }),
	"ListTaskDefinitionFamilies": authOp("ecs:ListTaskDefinitionFamilies", resAll, nil, nil,
		func(*authBuild, *shapes.ListTaskDefinitionFamiliesRequest) error { return nil }),
	"DeregisterTaskDefinition": authOp("ecs:DeregisterTaskDefinition", resAll, nil, nil,
		func(*authBuild, *shapes.DeregisterTaskDefinitionRequest) error { return nil }),
	"DeleteTaskDefinitions": authOp("ecs:DeleteTaskDefinitions", "each task definition named (`family:revision`)",
		keys(docResourceTag), nil,
		func(b *authBuild, r *shapes.DeleteTaskDefinitionsRequest) error {
			for i, ref := range r.TaskDefinitions {
				field := fieldIndex("taskDefinitions", i)
				family, rev, err := b.s.ARNs.FamilyRevision(field, "task-definition", ref)
				if err != nil {
					return err
				}
				if rev == 0 {
					b.resource(b.anyRevision("task-definition", family), nil)
					continue
				}
				td, _, err := readAuth[store.TaskDefinition](b.ctx, b.s, store.TaskDefinitionKey(family, rev))
				if err != nil {
					return err
				}
				b.resource(b.s.ARNs.TaskDefinition(family, rev), resourceTags(nil, td.Tags))
			}
			return nil
		}),

	// Daemon task definitions.
	"RegisterDaemonTaskDefinition": authOp("ecs:RegisterDaemonTaskDefinition", "the revision it will create",
		keys(docRequestTag, condTagKeys, condPrivileged), nil,
		func(b *authBuild, r *shapes.RegisterDaemonTaskDefinitionRequest) error {
			if err := fleet.CheckName("family", r.Family); err != nil {
				return err
			}
			arn, err := b.nextRevision("daemon-task-definition", store.DaemonTaskDefinitionFamilyKey(r.Family), r.Family)
			if err != nil {
				return err
			}
			b.resource(arn, nil)
			b.requestTags(r.Tags)
			flags := make([]*bool, len(r.ContainerDefinitions))
			for i := range r.ContainerDefinitions {
				flags[i] = r.ContainerDefinitions[i].Privileged
			}
			b.set(condPrivileged, privileged(flags...))
			b.tagOnCreate(arn, r.Tags, "")
			return nil
		}).withTagging(),
	"DescribeDaemonTaskDefinition": authOp("ecs:DescribeDaemonTaskDefinition", resDaemonTDRev+"; a family means its latest ACTIVE one",
		keys(docResourceTag), nil,
		func(b *authBuild, r *shapes.DescribeDaemonTaskDefinitionRequest) error {
			arn, td, err := b.daemonTaskDefinitionArn("daemonTaskDefinition", r.DaemonTaskDefinition)
			if err != nil {
				return err
			}
			var tags []shapes.Tag
			if td != nil {
				tags = td.Tags
			}
			b.resource(arn, resourceTags(nil, tags))
			return nil
		}),
	"ListDaemonTaskDefinitions": authOp("ecs:ListDaemonTaskDefinitions", resAll, nil, nil,
		func(*authBuild, *shapes.ListDaemonTaskDefinitionsRequest) error { return nil }),
	"DeleteDaemonTaskDefinition": authOp("ecs:DeleteDaemonTaskDefinition", resDaemonTDRev, keys(docResourceTag), nil,
		func(b *authBuild, r *shapes.DeleteDaemonTaskDefinitionRequest) error {
			family, rev, err := b.s.ARNs.FamilyRevision("daemonTaskDefinition", "daemon-task-definition", r.DaemonTaskDefinition)
			if err != nil {
				return err
			}
			if rev == 0 {
				b.resource(b.anyRevision("daemon-task-definition", family), nil)
				return nil
			}
			td, _, err := readAuth[store.DaemonTaskDefinition](b.ctx, b.s, store.DaemonTaskDefinitionKey(family, rev))
			if err != nil {
				return err
			}
			b.resource(b.s.ARNs.DaemonTaskDefinition(family, rev), resourceTags(nil, td.Tags))
			return nil
		}),

	// Daemons: every one carries ecs:cluster, and ecs:capacity-provider
	// where the call names capacity providers or reads one daemon.
	"CreateDaemon": authOp("ecs:CreateDaemon", resDaemon,
		keys(docRequestTag, condTagKeys, condCluster, condCapacityProvider, condDaemonTaskDefinition), nil,
		func(b *authBuild, r *shapes.CreateDaemonRequest) error {
			if err := fleet.CheckName("daemonName", r.DaemonName); err != nil {
				return err
			}
			cluster, clusterArn, err := b.clusterArn("clusterArn", r.ClusterArn)
			if err != nil {
				return err
			}
			arn := b.s.ARNs.Daemon(cluster, r.DaemonName)
			b.resource(arn, map[string][]string{condCluster: {clusterArn}})
			cps, err := b.capacityProviderArns("capacityProviderArns", r.CapacityProviderArns)
			if err != nil {
				return err
			}
			b.set(condCapacityProvider, cps...)
			if r.DaemonTaskDefinitionArn != "" {
				td, _, err := b.daemonTaskDefinitionArn("daemonTaskDefinitionArn", r.DaemonTaskDefinitionArn)
				if err != nil {
					return err
				}
				b.set(condDaemonTaskDefinition, td)
			}
			b.requestTags(r.Tags)
			b.tagOnCreate(arn, r.Tags, clusterArn)
			return nil
		}).withTagging(),
	"UpdateDaemon": authOp("ecs:UpdateDaemon", resDaemon,
		keys(docResourceTag, condCluster, condCapacityProvider, condDaemonTaskDefinition), keys(condDaemon),
		func(b *authBuild, r *shapes.UpdateDaemonRequest) error { return b.daemonUpdate(r) }),
	"DeleteDaemon": authOp("ecs:DeleteDaemon", resDaemon, keys(docResourceTag, condCluster), keys(condCapacityProvider, condDaemon),
		func(b *authBuild, r *shapes.DeleteDaemonRequest) error { return b.oneDaemon(r.DaemonArn) }),
	"DescribeDaemon": authOp("ecs:DescribeDaemon", resDaemon, keys(docResourceTag, condCluster), keys(condCapacityProvider, condDaemon),
		func(b *authBuild, r *shapes.DescribeDaemonRequest) error { return b.oneDaemon(r.DaemonArn) }),
	"ListDaemons": authOp("ecs:ListDaemons", resAll, keys(condCluster), keys(condCapacityProvider),
		func(b *authBuild, r *shapes.ListDaemonsRequest) error {
			if r.ClusterArn != "" {
				_, arn, err := b.clusterArn("clusterArn", r.ClusterArn)
				if err != nil {
					return err
				}
				b.set(condCluster, arn)
			}
			cps, err := b.capacityProviderArns("capacityProviderArns", r.CapacityProviderArns)
			if err != nil {
				return err
			}
			b.set(condCapacityProvider, cps...)
			return nil
		}),
	"DescribeDaemonRevisions": authOp("ecs:DescribeDaemonRevisions", "each daemon revision named and its daemon",
		keys(docResourceTag, condCluster, condDaemon), nil,
		func(b *authBuild, r *shapes.DescribeDaemonRevisionsRequest) error {
			return b.daemonChildren("daemonRevisionArns", "daemon-revision", r.DaemonRevisionArns)
		}),
	"ListDaemonDeployments": authOp("ecs:ListDaemonDeployments", resDaemon, keys(docResourceTag, condCluster), keys(condCapacityProvider, condDaemon),
		func(b *authBuild, r *shapes.ListDaemonDeploymentsRequest) error { return b.oneDaemon(r.DaemonArn) }),
	"DescribeDaemonDeployments": authOp("ecs:DescribeDaemonDeployments", "each daemon deployment named and its daemon",
		keys(docResourceTag, condCluster, condDaemon), nil,
		func(b *authBuild, r *shapes.DescribeDaemonDeploymentsRequest) error {
			return b.daemonChildren("daemonDeploymentArns", "daemon-deployment", r.DaemonDeploymentArns)
		}),

	// Tags.
	"TagResource": authOp("ecs:TagResource", "the resource named",
		keys(docRequestTag, condTagKeys, docResourceTag, condCluster), nil,
		func(b *authBuild, r *shapes.TagResourceRequest) error {
			b.requestTags(r.Tags)
			return b.taggable(r.ResourceArn)
		}),
	"UntagResource": authOp("ecs:UntagResource", "the resource named", keys(condTagKeys, docResourceTag, condCluster), nil,
		func(b *authBuild, r *shapes.UntagResourceRequest) error {
			b.set(condTagKeys, r.TagKeys...)
			return b.taggable(r.ResourceArn)
		}),
	"ListTagsForResource": authOp("ecs:ListTagsForResource", "the resource named", keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.ListTagsForResourceRequest) error { return b.taggable(r.ResourceArn) }),

	// Container instances (agents call the first and the last).
	"RegisterContainerInstance": authOp("ecs:RegisterContainerInstance", resCluster,
		keys(docRequestTag, condTagKeys, docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.RegisterContainerInstanceRequest) error {
			cluster, clusterArn, err := b.cluster("cluster", r.Cluster)
			if err != nil {
				return err
			}
			b.requestTags(r.Tags)
			instance := r.ContainerInstanceArn
			if instance == "" {
				instance = b.s.ARNs.ContainerInstance(cluster, "*")
			}
			b.tagOnCreate(instance, r.Tags, clusterArn)
			return nil
		}).withTagging(),
	"DeregisterContainerInstance": authOp("ecs:DeregisterContainerInstance", resCluster,
		keys(docResourceTag), keys(condCluster, condContainerInstances),
		func(b *authBuild, r *shapes.DeregisterContainerInstanceRequest) error {
			cluster, _, err := b.cluster("cluster", r.Cluster)
			if err != nil {
				return err
			}
			if r.ContainerInstance != "" {
				id, err := b.s.InstanceID("containerInstance", cluster, r.ContainerInstance)
				if err != nil {
					return err
				}
				b.set(condContainerInstances, b.s.ARNs.ContainerInstance(cluster, id))
			}
			return nil
		}),
	"DescribeContainerInstances": authOp("ecs:DescribeContainerInstances", "each container instance named", keys(condCluster), nil,
		func(b *authBuild, r *shapes.DescribeContainerInstancesRequest) error {
			_, err := b.inCluster("containerInstances", r.Cluster, r.ContainerInstances, b.s.InstanceID, b.s.ARNs.ContainerInstance)
			return err
		}),
	"ListContainerInstances": authOp("ecs:ListContainerInstances", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.ListContainerInstancesRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	"UpdateContainerInstancesState": authOp("ecs:UpdateContainerInstancesState", "each container instance named", keys(condCluster), nil,
		func(b *authBuild, r *shapes.UpdateContainerInstancesStateRequest) error {
			_, err := b.inCluster("containerInstances", r.Cluster, r.ContainerInstances, b.s.InstanceID, b.s.ARNs.ContainerInstance)
			return err
		}),
	"DiscoverPollEndpoint": authOp("ecs:DiscoverPollEndpoint", resAll, nil, keys(condCluster),
		func(b *authBuild, r *shapes.DiscoverPollEndpointRequest) error {
			if r.Cluster == "" {
				return nil
			}
			_, arn, err := b.clusterArn("cluster", r.Cluster)
			if err != nil {
				return err
			}
			b.set(condCluster, arn)
			return nil
		}),

	// Tasks.
	"RunTask": authOp("ecs:RunTask", resTaskDefRev+"; a family means its latest ACTIVE one",
		keys(docRequestTag, condTagKeys, docResourceTag, condCluster, condCapacityProvider), keys(condHostAccess, condHostAccessKinds),
		func(b *authBuild, r *shapes.RunTaskRequest) error {
			cluster, clusterArn, err := b.clusterArn("cluster", r.Cluster)
			if err != nil {
				return err
			}
			b.set(condCluster, clusterArn)
			if err := b.useTaskDefinition("taskDefinition", r.TaskDefinition, clusterArn, true); err != nil {
				return err
			}
			cps, err := b.strategyArns("capacityProviderStrategy", r.CapacityProviderStrategy)
			if err != nil {
				return err
			}
			b.set(condCapacityProvider, cps...)
			b.requestTags(r.Tags)
			b.tagOnCreate(b.s.ARNs.Task(cluster, "*"), r.Tags, clusterArn)
			return nil
		}).withHostAccess().withTagging(),
	"StartTask": authOp("ecs:StartTask", resTaskDefRev+"; a family means its latest ACTIVE one",
		keys(docRequestTag, condTagKeys, docResourceTag, condCluster, condContainerInstances), keys(condHostAccess, condHostAccessKinds),
		func(b *authBuild, r *shapes.StartTaskRequest) error {
			cluster, clusterArn, err := b.clusterArn("cluster", r.Cluster)
			if err != nil {
				return err
			}
			b.set(condCluster, clusterArn)
			for i, ref := range r.ContainerInstances {
				id, err := b.s.InstanceID(fieldIndex("containerInstances", i), cluster, ref)
				if err != nil {
					return err
				}
				b.set(condContainerInstances, b.s.ARNs.ContainerInstance(cluster, id))
			}
			if err := b.useTaskDefinition("taskDefinition", r.TaskDefinition, clusterArn, true); err != nil {
				return err
			}
			b.requestTags(r.Tags)
			b.tagOnCreate(b.s.ARNs.Task(cluster, "*"), r.Tags, clusterArn)
			return nil
		}).withHostAccess().withTagging(),
	"StopTask": authOp("ecs:StopTask", "task", keys(condCluster), nil,
		func(b *authBuild, r *shapes.StopTaskRequest) error {
			_, err := b.inCluster("task", r.Cluster, []string{r.Task}, b.s.TaskID, b.s.ARNs.Task)
			return err
		}),
	"DescribeTasks": authOp("ecs:DescribeTasks", "each task named", keys(condCluster), nil,
		func(b *authBuild, r *shapes.DescribeTasksRequest) error {
			_, err := b.inCluster("tasks", r.Cluster, r.Tasks, b.s.TaskID, b.s.ARNs.Task)
			return err
		}),
	"ListTasks": authOp("ecs:ListTasks", "the container instance named; `*` when none", keys(condCluster), keys(condService),
		func(b *authBuild, r *shapes.ListTasksRequest) error {
			var refs []string
			if r.ContainerInstance != "" {
				refs = []string{r.ContainerInstance}
			}
			if _, err := b.inCluster("containerInstance", r.Cluster, refs, b.s.InstanceID, b.s.ARNs.ContainerInstance); err != nil {
				return err
			}
			if r.ServiceName != "" {
				arnCluster, name, err := b.s.ARNs.ServiceRef("serviceName", r.ServiceName)
				if err != nil {
					return err
				}
				cluster, _, err := b.clusterArn("cluster", r.Cluster)
				if err != nil {
					return err
				}
				if arnCluster != "" {
					cluster = arnCluster
				}
				b.set(condService, b.s.ARNs.Service(cluster, name))
			}
			return nil
		}),

	// Services.
	"CreateService": authOp("ecs:CreateService", resService,
		keys(docRequestTag, condTagKeys, condCluster, condCapacityProvider, condTaskDefinition), keys(condHostAccess, condHostAccessKinds),
		func(b *authBuild, r *shapes.CreateServiceRequest) error {
			if err := fleet.CheckName("serviceName", r.ServiceName); err != nil {
				return err
			}
			cluster, clusterArn, err := b.clusterArn("cluster", r.Cluster)
			if err != nil {
				return err
			}
			arn := b.s.ARNs.Service(cluster, r.ServiceName)
			b.resource(arn, map[string][]string{condCluster: {clusterArn}})
			if err := b.useTaskDefinition("taskDefinition", r.TaskDefinition, clusterArn, false); err != nil {
				return err
			}
			cps, err := b.strategyArns("capacityProviderStrategy", r.CapacityProviderStrategy)
			if err != nil {
				return err
			}
			b.set(condCapacityProvider, cps...)
			b.requestTags(r.Tags)
			b.tagOnCreate(arn, r.Tags, clusterArn)
			return nil
		}).withHostAccess().withTagging(),
	"UpdateService": authOp("ecs:UpdateService", resService,
		keys(docResourceTag, condCluster, condCapacityProvider, condTaskDefinition), keys(condHostAccess, condHostAccessKinds),
		func(b *authBuild, r *shapes.UpdateServiceRequest) error {
			svc, clusterArn, err := b.service(r.Cluster, "service", r.Service)
			if err != nil {
				return err
			}
			// Without a new task definition the service's tasks go on
			// using its current one, host access and all.
			ref := r.TaskDefinition
			if ref == "" {
				ref = svc.TaskDefinition
			}
			if err := b.useTaskDefinition("taskDefinition", ref, clusterArn, false); err != nil {
				return err
			}
			cps, err := b.strategyArns("capacityProviderStrategy", r.CapacityProviderStrategy)
			if err != nil {
				return err
			}
			b.set(condCapacityProvider, cps...)
			return nil
		}).withHostAccess(),
	"DeleteService": authOp("ecs:DeleteService", resService, keys(docResourceTag, condCluster), nil,
		func(b *authBuild, r *shapes.DeleteServiceRequest) error {
			_, _, err := b.service(r.Cluster, "service", r.Service)
			return err
		}),
	"DescribeServices": authOp("ecs:DescribeServices", "each service named", keys(docResourceTag, condCluster), nil,
		func(b *authBuild, r *shapes.DescribeServicesRequest) error {
			// As the operation does: without cluster, the first ARN's.
			clusterRef := r.Cluster
			for _, ref := range r.Services {
				if c, _, err := b.s.ARNs.ServiceRef("services", ref); err == nil && clusterRef == "" && c != "" {
					clusterRef = c
				}
			}
			for i, ref := range r.Services {
				if _, _, err := b.service(clusterRef, fieldIndex("services", i), ref); err != nil {
					return err
				}
			}
			return nil
		}),
	"ListServices": authOp("ecs:ListServices", resAll, keys(condCluster), nil,
		func(b *authBuild, r *shapes.ListServicesRequest) error {
			_, arn, err := b.clusterArn("cluster", r.Cluster)
			if err != nil {
				return err
			}
			b.set(condCluster, arn)
			return nil
		}),

	// CapstanV1 extensions.
	"CreateAgentCredential": authOp("capstan:CreateAgentCredential", resCluster,
		keys(docResourceTag, condCluster, condCapacityProvider), nil,
		func(b *authBuild, r *CreateAgentCredentialRequest) error {
			if _, _, err := b.cluster("cluster", r.Cluster); err != nil {
				return err
			}
			if r.CapacityProvider != "" {
				cps, err := b.capacityProviderArns("capacityProvider", []string{r.CapacityProvider})
				if err != nil {
					return err
				}
				b.set(condCapacityProvider, cps...)
			}
			return nil
		}),
	"DescribeDaemonRollout": authOp("ecs:DescribeDaemonDeployments", "the daemon and the deployment (its latest when none is named)",
		keys(docResourceTag, condCluster, condDaemon), keys(condCapacityProvider),
		func(b *authBuild, r *DescribeDaemonRolloutRequest) error {
			d, found, err := b.daemonWithProviders(r.DaemonArn)
			if err != nil {
				return err
			}
			dep := r.DaemonDeploymentArn
			if dep == "" && found {
				dep = d.DeploymentArn
			}
			if dep != "" {
				return b.daemonChildren("daemonDeploymentArn", "daemon-deployment", []string{dep})
			}
			return nil
		}),
	"PreviewDaemonUpdate": authOp("ecs:DescribeDaemon", resDaemon,
		keys(docResourceTag, condCluster), keys(condCapacityProvider, condDaemonTaskDefinition, condDaemon),
		func(b *authBuild, r *shapes.UpdateDaemonRequest) error { return b.daemonUpdate(r) }),
	"DescribeDaemonConfiguration": authOp("ecs:DescribeDaemonRevisions", "the daemon and the revision it runs",
		keys(docResourceTag, condCluster, condDaemon), keys(condCapacityProvider),
		func(b *authBuild, r *DescribeDaemonConfigurationRequest) error {
			d, found, err := b.daemonWithProviders(r.DaemonArn)
			if err != nil || !found {
				return err
			}
			rev, err := b.s.revisionInEffect(b.ctx, d)
			if err != nil || rev.DaemonRevisionArn == "" {
				return nil // the operation reports it
			}
			return b.daemonChildren("daemonArn", "daemon-revision", []string{rev.DaemonRevisionArn})
		}),
	"UpdateDaemonIfUnchanged": authOp("ecs:UpdateDaemon", resDaemon,
		keys(docResourceTag, condCluster, condCapacityProvider, condDaemonTaskDefinition), keys(condDaemon),
		func(b *authBuild, r *UpdateDaemonIfUnchangedRequest) error {
			return b.daemonUpdate(&r.UpdateDaemonRequest)
		}),
	"RollbackDaemon": authOp("ecs:UpdateDaemon", resDaemon,
		keys(docResourceTag, condCluster, condCapacityProvider, condDaemonTaskDefinition), keys(condDaemon),
		func(b *authBuild, r *RollbackDaemonRequest) error {
			d, found, err := b.daemon("daemonArn", r.DaemonArn)
			if err != nil || !found {
				return err
			}
			// What is deployed is the target revision's settings; an
			// unusable target is for the operation to report.
			target, err := b.s.rollbackTarget(b.ctx, d, r.ToRevisionArn)
			if err != nil {
				return nil
			}
			b.set(condCapacityProvider, target.CapacityProviderArns...)
			if target.DaemonTaskDefinitionArn != "" {
				b.set(condDaemonTaskDefinition, target.DaemonTaskDefinitionArn)
			}
			return nil
		}),
	// No ECS action stops a daemon deployment; Capstan's name for it is
	// ecs:StopDaemonDeployment, so that a policy on ecs:*Daemon* covers it.
	"StopDaemonDeployment": authOp("ecs:StopDaemonDeployment", "the daemon and the deployment (its latest when none is named)",
		keys(docResourceTag, condCluster, condDaemon), keys(condCapacityProvider),
		func(b *authBuild, r *StopDaemonDeploymentRequest) error {
			d, found, err := b.daemonWithProviders(r.DaemonArn)
			if err != nil {
				return err
			}
			dep := r.DaemonDeploymentArn
			if dep == "" && found {
				dep = d.DeploymentArn
			}
			if dep != "" {
				return b.daemonChildren("daemonDeploymentArn", "daemon-deployment", []string{dep})
			}
			return nil
		}),
	"ListEvents": authOp("capstan:ListEvents", resCluster, keys(docResourceTag, condCluster), nil,
		func(b *authBuild, r *ListEventsRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	// Logs are read like the task they belong to, but by their own action:
	// output may hold what DescribeTasks does not show.
	"GetTaskLogs": authOp("capstan:GetTaskLogs", "task", keys(condCluster), nil,
		func(b *authBuild, r *GetTaskLogsRequest) error {
			cluster, clusterArn, err := b.clusterArn("cluster", r.Cluster)
			if err != nil {
				return err
			}
			b.set(condCluster, clusterArn)
			id, err := b.s.TaskID("task", cluster, r.Task)
			if err != nil {
				return err
			}
			b.resource(b.s.ARNs.Task(cluster, id), nil)
			return nil
		}),
	// The audit trail is the account's: there is no narrower resource.
	"ListAuditEvents": {action: "capstan:ListAuditEvents", resources: resAll,
		build: func(*authBuild, any) error { return nil }},

	// Attributes: the reference checks Put and Delete against the
	// container instances, List against the cluster.
	"PutAttributes": authOp("ecs:PutAttributes", resInstances, nil, keys(condCluster),
		func(b *authBuild, r *shapes.PutAttributesRequest) error {
			return b.attributeTargets(r.Cluster, r.Attributes)
		}),
	"DeleteAttributes": authOp("ecs:DeleteAttributes", resInstances, nil, keys(condCluster),
		func(b *authBuild, r *shapes.DeleteAttributesRequest) error {
			return b.attributeTargets(r.Cluster, r.Attributes)
		}),
	"ListAttributes": authOp("ecs:ListAttributes", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.ListAttributesRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),

	// Account settings: the reference lists no resource type.
	"PutAccountSetting": authOp("ecs:PutAccountSetting", resAll, nil, nil,
		func(*authBuild, *shapes.PutAccountSettingRequest) error { return nil }),
	"PutAccountSettingDefault": authOp("ecs:PutAccountSettingDefault", resAll, nil, nil,
		func(*authBuild, *shapes.PutAccountSettingDefaultRequest) error { return nil }),
	"DeleteAccountSetting": authOp("ecs:DeleteAccountSetting", resAll, nil, nil,
		func(*authBuild, *shapes.DeleteAccountSettingRequest) error { return nil }),
	"ListAccountSettings": authOp("ecs:ListAccountSettings", resAll, nil, nil,
		func(*authBuild, *shapes.ListAccountSettingsRequest) error { return nil }),

	// Cluster updates.
	"UpdateCluster": authOp("ecs:UpdateCluster", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.UpdateClusterRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	"UpdateClusterSettings": authOp("ecs:UpdateClusterSettings", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.UpdateClusterSettingsRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),

	// Task protection, checked against each task named.
	"GetTaskProtection": authOp("ecs:GetTaskProtection", "each task named", keys(condCluster), nil,
		func(b *authBuild, r *shapes.GetTaskProtectionRequest) error {
			_, err := b.inCluster("tasks", r.Cluster, r.Tasks, b.s.TaskID, b.s.ARNs.Task)
			return err
		}),
	"UpdateTaskProtection": authOp("ecs:UpdateTaskProtection", "each task named", keys(condCluster), nil,
		func(b *authBuild, r *shapes.UpdateTaskProtectionRequest) error {
			_, err := b.inCluster("tasks", r.Cluster, r.Tasks, b.s.TaskID, b.s.ARNs.Task)
			return err
		}),

	// Service deployments and revisions: List is checked against the
	// service, the others against the deployments or revisions named.
	"ListServiceDeployments": authOp("ecs:ListServiceDeployments", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.ListServiceDeploymentsRequest) error {
			_, _, err := b.service(r.Cluster, "service", r.Service)
			return err
		}),
	"DescribeServiceDeployments": authOp("ecs:DescribeServiceDeployments", "each service deployment named", nil, keys(condCluster),
		func(b *authBuild, r *shapes.DescribeServiceDeploymentsRequest) error {
			return b.deploymentArns("serviceDeploymentArns", "service-deployment", r.ServiceDeploymentArns)
		}),
	"DescribeServiceRevisions": authOp("ecs:DescribeServiceRevisions", "each service revision named", nil, keys(condCluster),
		func(b *authBuild, r *shapes.DescribeServiceRevisionsRequest) error {
			return b.deploymentArns("serviceRevisionArns", "service-revision", r.ServiceRevisionArns)
		}),
	"StopServiceDeployment": authOp("ecs:StopServiceDeployment", "service deployment", nil, keys(condCluster),
		func(b *authBuild, r *shapes.StopServiceDeploymentRequest) error {
			return b.deploymentArns("serviceDeploymentArn", "service-deployment", []string{r.ServiceDeploymentArn})
		}),

	// Operations answered as ECS does without the feature (unavailable.go),
	// still authorized as ECS authorizes them.
	"CreateTaskSet": authOp("ecs:CreateTaskSet", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.CreateTaskSetRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"DeleteTaskSet": authOp("ecs:DeleteTaskSet", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.DeleteTaskSetRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"DescribeTaskSets": authOp("ecs:DescribeTaskSets", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.DescribeTaskSetsRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"UpdateTaskSet": authOp("ecs:UpdateTaskSet", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.UpdateTaskSetRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"UpdateServicePrimaryTaskSet": authOp("ecs:UpdateServicePrimaryTaskSet", resService, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.UpdateServicePrimaryTaskSetRequest) error {
			return b.taskSetService(r.Cluster, r.Service)
		}),
	"ContinueServiceDeployment": authOp("ecs:ContinueServiceDeployment", "service deployment", nil, keys(condCluster),
		func(b *authBuild, r *shapes.ContinueServiceDeploymentRequest) error {
			return b.deploymentArns("serviceDeploymentArn", "service-deployment", []string{r.ServiceDeploymentArn})
		}),
	"ExecuteCommand": authOp("ecs:ExecuteCommand", "task", keys(condCluster, condContainerName), nil,
		func(b *authBuild, r *shapes.ExecuteCommandRequest) error {
			arns, err := b.inCluster("task", r.Cluster, []string{r.Task}, b.s.TaskID, b.s.ARNs.Task)
			if err != nil {
				return err
			}
			return b.execContainer(arns[0], r.Container)
		}),
	"ListServicesByNamespace": authOp("ecs:ListServicesByNamespace", resAll, nil, nil,
		func(*authBuild, *shapes.ListServicesByNamespaceRequest) error { return nil }),
	"SubmitTaskStateChange": authOp("ecs:SubmitTaskStateChange", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.SubmitTaskStateChangeRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	"SubmitContainerStateChange": authOp("ecs:SubmitContainerStateChange", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.SubmitContainerStateChangeRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	"SubmitAttachmentStateChanges": authOp("ecs:SubmitAttachmentStateChanges", resCluster, keys(docResourceTag), keys(condCluster),
		func(b *authBuild, r *shapes.SubmitAttachmentStateChangesRequest) error {
			_, _, err := b.cluster("cluster", r.Cluster)
			return err
		}),
	"UpdateContainerAgent": authOp("ecs:UpdateContainerAgent", "container instance", keys(condCluster), nil,
		func(b *authBuild, r *shapes.UpdateContainerAgentRequest) error {
			_, err := b.inCluster("containerInstance", r.Cluster, []string{r.ContainerInstance}, b.s.InstanceID, b.s.ARNs.ContainerInstance)
			return err
		}),
	"CreateExpressGatewayService": authOp("ecs:CreateExpressGatewayService", resAll, nil, nil,
		func(*authBuild, *shapes.CreateExpressGatewayServiceRequest) error { return nil }),
	"DescribeExpressGatewayService": authOp("ecs:DescribeExpressGatewayService", "the service named", nil, nil,
		func(b *authBuild, r *shapes.DescribeExpressGatewayServiceRequest) error {
			b.resource(r.ServiceArn, nil)
			return nil
		}),
	"UpdateExpressGatewayService": authOp("ecs:UpdateExpressGatewayService", "the service named", nil, nil,
		func(b *authBuild, r *shapes.UpdateExpressGatewayServiceRequest) error {
			b.resource(r.ServiceArn, nil)
			return nil
		}),
	"DeleteExpressGatewayService": authOp("ecs:DeleteExpressGatewayService", "the service named", nil, nil,
		func(b *authBuild, r *shapes.DeleteExpressGatewayServiceRequest) error {
			b.resource(r.ServiceArn, nil)
			return nil
		}),
}

// Texts of the resources column for the attribute rows.
const resInstances = "each container instance named"

// taskSetService adds the service a task set call names.
func (b *authBuild) taskSetService(cluster, service string) error {
	_, _, err := b.service(cluster, "service", service)
	return err
}

// deploymentArns adds service deployment or revision ARNs, each with its
// cluster.
func (b *authBuild) deploymentArns(field, typ string, arns []string) error {
	for i, arn := range arns {
		cluster, _, _, err := b.s.deploymentRef(fieldIndex(field, i), typ, arn)
		if err != nil {
			return err
		}
		b.resource(arn, map[string][]string{condCluster: {b.s.ARNs.Cluster(cluster)}})
	}
	return nil
}

// attributeTargets adds each attribute's target instance.
func (b *authBuild) attributeTargets(cluster string, attrs []shapes.Attribute) error {
	refs := make([]string, len(attrs))
	for i, a := range attrs {
		refs[i] = a.TargetId
	}
	_, err := b.inCluster("attributes", cluster, refs, b.s.InstanceID, b.s.ARNs.ContainerInstance)
	return err
}
