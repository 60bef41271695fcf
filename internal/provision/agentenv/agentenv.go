// Package agentenv checks ECS_* agent settings the way the agent will read
// them: written to an env file and loaded by the agent's own parser, so a
// value it would refuse is refused where it is given, not on every
// instance it reaches.
package agentenv

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/provision"
)

// fileSource is where the parser says a value came from: the check's
// temporary file, which means nothing to whoever gave the setting.
var fileSource = regexp.MustCompile(` \([^()]*agent\.env line [0-9]+\)`)

// CheckName refuses a setting name that is not an ECS_* agent setting an
// operator may give.
func CheckName(name string) error {
	if !strings.HasPrefix(name, "ECS_") {
		return fmt.Errorf("%s: only ECS_* agent settings can be given (docs/agent.md)", name)
	}
	if slices.Contains(provision.RequiredSettings, name) {
		return fmt.Errorf("%s: Capstan sets it for each instance itself (%s cannot be changed)", name, strings.Join(provision.RequiredSettings, ", "))
	}
	return nil
}

// Check runs the settings through the agent's parser; the error names the
// setting and the rule it breaks.
func Check(settings map[string]string) error {
	if len(settings) == 0 {
		return nil
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if err := CheckName(k); err != nil {
			return err
		}
		v := settings[k]
		if strings.ContainsAny(v, "\n\r") {
			return fmt.Errorf("%s: the value must be one line", k)
		}
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	dir, err := os.MkdirTemp("", "capstan-agent-env")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "agent.env")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		return err
	}
	// What Capstan sets itself, so that only the given settings are judged.
	given := map[string]string{"CAPSTAN_ENDPOINT": "http://127.0.0.1:1", "ECS_CLUSTER": "check", "ECS_DATADIR": dir,
		"AWS_ACCESS_KEY_ID": "CHECK", "AWS_SECRET_ACCESS_KEY": "check"}
	cfg, err := config.Load([]string{"--config", file}, func(k string) string { return given[k] }, "")
	if err != nil {
		// The parser's report names the file; the settings are what was given.
		msg := strings.TrimPrefix(err.Error(), "invalid agent configuration:\n")
		return errors.New(strings.ReplaceAll(fileSource.ReplaceAllString(msg, ""), "\n", "; "))
	}
	if len(cfg.Ignored) > 0 {
		return fmt.Errorf("%s: the agent does not know this setting", strings.Join(cfg.Ignored, ", "))
	}
	return nil
}
