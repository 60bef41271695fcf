package ec2

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// envMarker ends the agent settings' here-document in the user data.
const envMarker = "CAPSTAN_AGENT_ENV"

// UserData is the boot script of an instance: it writes the agent's
// settings (its credential among them) to /etc/capstan/agent.env,
// installs the agent package from agentURL when the image lacks it, and
// starts the capstan-agent unit (packaging/capstan-agent.service).
func UserData(id, cluster, cp string, env map[string]string, agentURL string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# Capstan managed instance %s (cluster %s, capacity provider %s).\nset -eu\n", id, cluster, cp)
	b.WriteString("mkdir -p /etc/capstan\numask 077\n")
	fmt.Fprintf(&b, "cat > /etc/capstan/agent.env <<'%s'\n", envMarker)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		if strings.ContainsAny(k+v, "\n\r") || strings.ContainsAny(k, "= ") || k == "" {
			return "", fmt.Errorf("agent setting %q: names may not be empty or hold '=', spaces or line breaks, values no line breaks", k)
		}
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	b.WriteString(envMarker + "\n")
	if agentURL != "" {
		if strings.ContainsAny(agentURL, "'\n") {
			return "", errors.New("agent URL may not hold quotes or line breaks")
		}
		fmt.Fprintf(&b, "if ! command -v capstan-agent >/dev/null 2>&1; then\n"+
			"  curl -fsSL --retry 5 -o /tmp/capstan-agent.deb '%s'\n"+
			"  dpkg -i /tmp/capstan-agent.deb\nfi\n", agentURL)
	}
	b.WriteString("systemctl enable capstan-agent\nsystemctl restart capstan-agent\n")
	return b.String(), nil
}

// ParseUserData reads the agent settings back out of a script UserData
// wrote: what a machine's boot gives its agent.
func ParseUserData(script string) (map[string]string, error) {
	sc := bufio.NewScanner(strings.NewReader(script))
	env := map[string]string{}
	in, done := false, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.HasPrefix(line, "cat > /etc/capstan/agent.env"):
			in = true
		case in && line == envMarker:
			in, done = false, true
		case in:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return nil, fmt.Errorf("user data: bad agent setting line %q", line)
			}
			env[k] = v
		}
	}
	if !done {
		return nil, errors.New("user data: no agent settings")
	}
	return env, nil
}
