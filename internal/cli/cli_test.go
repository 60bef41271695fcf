package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
)

// harness runs commands in-process against a real server.
type harness struct {
	t   *testing.T
	srv *testenv.Server
	env map[string]string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	srv := testenv.StartServer(t, "")
	return &harness{t: t, srv: srv, env: map[string]string{
		"CAPSTAN_ENDPOINT":      srv.URL,
		"AWS_ACCESS_KEY_ID":     srv.Config.AdminKeyID,
		"AWS_SECRET_ACCESS_KEY": srv.Config.AdminSecret,
		"HOME":                  t.TempDir(),
	}}
}

type result struct {
	code           int
	stdout, stderr string
}

func (h *harness) run(args ...string) result {
	h.t.Helper()
	return h.runEnv(h.env, args...)
}

func (h *harness) runEnv(env map[string]string, args ...string) result {
	h.t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// ok runs a command that must succeed and returns its standard output.
func (h *harness) ok(args ...string) string {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("capstan %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// okJSON runs a command with -o json and decodes its output.
func (h *harness) okJSON(args ...string) map[string]any {
	h.t.Helper()
	out := h.ok(append(args, "-o", "json")...)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		h.t.Fatalf("capstan %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
	return m
}

// fails runs a command that must exit with code and mention want on stderr.
func (h *harness) fails(code int, want string, args ...string) result {
	h.t.Helper()
	r := h.run(args...)
	if r.code != code || !strings.Contains(r.stderr, want) {
		h.t.Fatalf("capstan %s: exit %d, want %d with %q on stderr\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), r.code, code, want, r.stdout, r.stderr)
	}
	return r
}

// get walks a decoded JSON document: get(m, "cluster", "tags", 0, "key").
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not an object at %q", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no element %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

func hasLine(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		got := strings.Fields(line)
		if len(got) >= len(fields) && strings.Join(got[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

func TestCluster(t *testing.T) {
	h := newHarness(t)

	out := h.ok("cluster", "create", "prod", "--tag", "team=platform")
	if !hasLine(out, "NAME", "STATUS") || !hasLine(out, "prod", "ACTIVE", "0") {
		t.Fatalf("create table:\n%s", out)
	}
	m := h.okJSON("cluster", "create", "staging")
	if get(t, m, "cluster", "clusterArn") != "arn:aws:ecs:us-east-1:123456789012:cluster/staging" {
		t.Fatalf("create json: %v", m)
	}
	if _, ok := m["ResultMetadata"]; ok {
		t.Fatal("json output has ResultMetadata")
	}

	out = h.ok("cluster", "list")
	if !hasLine(out, "prod", "ACTIVE") || !hasLine(out, "staging", "ACTIVE") {
		t.Fatalf("list table:\n%s", out)
	}
	m = h.okJSON("cluster", "list")
	if arns := get(t, m, "clusterArns").([]any); len(arns) != 2 {
		t.Fatalf("list json: %v", m)
	}

	out = h.ok("cluster", "describe", "prod")
	for _, want := range []string{"Name:", "prod", "arn:aws:ecs:us-east-1:123456789012:cluster/prod", "team=platform"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe table lacks %q:\n%s", want, out)
		}
	}
	m = h.okJSON("cluster", "describe", "prod")
	if f, _ := get(t, m, "failures").([]any); get(t, m, "clusters", 0, "tags", 0, "value") != "platform" || len(f) != 0 {
		t.Fatalf("describe json: %v", m)
	}
	r := h.fails(1, "capstan: MISSING: cluster arn:aws:ecs:us-east-1:123456789012:cluster/nope", "cluster", "describe", "prod", "nope")
	if !strings.Contains(r.stdout, "prod") {
		t.Fatalf("describe with a missing cluster printed nothing for the found one:\n%s", r.stdout)
	}

	out = h.ok("cluster", "delete", "staging")
	if !hasLine(out, "staging", "INACTIVE") {
		t.Fatalf("delete table:\n%s", out)
	}
	m = h.okJSON("cluster", "delete", "prod")
	if get(t, m, "cluster", "status") != "INACTIVE" {
		t.Fatalf("delete json: %v", m)
	}
}

func TestErrors(t *testing.T) {
	h := newHarness(t)

	// API errors: exit 1 with the ECS error code.
	h.fails(1, "capstan: ClusterNotFoundException: ", "cluster", "delete", "nope")
	h.fails(1, "capstan: ClusterNotFoundException: ", "capacity-provider", "create", "cp", "--cluster", "nope")

	// Usage errors: exit 2, the message and where the help is, the flag
	// as typed.
	r := h.fails(2, "flag provided but not defined: --bogus\n", "cluster", "list", "--bogus")
	if r.stderr != "capstan: flag provided but not defined: --bogus\nRun 'capstan cluster list --help' for usage.\n" {
		t.Fatalf("bad flag:\n%s", r.stderr)
	}
	h.fails(2, "flag provided but not defined: -x\n", "cluster", "list", "-x")
	h.fails(2, `invalid value "soon" for flag --timeout`, "daemon", "update", "d", "--timeout=soon")
	h.fails(2, "flag needs an argument: --cluster\n", "daemon", "list", "--cluster")
	r = h.fails(2, `unknown noun "clusters"`, "clusters", "list")
	if !strings.HasSuffix(r.stderr, "\nRun 'capstan --help' for usage.\n") || strings.Count(r.stderr, "\n") != 2 {
		t.Fatalf("unknown noun:\n%s", r.stderr)
	}
	r = h.fails(2, `unknown verb "lst" for cluster`, "cluster", "lst")
	if !strings.Contains(r.stderr, "Run 'capstan cluster --help' for usage.") || strings.Count(r.stderr, "\n") != 2 {
		t.Fatalf("unknown verb:\n%s", r.stderr)
	}
	h.fails(2, "missing verb", "daemon")
	h.fails(2, "missing cluster NAME", "cluster", "create")
	h.fails(2, `unexpected argument "b"`, "cluster", "delete", "a", "b")
	h.fails(2, `-o "yaml": want table or json`, "cluster", "list", "-o", "yaml")
	h.fails(2, "missing -f FILE", "task-definition", "register")
	h.fails(2, "--vcpu \"x\": want MIN or MIN-MAX", "capacity-provider", "create", "cp", "--cluster", "c", "--vcpu", "x", "--memory-mib", "1024")
	h.fails(2, "need both --vcpu and --memory-mib", "capacity-provider", "create", "cp", "--cluster", "c", "--vcpu", "2")
	h.fails(2, "want KEY=VALUE", "cluster", "create", "x", "--tag", "novalue")
	h.fails(2, "--critical and --no-critical", "daemon", "create", "d", "--task-definition", "td", "--capacity-provider", "cp", "--critical", "--no-critical")
	h.fails(1, "unknown members containerDefinitions[0].privilegd, volume", "task-definition", "register", "-f", "testdata/bad-member.json")

	// Help goes to stdout with exit 0.
	for _, args := range [][]string{{"daemon", "-h"}, {"daemon", "create", "-h"}, {"--endpoint", "http://x:1", "-h"}} {
		r := h.run(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage: capstan") || r.stderr != "" {
			t.Fatalf("%v: exit %d\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
	out := h.ok("capacity-provider", "create", "-h")
	if !strings.Contains(out, placeholderRoleArn) || !strings.Contains(out, "--scale-in-after seconds") {
		t.Fatalf("capacity-provider create help:\n%s", out)
	}

	// Nothing listening: exit 1 naming the endpoint.
	env := map[string]string{"CAPSTAN_ENDPOINT": "http://127.0.0.1:1", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
	if r := h.runEnv(env, "cluster", "list"); r.code != 1 || !strings.Contains(r.stderr, "cannot reach http://127.0.0.1:1") {
		t.Fatalf("unreachable: exit %d %s", r.code, r.stderr)
	}
	env["CAPSTAN_ENDPOINT"] = "127.0.0.1:8080"
	if r := h.runEnv(env, "cluster", "list"); r.code != 2 || !strings.Contains(r.stderr, "want an http:// or https:// URL") {
		t.Fatalf("bad endpoint: exit %d %s", r.code, r.stderr)
	}
}

func TestConnectionSettings(t *testing.T) {
	// The AWS SDK also reads the process environment (AWS_PROFILE, keys):
	// cleared, so that every case below checks what it names.
	clearAWSEnv(t)
	h := newHarness(t)
	key, secret := h.srv.Config.AdminKeyID, h.srv.Config.AdminSecret
	h.ok("cluster", "create", "c1")

	// Global flags before the noun, between noun and verb, and after the verb.
	none := map[string]string{"HOME": t.TempDir()}
	creds := []string{"--access-key-id", key, "--secret-access-key", secret}
	for _, args := range [][]string{
		append(append([]string{"--endpoint", h.srv.URL}, creds...), "cluster", "list"),
		append(append([]string{"cluster", "--endpoint", h.srv.URL}, creds...), "list"),
		append(append([]string{"cluster", "list", "--endpoint", h.srv.URL}, creds...), "--region", "us-east-1"),
	} {
		if r := h.runEnv(none, args...); r.code != 0 || !hasLine(r.stdout, "c1", "ACTIVE") {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}

	// The config file in HOME supplies endpoint and credentials.
	home := t.TempDir()
	writeConfig(t, filepath.Join(home, ".capstan", "config.json"), h.srv.URL, key, secret)
	if r := h.runEnv(map[string]string{"HOME": home}, "cluster", "list"); r.code != 0 || !hasLine(r.stdout, "c1", "ACTIVE") {
		t.Fatalf("home config: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// CAPSTAN_CONFIG names another file; its wrong secret beats the right
	// one in the AWS environment, and the flags beat both.
	other := filepath.Join(t.TempDir(), "capstan.json")
	writeConfig(t, other, h.srv.URL, key, "wrong")
	env := map[string]string{"CAPSTAN_CONFIG": other, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
	if r := h.runEnv(env, "cluster", "list"); r.code != 1 || !strings.Contains(r.stderr, "capstan: InvalidSignatureException: ") {
		t.Fatalf("file credentials should win over the environment: exit %d %s", r.code, r.stderr)
	}
	if r := h.runEnv(env, append([]string{"cluster", "list"}, creds...)...); r.code != 0 {
		t.Fatalf("flag credentials should win over the file: exit %d %s", r.code, r.stderr)
	}
	// --config beats CAPSTAN_CONFIG; a named file must exist.
	if r := h.runEnv(env, "cluster", "list", "--config", filepath.Join(home, ".capstan", "config.json")); r.code != 0 {
		t.Fatalf("--config: exit %d %s", r.code, r.stderr)
	}
	if r := h.runEnv(env, "cluster", "list", "--config", filepath.Join(home, "absent.json")); r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Fatalf("missing --config file: exit %d %s", r.code, r.stderr)
	}

	// No credentials anywhere: a clear message, not a request.
	if r := h.runEnv(map[string]string{"CAPSTAN_ENDPOINT": h.srv.URL, "HOME": t.TempDir(), "AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull}, "cluster", "list"); r.code != 1 || !strings.Contains(r.stderr, "no credentials") {
		t.Fatalf("no credentials: exit %d %s", r.code, r.stderr)
	}
}

// clearAWSEnv unsets, for the rest of the test, every AWS_* and CAPSTAN_*
// variable of the process (the harness's own CAPSTAN_TEST_* knobs stay):
// the AWS SDK reads credentials from there whatever getenv says.
func clearAWSEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "CAPSTAN_") && !strings.HasPrefix(k, "CAPSTAN_TEST_") {
			t.Setenv(k, "") // restores the value after the test
			os.Unsetenv(k)
		}
	}
}

func writeConfig(t *testing.T, path, endpoint, key, secret string) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"endpoint": endpoint, "region": "us-east-1", "accessKeyId": key, "secretAccessKey": secret})
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCapacityProvider(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")

	out := h.ok("capacity-provider", "create", "--name", "small", "--cluster", "c", "--vcpu", "2-4", "--memory-mib", "4096",
		"--scale-in-after", "300", "--auto-repair", "enabled", "--tag", "env=test")
	if !hasLine(out, "small", "c", "MANAGED_INSTANCES", "ACTIVE", "CREATE_COMPLETE", "2-4", "4096+", "300s", "ENABLED") {
		t.Fatalf("create table:\n%s", out)
	}
	m := h.okJSON("capacity-provider", "describe", "small")
	mip := get(t, m, "capacityProviders", 0, "managedInstancesProvider")
	if get(t, mip, "infrastructureRoleArn") != placeholderRoleArn ||
		get(t, mip, "instanceLaunchTemplate", "ec2InstanceProfileArn") != placeholderProfileArn ||
		get(t, mip, "instanceLaunchTemplate", "networkConfiguration", "subnets", 0) != placeholderSubnet ||
		get(t, mip, "instanceLaunchTemplate", "instanceRequirements", "vCpuCount", "max") != 4.0 ||
		get(t, m, "capacityProviders", 0, "tags", 0, "key") != "env" {
		t.Fatalf("describe json: %v", m)
	}

	// Update changes what the flags say and keeps the rest.
	out = h.ok("capacity-provider", "update", "small", "--cluster", "c", "--scale-in-after", "-1")
	if !hasLine(out, "small", "c", "MANAGED_INSTANCES", "ACTIVE", "UPDATE_COMPLETE", "2-4", "4096+", "never", "ENABLED") {
		t.Fatalf("update table:\n%s", out)
	}

	out = h.ok("capacity-provider", "create", "-f", "testdata/capacity-provider.json", "--cluster", "c")
	if !hasLine(out, "from-file", "c", "MANAGED_INSTANCES", "ACTIVE", "CREATE_COMPLETE", "2-8", "2048+", "600s") {
		t.Fatalf("create -f table:\n%s", out)
	}
	out = h.ok("capacity-provider", "describe", "from-file", "--cluster", "c")
	for _, want := range []string{"arn:aws:iam::123456789012:role/ecsInfrastructureRole", "subnet-0123456789abcdef0", "env=test"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}

	out = h.ok("capacity-provider", "list", "--cluster", "c")
	if !hasLine(out, "small") || !hasLine(out, "from-file") {
		t.Fatalf("list:\n%s", out)
	}
	out = h.ok("capacity-provider", "delete", "from-file", "--cluster", "c")
	if !hasLine(out, "from-file", "c", "MANAGED_INSTANCES", "INACTIVE", "DELETE_COMPLETE") {
		t.Fatalf("delete:\n%s", out)
	}
	h.fails(1, "capstan: ", "capacity-provider", "update", "nope", "--cluster", "c", "--scale-in-after", "5")
}

func TestTaskDefinition(t *testing.T) {
	h := newHarness(t)

	out := h.ok("task-definition", "register", "-f", "testdata/web.json")
	if !hasLine(out, "web", "1", "ACTIVE", "256", "512", "1") {
		t.Fatalf("register table:\n%s", out)
	}
	m := h.okJSON("task-definition", "register", "-f", "testdata/web.json", "--tag", "owner=web-team")
	if get(t, m, "taskDefinition", "revision") != 2.0 {
		t.Fatalf("second register: %v", m)
	}

	out = h.ok("task-definition", "describe", "web")
	for _, want := range []string{"web:2", "bridge", "nginx:1.27", "8080:80/tcp", "owner=web-team"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}
	m = h.okJSON("task-definition", "describe", "web:1")
	td := get(t, m, "taskDefinition")
	if get(t, td, "revision") != 1.0 || get(t, td, "containerDefinitions", 0, "portMappings", 0, "hostPort") != 8080.0 ||
		get(t, td, "containerDefinitions", 0, "environment", 0, "value") != "production" {
		t.Fatalf("describe json: %v", m)
	}
	if _, err := timeField(td, "registeredAt"); err != nil {
		t.Fatal(err)
	}

	out = h.ok("task-definition", "list")
	if !hasLine(out, "web", "1") || !hasLine(out, "web", "2") {
		t.Fatalf("list:\n%s", out)
	}
	out = h.ok("task-definition", "deregister", "web:1")
	if !hasLine(out, "web", "1", "INACTIVE") {
		t.Fatalf("deregister:\n%s", out)
	}
	if m := h.okJSON("task-definition", "list", "--status", "inactive"); len(get(t, m, "taskDefinitionArns").([]any)) != 1 {
		t.Fatalf("list inactive: %v", m)
	}
}

func timeField(v any, name string) (string, error) {
	s, _ := v.(map[string]any)[name].(string)
	if _, err := parseRFC3339(s); err != nil {
		return "", err
	}
	return s, nil
}

func TestDaemonTaskDefinition(t *testing.T) {
	h := newHarness(t)

	out := h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	if !hasLine(out, "cloudwatch-agent", "1", "arn:aws:ecs:us-east-1:123456789012:daemon-task-definition/cloudwatch-agent:1") {
		t.Fatalf("register:\n%s", out)
	}

	m := h.okJSON("daemon-task-definition", "describe", "cloudwatch-agent")
	td := get(t, m, "daemonTaskDefinition")
	cd := get(t, td, "containerDefinitions", 0)
	if get(t, td, "cpu") != "1024" || get(t, td, "memory") != "512" || get(t, td, "status") != "ACTIVE" ||
		get(t, cd, "privileged") != true ||
		get(t, cd, "mountPoints", 0, "readOnly") != true || get(t, cd, "mountPoints", 1, "readOnly") != true ||
		get(t, td, "volumes", 0, "host", "sourcePath") != "/proc" || get(t, td, "volumes", 1, "host", "sourcePath") != "/sys" {
		t.Fatalf("describe json: %v", m)
	}

	out = h.ok("daemon-task-definition", "describe", "cloudwatch-agent:1")
	if !hasLine(out, "cloudwatch-agent", "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:latest") ||
		!hasLine(out, "proc", "host", "/proc", "cloudwatch-agent", "/rootfs/proc", "true") ||
		!hasLine(out, "sys", "host", "/sys", "cloudwatch-agent", "/rootfs/sys", "true") {
		t.Fatalf("describe table:\n%s", out)
	}

	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	out = h.ok("daemon-task-definition", "list")
	if !hasLine(out, "cloudwatch-agent", "1", "ACTIVE") || !hasLine(out, "cloudwatch-agent", "2", "ACTIVE") {
		t.Fatalf("list:\n%s", out)
	}
	if m := h.okJSON("daemon-task-definition", "list", "--latest"); len(get(t, m, "daemonTaskDefinitions").([]any)) != 1 {
		t.Fatalf("list --latest: %v", m)
	}
	out = h.ok("daemon-task-definition", "delete", "cloudwatch-agent:1")
	if !strings.Contains(out, "cloudwatch-agent:1") {
		t.Fatalf("delete:\n%s", out)
	}
	h.fails(1, "capstan: ClientException: ", "daemon-task-definition", "describe", "missing-family")
}

func parseRFC3339(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

func TestDaemon(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "mi", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")

	r := h.run("daemon", "create", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "mi",
		"--drain-percent", "50", "--bake-time", "1", "--no-critical", "--tag", "team=platform", "--client-token", "tok-1")
	const arn = "arn:aws:ecs:us-east-1:123456789012:daemon/c/cw"
	if r.code != 0 || !hasLine(r.stdout, "Daemon:", arn) || !hasLine(r.stdout, "Status:", "ACTIVE") ||
		!strings.Contains(r.stdout, "daemon-deployment/c/cw/") {
		t.Fatalf("create: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// By name in a cluster, by name alone (unique), and by ARN.
	for _, args := range [][]string{{"cw", "--cluster", "c"}, {"cw"}, {arn}} {
		out := h.ok(append([]string{"daemon", "describe"}, args...)...)
		if !hasLine(out, "Name:", "cw") || !hasLine(out, "Cluster:", "c") || !hasLine(out, "ARN:", arn) || !hasLine(out, "REVISION", "CAPACITY", "PROVIDER") {
			t.Fatalf("describe %v:\n%s", args, out)
		}
	}
	m := h.okJSON("daemon", "describe", "cw", "--cluster", "c")
	if get(t, m, "daemon", "daemonArn") != arn || len(get(t, m, "daemon", "currentRevisions").([]any)) == 0 {
		t.Fatalf("describe json: %v", m)
	}
	h.fails(1, `capstan: DaemonNotFoundException: no daemon named "nope" in cluster "c"`, "daemon", "describe", "nope", "--cluster", "c")
	h.fails(1, "capstan: ClusterNotFoundException: ", "daemon", "describe", "cw", "--cluster", "nope")

	out := h.ok("daemon", "list", "--cluster", "c")
	if !hasLine(out, "cw", "c", "ACTIVE") {
		t.Fatalf("list:\n%s", out)
	}

	// Update replaces everything: the CLI says which settings fall back.
	r = h.run("daemon", "update", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:2", "--capacity-provider", "mi")
	if r.code != 0 || !hasLine(r.stdout, "Daemon:", arn) ||
		!strings.Contains(r.stderr, "capstan: warning: update replaces the whole daemon configuration") ||
		!strings.Contains(r.stderr, "drain percent 25") || !strings.Contains(r.stderr, "critical true") {
		t.Fatalf("update: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	h.fails(2, "missing --capacity-provider", "daemon", "update", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:2")

	// Deployments, newest first: the update's carries the defaults again.
	m = h.okJSON("daemon", "deployments", "cw", "--cluster", "c")
	deps := get(t, m, "daemonDeployments").([]any)
	if len(deps) != 2 {
		t.Fatalf("deployments: %v", m)
	}
	if get(t, deps[0], "deploymentConfiguration", "drainPercent") != 25.0 || get(t, deps[1], "deploymentConfiguration", "drainPercent") != 50.0 {
		t.Fatalf("deployment configurations: %v", deps)
	}
	out = h.ok("daemon", "deployments", "cw", "--cluster", "c")
	if !hasLine(out, "DEPLOYMENT", "STATUS", "TARGET", "REVISION") || len(strings.Split(strings.TrimSpace(out), "\n")) != 3 {
		t.Fatalf("deployments table:\n%s", out)
	}
	status, _ := get(t, deps[1], "status").(string)
	if m := h.okJSON("daemon", "deployments", "cw", "--cluster", "c", "--status", status); len(get(t, m, "daemonDeployments").([]any)) == 0 {
		t.Fatalf("deployments --status %s: %v", status, m)
	}

	m = h.okJSON("daemon", "revisions", "cw", "--cluster", "c")
	revs := get(t, m, "daemonRevisions").([]any)
	var tds []string
	for _, rv := range revs {
		tds = append(tds, get(t, rv, "daemonTaskDefinitionArn").(string))
	}
	if !strings.Contains(strings.Join(tds, " "), "daemon-task-definition/cloudwatch-agent:2") {
		t.Fatalf("revisions: %v", m)
	}
	out = h.ok("daemon", "revisions", "cw", "--cluster", "c")
	if !hasLine(out, "REVISION", "TASK", "DEFINITION") || !strings.Contains(out, "cloudwatch-agent:2") {
		t.Fatalf("revisions table:\n%s", out)
	}

	// A second daemon from a request file, with a flag overriding it.
	req := filepath.Join(t.TempDir(), "daemon.json")
	if err := os.WriteFile(req, []byte(`{"daemonName": "from-file", "clusterArn": "c",
		"daemonTaskDefinitionArn": "cloudwatch-agent:2", "capacityProviderArns": ["mi"],
		"deploymentConfiguration": {"drainPercent": 10}, "critical": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	m = h.okJSON("daemon", "create", "-f", req, "--drain-percent", "20")
	if get(t, m, "daemonArn") != "arn:aws:ecs:us-east-1:123456789012:daemon/c/from-file" {
		t.Fatalf("create -f: %v", m)
	}
	m = h.okJSON("daemon", "deployments", "from-file", "--cluster", "c")
	if get(t, m, "daemonDeployments", 0, "deploymentConfiguration", "drainPercent") != 20.0 {
		t.Fatalf("create -f deployment: %v", m)
	}

	out = h.ok("daemon", "delete", "cw", "--cluster", "c")
	if !hasLine(out, "Daemon:", arn) || !hasLine(out, "Status:", "DELETE_IN_PROGRESS") {
		t.Fatalf("delete:\n%s", out)
	}
}
