package provision

import (
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// AgentEnvTagPrefix marks a capacity provider tag that is an agent setting
// for the instances launched for it: the tag capstan:agent-env:NAME=VALUE
// is the setting NAME=VALUE. Tags are what every ECS client (CLI, SDKs,
// CloudFormation, Terraform) already sends on CreateCapacityProvider and
// TagResource, while ECS's own carrier, the launch template's user data,
// is not part of the managed-instances API (docs/operations.md).
const AgentEnvTagPrefix = "capstan:agent-env:"

// RequiredSettings are the ECS_* settings Capstan gives every instance
// itself; neither --agent-env nor a capacity provider may change them.
var RequiredSettings = []string{"ECS_CLUSTER", "ECS_DATADIR", "ECS_DISABLE_PRIVILEGED"}

// ProviderSettings are the agent settings a capacity provider's tags
// carry, by setting name.
func ProviderSettings(tags []shapes.Tag) map[string]string {
	var out map[string]string
	for _, t := range tags {
		name, ok := strings.CutPrefix(t.Key, AgentEnvTagPrefix)
		if !ok || name == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = t.Value
	}
	return out
}
