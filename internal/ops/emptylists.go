package ops

import (
	"slices"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// ECS answers some list members with [] when they are empty rather than
// leaving them out, and clients index them without checking (a KeyError in
// a boto3 script). The helpers below give responses those members; records
// stay as stored. They copy what they change, so a cached record shared
// with other readers is never written to.

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// taskDefinitionView is a task definition as ECS shows it: volumes,
// placementConstraints, requiresAttributes and compatibilities always, and
// per container portMappings, environment, mountPoints, volumesFrom and
// systemControls.
func taskDefinitionView(td shapes.TaskDefinition) *shapes.TaskDefinition {
	td.Volumes = orEmpty(td.Volumes)
	td.PlacementConstraints = orEmpty(td.PlacementConstraints)
	td.RequiresAttributes = orEmpty(td.RequiresAttributes)
	td.Compatibilities = orEmpty(td.Compatibilities)
	td.ContainerDefinitions = slices.Clone(td.ContainerDefinitions)
	for i := range td.ContainerDefinitions {
		c := &td.ContainerDefinitions[i]
		c.PortMappings = orEmpty(c.PortMappings)
		c.Environment = orEmpty(c.Environment)
		c.MountPoints = orEmpty(c.MountPoints)
		c.VolumesFrom = orEmpty(c.VolumesFrom)
		c.SystemControls = orEmpty(c.SystemControls)
	}
	return &td
}

// compatibilities is what a new revision reports it can run on: what it
// requires when it says, else every launch type Capstan serves.
func compatibilities(required []string) []string {
	if len(required) == 0 {
		return []string{"EC2", "MANAGED_INSTANCES"}
	}
	out := make([]string, 0, len(required))
	for _, c := range required {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// fillTask gives a task ECS's lists; tags are [] also when the caller did
// not ask for them, as ECS answers.
func fillTask(v *shapes.Task) {
	v.Attachments = orEmpty(v.Attachments)
	v.Attributes = orEmpty(v.Attributes)
	v.Tags = orEmpty(v.Tags)
	v.Containers = slices.Clone(orEmpty(v.Containers))
	for i := range v.Containers {
		c := &v.Containers[i]
		c.NetworkBindings = orEmpty(c.NetworkBindings)
		c.NetworkInterfaces = orEmpty(c.NetworkInterfaces)
	}
	if v.Overrides == nil {
		v.Overrides = &shapes.TaskOverride{}
	} else {
		o := *v.Overrides
		v.Overrides = &o
	}
	v.Overrides.ContainerOverrides = orEmpty(v.Overrides.ContainerOverrides)
	v.Overrides.InferenceAcceleratorOverrides = orEmpty(v.Overrides.InferenceAcceleratorOverrides)
}

func fillContainerInstance(v *shapes.ContainerInstance) {
	v.Attachments = orEmpty(v.Attachments)
	v.Attributes = orEmpty(v.Attributes)
	v.RegisteredResources = orEmpty(v.RegisteredResources)
	v.RemainingResources = orEmpty(v.RemainingResources)
}

// foreignARN reports whether ref is an ECS ARN of the given resource type
// that names another region or account. ECS has no such resource here, so
// describe calls report it as MISSING, with the ARN as given, rather than
// refusing the whole call.
func (s *Service) foreignARN(ref, typ string) bool {
	t, _, ok := s.ARNs.Resource(ref)
	return ok && t == typ && !s.ARNs.InAccount(ref)
}
