package cli

import (
	"strings"
	"testing"
	"time"
)

// historyRows are the data rows of `daemon history`: number, short ID,
// task definition, deployments.
func historyRows(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || strings.HasPrefix(line, "*") {
			continue
		}
		rows = append(rows, []string{f[0], f[1], f[2], strings.Join(f[4:], " ")})
	}
	return rows
}

// History lists revisions newest first with family:revision and their
// deployments; rollback --to-revision takes a history number, a short ID
// or family:revision and says where it goes before it starts; every view
// of a revision shows family:revision beside its ID.
func TestDaemonHistoryAndRollbackNames(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "mi", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon", "create", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "mi")
	first := get(t, h.latestDeployment("cw"), "targetDaemonRevision", "arn").(string)
	time.Sleep(5 * time.Millisecond) // revisions are ordered by creation time
	h.ok("daemon", "update", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:2", "--capacity-provider", "mi")
	second := get(t, h.latestDeployment("cw"), "targetDaemonRevision", "arn").(string)

	rows := historyRows(t, h.ok("daemon", "history", "cw", "--cluster", "c"))
	if len(rows) != 2 || rows[0][0] != "2*" || rows[0][1] != lastSegment(second) || rows[0][2] != "cloudwatch-agent:2" ||
		rows[1][0] != "1" || rows[1][1] != lastSegment(first) || rows[1][2] != "cloudwatch-agent:1" || rows[1][3] == "-" || rows[1][3] == "" {
		t.Fatalf("history rows: %q", rows)
	}
	m := h.okJSON("daemon", "history", "cw", "--cluster", "c")
	if get(t, m, "revisions", 0, "number") != 2.0 || get(t, m, "revisions", 1, "taskDefinition") != "cloudwatch-agent:1" ||
		len(get(t, m, "revisions", 1, "deployments").([]any)) != 1 || get(t, m, "revisions", 0, "current") != true {
		t.Fatalf("history json: %v", m)
	}

	// Where revisions are shown, family:revision is beside the ID.
	if out := h.ok("daemon", "deployments", "cw", "--cluster", "c"); !strings.Contains(out, lastSegment(second)+" (cloudwatch-agent:2)") ||
		!strings.Contains(out, lastSegment(first)+" (cloudwatch-agent:1)") {
		t.Fatalf("deployments:\n%s", out)
	}
	if out := h.ok("daemon", "describe", "cw", "--cluster", "c"); !strings.Contains(out, "(cloudwatch-agent:") {
		t.Fatalf("describe:\n%s", out)
	}

	// By history number.
	out := h.ok("daemon", "rollback", "cw", "--cluster", "c", "--to-revision", "1")
	if !strings.HasPrefix(out, "Rolling back cw to revision #1 "+lastSegment(first)+" (cloudwatch-agent:1, created ") ||
		!hasLine(out, "Settings", "of:", lastSegment(first), "(cloudwatch-agent:1)") {
		t.Fatalf("rollback to 1:\n%s", out)
	}
	third := get(t, h.latestDeployment("cw"), "targetDaemonRevision", "arn").(string)
	if rev := h.revision(third); !strings.HasSuffix(rev["td"].(string), "cloudwatch-agent:1") {
		t.Fatalf("after rollback to #1 the target runs %v", rev)
	}
	// By family:revision: the newest revision of it that is not current.
	out = h.ok("daemon", "rollback", "cw", "--cluster", "c", "--to-revision", "cloudwatch-agent:2")
	if !strings.HasPrefix(out, "Rolling back cw to revision #2 "+lastSegment(second)+" (cloudwatch-agent:2") {
		t.Fatalf("rollback to cloudwatch-agent:2:\n%s", out)
	}
	// By short ID, with -o json: the message goes to stderr.
	r := h.run("daemon", "rollback", "cw", "--cluster", "c", "--to-revision", lastSegment(third), "-o", "json")
	if r.code != 0 || !strings.HasPrefix(r.stderr, "Rolling back cw to revision #3 "+lastSegment(third)+" (cloudwatch-agent:1") || !strings.HasPrefix(r.stdout, "{") {
		t.Fatalf("rollback by short ID: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Without --to-revision: the one before the current, named first.
	out = h.ok("daemon", "rollback", "cw", "--cluster", "c")
	if !strings.HasPrefix(out, "Rolling back cw to revision #4 ") || !strings.Contains(out, "(cloudwatch-agent:2") {
		t.Fatalf("default rollback:\n%s", out)
	}
	rows = historyRows(t, h.ok("daemon", "history", "cw", "--cluster", "c"))
	if len(rows) != 6 || rows[0][0] != "6*" || rows[0][2] != "cloudwatch-agent:2" || rows[5][0] != "1" {
		t.Fatalf("history after rollbacks: %q", rows)
	}

	h.fails(2, "--to-revision 9: the history numbers revisions 1 to 6", "daemon", "rollback", "cw", "--cluster", "c", "--to-revision", "9")
	h.fails(2, "no revision in the daemon's history has that ID", "daemon", "rollback", "cw", "--cluster", "c", "--to-revision", "other:3")
	h.fails(1, "DaemonNotFoundException", "daemon", "history", "nope", "--cluster", "c")
}

// The rollout block shows family:revision beside the revision IDs it names.
func TestRolloutBlockNamesTaskDefinitions(t *testing.T) {
	const target, back = "arn:aws:ecs:us-east-1:123456789012:daemon-revision/c/cw/222", "arn:aws:ecs:us-east-1:123456789012:daemon-revision/c/cw/111"
	r := &rollout{DaemonDeploymentArn: "arn:aws:ecs:us-east-1:123456789012:daemon-deployment/c/cw/d1", Status: "ROLLBACK_IN_PROGRESS",
		TargetDaemonRevisionArn: target, RollbackTargetDaemonRevisionArn: back,
		labels: map[string]string{target: "agent:3", back: "agent:2"}}
	out := strings.Join(rolloutBlock(r, time.Now()), "\n")
	if !hasLine(out, "Target", "revision:", "222", "(agent:3)") || !hasLine(out, "Rolling", "back", "to:", "111", "(agent:2)") {
		t.Fatalf("block:\n%s", out)
	}
	r.labels = nil // a server that could not say: IDs alone
	if out := strings.Join(rolloutBlock(r, time.Now()), "\n"); !hasLine(out, "Target", "revision:", "222") || strings.Contains(out, "(agent") {
		t.Fatalf("block without labels:\n%s", out)
	}
}
