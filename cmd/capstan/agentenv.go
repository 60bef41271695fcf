package main

import (
	"fmt"
	"strings"

	"github.com/capstanhq/capstan/internal/provision/agentenv"
)

// addAgentEnv parses one --agent-env KEY=VALUE into env.
func addAgentEnv(env map[string]string, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", kv)
	}
	if err := agentenv.CheckName(k); err != nil {
		return err
	}
	env[k] = v
	return nil
}

// checkAgentEnv runs the settings through the agent's own parser, so a
// value the agent would refuse (or a name it does not know) stops the
// server at start instead of every instance it provisions.
func checkAgentEnv(env map[string]string) error {
	if err := agentenv.Check(env); err != nil {
		return fmt.Errorf("--agent-env: %w", err)
	}
	return nil
}
