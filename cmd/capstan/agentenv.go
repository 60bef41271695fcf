package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/agent/config"
)

// serverSetAgentVars are the agent settings the server gives each
// provisioned agent itself; an operator's value would break the instance.
var serverSetAgentVars = []string{"ECS_CLUSTER", "ECS_DATADIR"}

// addAgentEnv parses one --agent-env KEY=VALUE into env.
func addAgentEnv(env map[string]string, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", kv)
	}
	if !strings.HasPrefix(k, "ECS_") {
		return fmt.Errorf("%s: only ECS_* agent settings can be given (docs/agent.md)", k)
	}
	if slices.Contains(serverSetAgentVars, k) {
		return fmt.Errorf("%s: set by the server for each instance", k)
	}
	env[k] = v
	return nil
}

// checkAgentEnv runs the settings through the agent's own parser, as an
// env file, so a value the agent would refuse (or a name it does not know)
// stops the server at start instead of every instance it provisions.
func checkAgentEnv(env map[string]string) error {
	if len(env) == 0 {
		return nil
	}
	dir, err := os.MkdirTemp("", "capstan-agent-env")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var b strings.Builder
	for k, v := range env {
		if strings.ContainsAny(v, "\n\r") {
			return fmt.Errorf("--agent-env %s: the value must be one line", k)
		}
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	file := filepath.Join(dir, "agent.env")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		return err
	}
	// What the server sets itself, so that only the operator's part is judged.
	given := map[string]string{"CAPSTAN_ENDPOINT": "http://127.0.0.1:1", "ECS_CLUSTER": "check", "ECS_DATADIR": dir,
		"AWS_ACCESS_KEY_ID": "CHECK", "AWS_SECRET_ACCESS_KEY": "check"}
	cfg, err := config.Load([]string{"--config", file}, func(k string) string { return given[k] }, "")
	if err != nil {
		return fmt.Errorf("--agent-env: %w", err)
	}
	if len(cfg.Ignored) > 0 {
		return fmt.Errorf("--agent-env: the agent does not know %s", strings.Join(cfg.Ignored, ", "))
	}
	return nil
}
