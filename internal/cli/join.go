package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
)

// instanceJoin mints credentials for machines that join a capacity
// provider and prints, per machine, the one line that starts its agent.
func instanceJoin(fs *flag.FlagSet) action {
	cluster := fs.String("cluster", "", "`cluster` the machines join (required)")
	cp := fs.String("capacity-provider", "", "capacity `provider` whose daemons the machines run (required)")
	count := fs.Int("count", 1, "how many machines: one line, and one credential, for each (at most 100)")
	desc := fs.String("description", "", "a note kept with the credentials")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		if *cluster == "" {
			return usageErrorf("--cluster is required")
		}
		if *cp == "" {
			return usageErrorf("--capacity-provider is required")
		}
		if _, err := s.client(ctx); err != nil {
			return err
		}
		in := map[string]any{"cluster": *cluster, "capacityProvider": *cp, "count": *count}
		if *desc != "" {
			in["description"] = *desc
		}
		var out struct {
			Cluster          string `json:"cluster"`
			CapacityProvider string `json:"capacityProvider"`
			Credentials      []struct {
				AccessKeyID     string `json:"accessKeyId"`
				SecretAccessKey string `json:"secretAccessKey"`
			} `json:"credentials"`
		}
		if err := s.callExtension(ctx, "CreateAgentCredential", in, &out); err != nil {
			return err
		}
		if s.json() {
			b, _ := json.MarshalIndent(out, "", "  ")
			fmt.Fprintln(s.stdout, string(b))
			return nil
		}
		for _, c := range out.Credentials {
			env := []string{"CAPSTAN_ENDPOINT=" + shellWord(s.conn.endpoints), "ECS_CLUSTER=" + shellWord(out.Cluster)}
			if s.conn.caBundle != "" {
				// A path on this machine: copy the file to the same path there.
				env = append(env, "CAPSTAN_CA_BUNDLE="+shellWord(s.conn.caBundle))
			}
			env = append(env, "AWS_ACCESS_KEY_ID="+shellWord(c.AccessKeyID), "AWS_SECRET_ACCESS_KEY="+shellWord(c.SecretAccessKey))
			fmt.Fprintln(s.stdout, strings.Join(env, " ")+" capstan agent")
		}
		return nil
	}
}

// shellWord quotes v for a POSIX shell when it needs it.
func shellWord(v string) string {
	if v != "" && strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:+=@,") == "" {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

const joinDetails = `
Prints one line per machine (--count, default 1): the environment and the
'capstan agent' command to run there. Each line's credential registers one
instance; the machine's instance starts REGISTERING and becomes ACTIVE once
the capacity provider's critical daemons run on it. The secret is shown
once. See docs/own-machines.md.
`
