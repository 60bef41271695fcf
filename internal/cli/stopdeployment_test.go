package cli

import (
	"strings"
	"testing"
	"time"
)

func TestDaemonStopDeployment(t *testing.T) {
	defer func(d time.Duration) { rolloutPoll = d }(rolloutPoll)
	rolloutPoll = 50 * time.Millisecond
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "busy", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.registerManaged("c", "busy", 1024, 2048)

	// The first deployment never finishes (no agent runs the daemon); a
	// second one supersedes it and is stopped: it rolls back to the first
	// revision.
	h.ok("daemon", "create", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "busy")
	first := h.latestDeployment("cw")
	h.ok("daemon", "update", "cw", "--cluster", "c", "--keep-unspecified", "--task-definition", "cloudwatch-agent:2")
	second := h.latestDeployment("cw")
	dep := get(t, second, "daemonDeploymentArn").(string)
	h.fails(2, "--timeout needs --wait", "daemon", "stop-deployment", "cw", "--cluster", "c", "--timeout", "1s")
	h.fails(1, "ClientException: daemon deployment "+get(t, first, "daemonDeploymentArn").(string)+" is STOPPED",
		"daemon", "stop-deployment", "cw", "--cluster", "c", "--deployment", get(t, first, "daemonDeploymentArn").(string))
	out := h.ok("daemon", "stop-deployment", "cw", "--cluster", "c")
	firstRev := get(t, first, "targetDaemonRevision", "arn").(string)
	if !hasLine(out, "Deployment:", dep) || !hasLine(out, "Status:", "STOP_REQUESTED") || !strings.Contains(out, "revision "+lastSegment(firstRev)) {
		t.Fatalf("stop-deployment:\n%s", out)
	}
	h.fails(1, "ClientException: daemon deployment "+dep+" is ", "daemon", "stop-deployment", "cw", "--cluster", "c")
}
