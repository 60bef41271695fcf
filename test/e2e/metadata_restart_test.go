package e2e

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// A container started before an agent restart keeps reaching the task
// metadata endpoint through the URI in its environment: the agent, which
// picks its own port (CAPSTAN_METADATA_ADDR 0.0.0.0:0, as local and
// launched instances run), takes the same port again.
func TestMetadataURISurvivesAgentRestart(t *testing.T) {
	f := newFleet(t)
	env := agents.Env(t, f.srv, f.cluster, t.TempDir())
	a := agents.StartEnv(t, env, f.rt)
	// One line a second: OK and the task's ARN as the endpoint answers it,
	// or DOWN while nothing does.
	probe := f.container("probe", "sh", "-c", `while true; do `+
		`if wget -q -O /tmp/t.json "$ECS_CONTAINER_METADATA_URI_V4/task"; then echo "OK $(grep -o '"TaskARN":"[^"]*"' /tmp/t.json)"; else echo DOWN; fi; `+
		`sleep 1; done`)
	arn := f.run(f.register("mdprobe", probe))
	f.waitStatus(arn, "RUNNING", 60*time.Second)
	logs := func() string {
		cs := f.containers(arn)
		if len(cs) != 1 {
			t.Fatalf("task %s has %d containers", arn, len(cs))
		}
		rc, err := f.rt.Logs(context.Background(), cs[0].ID, 0)
		if err != nil {
			return ""
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	okLine := `OK "TaskARN":"` + arn + `"`
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; the probe wrote:\n%s", what, logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("the probe reads its task's metadata", func() bool { return strings.Contains(logs(), okLine) })

	a.Stop()
	waitFor("the probe sees the endpoint gone", func() bool {
		l := strings.TrimSpace(logs())
		return strings.HasSuffix(l, "DOWN")
	})
	down := strings.Count(logs(), "\n")
	b := agents.StartEnv(t, env, f.rt)
	if b.Metadata != a.Metadata {
		t.Errorf("the restarted agent serves task metadata on %s, before on %s", b.Metadata, a.Metadata)
	}
	// The same container, with the URI it was started with, reads its
	// metadata from the new agent.
	waitFor("the probe reads its metadata after the restart", func() bool {
		lines := strings.Split(strings.TrimSpace(logs()), "\n")
		return len(lines) > down && strings.Contains(strings.Join(lines[down:], "\n"), okLine)
	})
	if cs := f.containers(arn); len(cs) != 1 {
		t.Fatalf("task %s has %d containers after the restart", arn, len(cs))
	}
}
