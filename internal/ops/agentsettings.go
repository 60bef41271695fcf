package ops

import (
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/provision"
)

// checkAgentSettingTags refuses a capacity provider's agent-setting tags
// (capstan:agent-env:NAME) that the agent would not take, naming the tag
// and the rule, before anything is written.
func (s *Service) checkAgentSettingTags(field string, tags []shapes.Tag) error {
	for i, t := range tags {
		p := fieldIndex(field, i)
		if !strings.HasPrefix(strings.ToLower(t.Key), provision.AgentEnvTagPrefix) {
			continue
		}
		name, ok := strings.CutPrefix(t.Key, provision.AgentEnvTagPrefix)
		if !ok {
			return fault.Invalid(p+".key", "agent settings are spelled %sNAME in lower case (got %q)", provision.AgentEnvTagPrefix, t.Key)
		}
		if !strings.HasPrefix(name, "ECS_") {
			return fault.Invalid(p+".key", "%s must be followed by an ECS_* agent setting name (got %q; docs/agent.md)", provision.AgentEnvTagPrefix, t.Key)
		}
		for _, r := range provision.RequiredSettings {
			if name == r {
				return fault.Invalid(p+".key", "%s is set by Capstan for each instance and cannot be changed (nor can %s)", name, strings.Join(provision.RequiredSettings, ", "))
			}
		}
		if s.CheckAgentSettings == nil {
			continue
		}
		if err := s.CheckAgentSettings(map[string]string{name: t.Value}); err != nil {
			return fault.Invalid(p, "%s: the agent refuses it: %v", t.Key, err)
		}
	}
	return nil
}
