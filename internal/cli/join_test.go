package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// instance join prints one line per machine; each line's credential
// registers an instance of the capacity provider (REGISTERING: daemons
// first), and bad input is refused naming the flag or field.
func TestInstanceJoin(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "mi", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.fails(2, "--cluster is required", "instance", "join", "--capacity-provider", "mi")
	h.fails(2, "--capacity-provider is required", "instance", "join", "--cluster", "c")
	h.fails(1, "count", "instance", "join", "--cluster", "c", "--capacity-provider", "mi", "--count", "0")
	h.fails(1, "count", "instance", "join", "--cluster", "c", "--capacity-provider", "mi", "--count", "101")
	h.fails(1, "nope", "instance", "join", "--cluster", "c", "--capacity-provider", "nope")

	out := h.ok("instance", "join", "--cluster", "c", "--capacity-provider", "mi", "--count", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] == lines[1] {
		t.Fatalf("want 2 distinct lines:\n%s", out)
	}
	for _, l := range lines {
		env := map[string]string{}
		words := strings.Fields(l)
		if len(words) < 3 || strings.Join(words[len(words)-2:], " ") != "capstan agent" {
			t.Fatalf("line does not run the agent: %q", l)
		}
		for _, w := range words[:len(words)-2] {
			k, v, _ := strings.Cut(w, "=")
			env[k] = v
		}
		if env["CAPSTAN_ENDPOINT"] != h.srv.URL || env["ECS_CLUSTER"] != "c" || env["AWS_ACCESS_KEY_ID"] == "" || env["AWS_SECRET_ACCESS_KEY"] == "" {
			t.Fatalf("line %q: %v", l, env)
		}
		c := h.srv.ECSWith(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
		reg, err := c.RegisterContainerInstance(context.Background(), &ecs.RegisterContainerInstanceInput{Cluster: aws.String("c"),
			TotalResources: []types.Resource{{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024},
				{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 512}}})
		if err != nil {
			t.Fatalf("register with a joined credential: %v", err)
		}
		if ci := reg.ContainerInstance; aws.ToString(ci.CapacityProviderName) != "mi" || aws.ToString(ci.Status) != "REGISTERING" {
			t.Fatalf("joined instance: provider %q status %q", aws.ToString(ci.CapacityProviderName), aws.ToString(ci.Status))
		}
	}
}

// With several servers (CAPSTAN_ENDPOINT or --endpoint lists them) the
// line gives the agent the whole list, which it fails over along, and so
// does agent-credential create.
func TestJoinLinesNameEveryEndpoint(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "mi", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	env := map[string]string{}
	for k, v := range h.env {
		env[k] = v
	}
	list := h.srv.URL + ",https://capstan-2.example:8443"
	env["CAPSTAN_ENDPOINT"] = list
	r := h.runEnv(env, "instance", "join", "--cluster", "c", "--capacity-provider", "mi")
	if r.code != 0 || !strings.Contains(r.stdout, " CAPSTAN_ENDPOINT="+list+" ") && !strings.HasPrefix(r.stdout, "CAPSTAN_ENDPOINT="+list+" ") {
		t.Fatalf("join with two endpoints (exit %d): %q %s", r.code, r.stdout, r.stderr)
	}
	r = h.runEnv(env, "agent-credential", "create", "--cluster", "c")
	if r.code != 0 || !strings.Contains(r.stdout, "\nCAPSTAN_ENDPOINT="+list+"\n") {
		t.Fatalf("agent-credential create with two endpoints (exit %d): %q %s", r.code, r.stdout, r.stderr)
	}
	r = h.run("--endpoint", list, "instance", "join", "--cluster", "c", "--capacity-provider", "mi")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "CAPSTAN_ENDPOINT="+list+" ") {
		t.Fatalf("join --endpoint with two endpoints (exit %d): %q %s", r.code, r.stdout, r.stderr)
	}
}

func TestShellWord(t *testing.T) {
	for in, want := range map[string]string{"abc/+=": "abc/+=", "": "''", "a b": "'a b'", "it's": `'it'\''s'`} {
		if got := shellWord(in); got != want {
			t.Errorf("shellWord(%q) = %s, want %s", in, got, want)
		}
	}
}
