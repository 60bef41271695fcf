package main

import (
	"strings"
	"testing"
)

// --agent-env values go through the agent's own parser: what the agent
// would refuse stops the server at start, naming the variable and rule.
func TestAgentEnvChecked(t *testing.T) {
	good := map[string]string{}
	for _, kv := range []string{"ECS_IMAGE_PULL_BEHAVIOR=prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT=5s"} {
		if err := addAgentEnv(good, kv); err != nil {
			t.Fatalf("%s: %v", kv, err)
		}
	}
	if err := checkAgentEnv(good); err != nil {
		t.Fatalf("valid settings refused: %v", err)
	}
	for _, tc := range []struct{ kv, want string }{
		{"ECS_IMAGE_PULL_BEHAVIOR", "KEY=VALUE"},
		{"PATH=/x", "only ECS_*"},
		{"ECS_CLUSTER=other", "cannot be changed"},
		{"ECS_DATADIR=/tmp", "cannot be changed"},
		{"ECS_DISABLE_PRIVILEGED=false", "cannot be changed"},
	} {
		err := addAgentEnv(map[string]string{}, tc.kv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.kv, err, tc.want)
		}
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "sometimes"}, "ECS_IMAGE_PULL_BEHAVIOR"},
		{map[string]string{"ECS_CONTAINER_STOP_TIMEOUT": "soon"}, "ECS_CONTAINER_STOP_TIMEOUT"},
		{map[string]string{"ECS_NO_SUCH_SETTING": "1"}, "ECS_NO_SUCH_SETTING: the agent does not know"},
	} {
		err := checkAgentEnv(tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want one naming %q", tc.env, err, tc.want)
		}
	}
}
