package fleet

import (
	"slices"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/taskdef"
)

// awsvpc tasks: each runs in a namespace of its own with an address on its
// instance's task network (see internal/agent/daemonnet). There is no VPC:
// the subnets and security groups of a networkConfiguration are kept as
// given (the first subnet shows in the task's attachment) and not applied.

// CheckNetworkConfiguration applies ECS's rules to a networkConfiguration
// given for a definition in mode: only awsvpc takes one, and API calls
// (required) must give one for awsvpc.
func CheckNetworkConfiguration(mode string, nc *shapes.NetworkConfiguration, required bool) error {
	switch {
	case nc != nil && mode != "awsvpc":
		return &fault.Error{Kind: fault.InvalidParameter, Message: "Network Configuration is not valid for the given networkMode of this task definition."}
	case nc == nil && mode == "awsvpc" && required:
		return &fault.Error{Kind: fault.InvalidParameter, Message: "Network Configuration must be provided when networkMode 'awsvpc' is specified."}
	case nc != nil && nc.AwsvpcConfiguration == nil:
		return fault.Invalid("networkConfiguration.awsvpcConfiguration", "is required")
	case nc != nil && len(nc.AwsvpcConfiguration.Subnets) == 0:
		return fault.Invalid("networkConfiguration.awsvpcConfiguration.subnets", "must name at least one subnet")
	}
	return nil
}

// taskAttachments is what a new task shows of its network: for awsvpc, its
// attachment before the agent has an address for it.
func taskAttachments(taskArn, mode string, nc *shapes.NetworkConfiguration) []shapes.Attachment {
	if mode != "awsvpc" {
		return nil
	}
	a := protocol.Attachment(taskArn, protocol.AttachmentPrecreated, "", "")
	if nc != nil && nc.AwsvpcConfiguration != nil && len(nc.AwsvpcConfiguration.Subnets) > 0 {
		a.Details = append([]shapes.KeyValuePair{{Name: protocol.DetailSubnetID, Value: nc.AwsvpcConfiguration.Subnets[0]}}, a.Details...)
	}
	return []shapes.Attachment{a}
}

// mergeAttachments takes the agent's view of the task's attachments, keeping
// the subnet the server recorded; it reports whether anything changed.
func mergeAttachments(dst *[]shapes.Attachment, src []shapes.Attachment) bool {
	changed := false
	for _, a := range src {
		i := slices.IndexFunc(*dst, func(x shapes.Attachment) bool { return x.Id == a.Id })
		if i < 0 {
			*dst = append(*dst, a)
			changed = true
			continue
		}
		cur := &(*dst)[i]
		if sub := protocol.Detail(*cur, protocol.DetailSubnetID); sub != "" && protocol.Detail(a, protocol.DetailSubnetID) == "" {
			a.Details = append([]shapes.KeyValuePair{{Name: protocol.DetailSubnetID, Value: sub}}, a.Details...)
		}
		if cur.Status != a.Status || cur.Type != a.Type || !slices.Equal(cur.Details, a.Details) {
			*cur, changed = a, true
		}
	}
	return changed
}

// fargateOnly reports a definition that asks for FARGATE and no launch type
// of registered instances: it runs on managed-instances capacity only.
func fargateOnly(def shapes.TaskDefinition) bool {
	return taskdef.RequiresFargate(def.RequiresCompatibilities) &&
		!slices.Contains(def.RequiresCompatibilities, "EC2") && !slices.Contains(def.RequiresCompatibilities, "EXTERNAL")
}

// deletedAttachments is attachments as a task stopped without its agent
// shows them: gone with the task.
func deletedAttachments(as []shapes.Attachment) []shapes.Attachment {
	if as == nil {
		return nil
	}
	out := slices.Clone(as)
	for i := range out {
		out[i].Status = protocol.AttachmentDeleted
	}
	return out
}
