package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// Against a TLS-only server every noun, the ECS ones and IAM/STS alike,
// trusts what --ca-bundle, CAPSTAN_CA_BUNDLE, the config file or
// AWS_CA_BUNDLE names, and fails with the certificate's problem without.
func TestCABundle(t *testing.T) {
	clearAWSEnv(t)
	srv := testenv.StartServerWith(t, func(c *server.Config) { c.TLSSelfSigned = true })
	if !strings.HasPrefix(srv.URL, "https://") {
		t.Fatalf("server URL %s", srv.URL)
	}
	bundle := srv.TLS.CABundle
	h := &harness{t: t, srv: srv, env: map[string]string{
		"CAPSTAN_ENDPOINT":      srv.URL,
		"AWS_ACCESS_KEY_ID":     srv.Config.AdminKeyID,
		"AWS_SECRET_ACCESS_KEY": srv.Config.AdminSecret,
		"HOME":                  t.TempDir(),
	}}

	h.ok("cluster", "create", "secure", "--ca-bundle", bundle)
	if out := h.ok("--ca-bundle", bundle, "cluster", "list"); !hasLine(out, "secure", "ACTIVE") {
		t.Fatalf("cluster list:\n%s", out)
	}
	if out := h.ok("whoami", "--ca-bundle", bundle); !strings.Contains(out, ":root") {
		t.Fatalf("whoami (STS):\n%s", out)
	}
	h.ok("user", "create", "alice", "--ca-bundle", bundle)
	// CapstanV1 calls go through the SDK's client too; the agent's settings
	// printed carry the bundle.
	out := h.ok("agent-credential", "create", "--cluster", "secure", "--ca-bundle", bundle)
	abs, _ := filepath.Abs(bundle)
	if !strings.Contains(out, "CAPSTAN_ENDPOINT="+srv.URL+"\n") || !strings.Contains(out, "CAPSTAN_CA_BUNDLE="+abs+"\n") {
		t.Fatalf("agent-credential create:\n%s", out)
	}

	withEnv := func(k, v string) map[string]string {
		env := map[string]string{}
		for k, v := range h.env {
			env[k] = v
		}
		env[k] = v
		return env
	}
	for _, k := range []string{"AWS_CA_BUNDLE", "CAPSTAN_CA_BUNDLE"} {
		if r := h.runEnv(withEnv(k, bundle), "user", "list"); r.code != 0 || !strings.Contains(r.stdout, "alice") {
			t.Fatalf("%s: exit %d\n%s%s", k, r.code, r.stdout, r.stderr)
		}
	}
	cfgPath := filepath.Join(t.TempDir(), "config.json")
	b, _ := json.Marshal(map[string]string{"endpoint": srv.URL, "caBundle": bundle})
	os.WriteFile(cfgPath, b, 0o600)
	if r := h.runEnv(withEnv("CAPSTAN_CONFIG", cfgPath), "cluster", "list"); r.code != 0 {
		t.Fatalf("config file caBundle: exit %d\n%s", r.code, r.stderr)
	}

	// No bundle: the system's roots do not know the server.
	for _, args := range [][]string{{"cluster", "list"}, {"whoami"}, {"user", "list"}, {"agent-credential", "create", "--cluster", "secure"}} {
		r := h.run(args...)
		if r.code != 1 || !strings.Contains(r.stderr, "cannot reach "+srv.URL+": its certificate is not trusted: x509: certificate signed by unknown authority") ||
			!strings.Contains(r.stderr, "--ca-bundle") {
			t.Fatalf("%v without a bundle: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	// A bundle of another CA names itself.
	other := testenv.StartServerWith(t, func(c *server.Config) { c.TLSSelfSigned = true })
	r := h.run("cluster", "list", "--ca-bundle", other.TLS.CABundle)
	if r.code != 1 || !strings.Contains(r.stderr, "certificate signed by unknown authority; checked against the CA bundle "+other.TLS.CABundle) {
		t.Fatalf("another CA: exit %d\n%s", r.code, r.stderr)
	}
	// Bundles that cannot be one.
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	os.WriteFile(garbage, []byte("no certificates here"), 0o600)
	if r := h.run("cluster", "list", "--ca-bundle", garbage); r.code != 1 || !strings.Contains(r.stderr, "CA bundle "+garbage+" holds no PEM certificate") {
		t.Fatalf("garbage bundle: exit %d\n%s", r.code, r.stderr)
	}
	if r := h.run("cluster", "list", "--ca-bundle", "/nonexistent/ca.pem"); r.code != 1 || !strings.Contains(r.stderr, "CA bundle: open /nonexistent/ca.pem") {
		t.Fatalf("missing bundle: exit %d\n%s", r.code, r.stderr)
	}
	// Plain HTTP to the TLS port never reaches the API. The server answers
	// Go's 400 (the CLI then hints at https://), or resets the connection
	// first when the client is still writing its body.
	if r := h.runEnv(withEnv("CAPSTAN_ENDPOINT", "http://"+srv.Addr), "cluster", "create", "plain"); r.code != 1 ||
		!strings.Contains(r.stderr, "use https://") && !strings.Contains(r.stderr, "connection reset by peer") {
		t.Fatalf("plain http: exit %d\n%s", r.code, r.stderr)
	}
	if out := h.ok("cluster", "list", "--ca-bundle", bundle); strings.Contains(out, "plain") {
		t.Fatalf("a plain HTTP request created a cluster:\n%s", out)
	}
}
