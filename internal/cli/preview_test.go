package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A dry run that changes the task definition shows what changes inside
// it, field by field: the image, an added variable, memory raised, a
// health check setting; never the revision's own ARN or number.
func TestDaemonUpdateDryRunFieldDiff(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "mi", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	b, err := os.ReadFile("testdata/cloudwatch-agent.json")
	if err != nil {
		t.Fatal(err)
	}
	next := strings.NewReplacer(
		`cloudwatch-agent:latest"`, `cloudwatch-agent:1.300"`,
		`"memory": "512"`, `"memory": "1024"`,
		`"retries": 3`, `"retries": 5`,
		`"environment": [`, `"environment": [{"name": "LOG_LEVEL", "value": "debug"},`,
	).Replace(string(b))
	path := filepath.Join(t.TempDir(), "next.json")
	if err := os.WriteFile(path, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	h.ok("daemon-task-definition", "register", "-f", path)
	h.ok("daemon", "create", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "mi")

	out := h.ok("daemon", "update", "cw", "--cluster", "c", "--keep-unspecified", "--task-definition", "cloudwatch-agent:2", "--dry-run")
	for _, want := range [][]string{
		{"~", "containerDefinitions[cloudwatch-agent].image", "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:latest", "->", "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300"},
		{"+", "containerDefinitions[cloudwatch-agent].environment[LOG_LEVEL]", "LOG_LEVEL=debug"},
		{"~", "memory", "512", "->", "1024", "(raised)"},
		{"~", "containerDefinitions[cloudwatch-agent].healthCheck.retries", "3", "->", "5", "(raised)"},
	} {
		if !hasLine(out, want...) {
			t.Errorf("dry run lacks %q:\n%s", strings.Join(want, " "), out)
		}
	}
	m := h.okJSON("daemon", "update", "cw", "--cluster", "c", "--keep-unspecified", "--task-definition", "cloudwatch-agent:2", "--dry-run")
	changes := get(t, m, "taskDefinitionChanges").([]any)
	if len(changes) != 4 {
		t.Fatalf("taskDefinitionChanges: want 4, got %v", changes)
	}
	for _, c := range changes {
		f := c.(map[string]any)["field"].(string)
		if strings.Contains(f, "revision") || strings.Contains(f, "Arn") || strings.Contains(f, "registered") {
			t.Errorf("identity field in the diff: %v", c)
		}
	}
	// The same definition: no field changes, and the section is absent.
	out = h.ok("daemon", "update", "cw", "--cluster", "c", "--keep-unspecified", "--dry-run")
	if strings.Contains(out, "field by field") {
		t.Errorf("no task definition change, yet:\n%s", out)
	}
}

// --if-unchanged applies a previewed update only while the daemon's latest
// revision is the one the preview saw: an update in between makes the
// server refuse it with ConflictException, changing nothing.
func TestDaemonUpdateIfUnchanged(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "mi", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon", "create", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "mi")
	update := []string{"daemon", "update", "cw", "--cluster", "c", "--keep-unspecified", "--task-definition", "cloudwatch-agent:2"}

	seen := get(t, h.okJSON(append(update, "--dry-run")...), "ifRevisionArn").(string)
	if out := h.ok(append(update, "--dry-run")...); !strings.Contains(out, "--if-unchanged "+lastSegment(seen)) {
		t.Fatalf("dry run does not give the check:\n%s", out)
	}
	// Someone else updates in between.
	h.ok("daemon", "update", "cw", "--cluster", "c", "--keep-unspecified", "--bake-time", "3")
	before := get(t, h.latestDeployment("cw"), "daemonDeploymentArn")
	h.fails(1, "capstan: ConflictException: ifRevisionArn: daemon arn:aws:ecs:us-east-1:123456789012:daemon/c/cw changed since the preview: its latest revision is ",
		append(update, "--if-unchanged", lastSegment(seen))...)
	if after := get(t, h.latestDeployment("cw"), "daemonDeploymentArn"); after != before {
		t.Fatalf("a refused update started deployment %v", after)
	}
	// Previewed again, it applies (by full ARN too).
	seen = get(t, h.okJSON(append(update, "--dry-run")...), "ifRevisionArn").(string)
	h.ok(append(update, "--if-unchanged", seen)...)
	target := get(t, h.latestDeployment("cw"), "targetDaemonRevision", "arn").(string)
	if rev := h.revision(target); !strings.HasSuffix(rev["td"].(string), "cloudwatch-agent:2") {
		t.Fatalf("after the checked update the target runs %v", rev)
	}
	h.fails(2, "--if-unchanged applies a previewed update; leave out --dry-run", append(update, "--dry-run", "--if-unchanged", "x")...)
	h.fails(1, "capstan: ConflictException: ifRevisionArn:", append(update, "--if-unchanged", "nosuch")...)
}
