package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
)

// TestWalkthrough replays examples/walkthrough.sh, the managed-daemons
// walk-through, with the real AWS CLI against a real server.
func TestWalkthrough(t *testing.T) {
	needAWS(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "walkthrough.sh"))
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.StartServer(t, "")

	// The CLI's waiters sleep 15 s between polls; leave room for a few.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(srv.Env(), "CAPSTAN_ENDPOINT="+srv.URL)
	out, err := cmd.CombinedOutput()
	t.Logf("walkthrough output:\n%s", out)
	if err != nil {
		t.Fatalf("walkthrough.sh: %v", err)
	}

	steps := []string{
		"Register the daemon task definition (revision 1)",
		"$ aws ecs register-daemon-task-definition --cli-input-json file://examples/cloudwatch-agent-daemon.json",
		"Create the cluster",
		"$ aws ecs create-capacity-provider --cli-input-json file://examples/capacity-provider.json",
		"$ aws ecs put-cluster-capacity-providers",
		"$ aws ecs create-daemon --cli-input-json",
		"$ aws ecs list-daemons",
		"$ aws ecs describe-daemon ",
		"Register revision 2",
		"ok: revision = 2",
		"$ aws ecs update-daemon",
		"$ aws ecs describe-daemon-deployments",
		"ok: drainPercent = 25.0",
		"$ aws ecs wait daemon-deployment-successful",
		"ok: status = SUCCESSFUL",
		"$ aws ecs delete-daemon",
		"ok: status = DELETE_IN_PROGRESS",
		"ok: DaemonNotFoundException",
		"walkthrough: all steps passed",
	}
	for _, s := range steps {
		if !strings.Contains(string(out), s) {
			t.Errorf("walkthrough output does not mention %q", s)
		}
	}
	if n := strings.Count(string(out), "$ aws ecs wait daemon-deployment-successful"); n != 3 {
		t.Errorf("walkthrough waited for %d deployments, want 3 (create, update, delete)", n)
	}
}
