package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/capstanhq/capstan/internal/ops"
)

// registerManaged registers an instance bound to capacity provider cp, as
// a provisioned instance's agent would (no agent runs: it stays put).
func (h *harness) registerManaged(cluster, cp string, cpu, mem int32) string {
	h.t.Helper()
	ctx := context.Background()
	cred, err := h.srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: cluster, CapacityProvider: cp})
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := h.srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey).RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String(cluster),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: cpu},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: mem},
		},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return aws.ToString(out.ContainerInstance.ContainerInstanceArn)
}

func (h *harness) latestDeployment(daemon string) map[string]any {
	h.t.Helper()
	m := h.okJSON("daemon", "deployments", daemon, "--cluster", "c")
	return get(h.t, m, "daemonDeployments", 0).(map[string]any)
}

func (h *harness) revision(arn string) map[string]any {
	h.t.Helper()
	out, err := h.srv.ECS().DescribeDaemonRevisions(context.Background(), &ecs.DescribeDaemonRevisionsInput{DaemonRevisionArns: []string{arn}})
	if err != nil || len(out.DaemonRevisions) != 1 {
		h.t.Fatalf("describe revision %s: %+v %v", arn, out, err)
	}
	r := out.DaemonRevisions[0]
	return map[string]any{"td": aws.ToString(r.DaemonTaskDefinitionArn), "critical": aws.ToBool(r.Critical),
		"propagate": string(r.PropagateTags), "exec": aws.ToBool(r.EnableExecuteCommand)}
}

func TestDaemonUpdateDryRunAndKeepUnspecified(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "mi", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("capacity-provider", "create", "mi2", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	// Registered in this order: the plan replaces the oldest first.
	a := h.registerManaged("c", "mi", 2048, 4096)
	b := h.registerManaged("c", "mi", 1024, 2048)
	cc := h.registerManaged("c", "mi", 512, 1024)
	h.registerManaged("c", "mi2", 4096, 8192) // not in scope until mi2 is added

	h.ok("daemon", "create", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "mi",
		"--drain-percent", "50", "--bake-time", "2", "--no-critical", "--propagate-tags", "DAEMON", "--enable-execute-command")
	before := h.okJSON("daemon", "describe", "cw", "--cluster", "c")
	depBefore := get(t, before, "daemon", "deploymentArn")

	// The ECS pitfall: an update naming only the task definition and
	// capacity providers resets everything else.
	r := h.run("daemon", "update", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:2", "--capacity-provider", "mi", "--dry-run")
	if r.code != 0 {
		t.Fatalf("dry run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range [][]string{
		{"!", "deploymentConfiguration.drainPercent", "50", "->", "25"},
		{"!", "deploymentConfiguration.bakeTimeInMinutes", "2", "->", "0"},
		{"!", "critical", "false", "->", "true"},
		{"!", "propagateTags", "DAEMON", "->", "NONE"},
		{"!", "enableExecuteCommand", "true", "->", "false"},
		{"daemonTaskDefinitionArn", "cloudwatch-agent:1", "cloudwatch-agent:2"},
		// Registered by hand, so changed in place: no extra capacity.
		{"1", "0", "0", lastSegment(a), "(mi,", "in", "place)"},
		{"3", "0", "0", lastSegment(cc), "(mi,", "in", "place)"},
	} {
		if !hasLine(r.stdout, want...) {
			t.Errorf("dry run output lacks %q:\n%s", strings.Join(want, " "), r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "WARNING: 5 setting(s) would silently return to their defaults") ||
		!strings.Contains(r.stdout, "3 instance(s) in scope, 3 to replace, 1 per batch (drainPercent 25), 3 batch(es)") {
		t.Errorf("dry run output:\n%s", r.stdout)
	}
	// With JSON: the same preview, machine-readable.
	m := h.okJSON("daemon", "update", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:2", "--capacity-provider", "mi",
		"--capacity-provider", "mi2", "--drain-percent", "50", "--dry-run")
	if n := len(get(t, m, "resets").([]any)); n != 4 {
		t.Errorf("resets: %d, want 4 (bake, critical, propagate, exec): %v", n, m["resets"])
	}
	if get(t, m, "instancesInScope") != 4.0 || get(t, m, "batchSize") != 2.0 || len(get(t, m, "batches").([]any)) != 2 {
		t.Errorf("plan: %v", m)
	}
	batch0 := get(t, m, "batches", 0)
	if get(t, batch0, "extraCpu") != 0.0 || get(t, batch0, "instances", 0, "inPlace") != true || get(t, batch0, "instances", 0, "cpu") != 2048.0 ||
		get(t, batch0, "instances", 0, "containerInstanceArn") != a || get(t, batch0, "instances", 1, "containerInstanceArn") != b {
		t.Errorf("first batch: %v", batch0)
	}
	var cpChange any
	for _, c := range get(t, m, "changes").([]any) {
		if get(t, c, "setting") == "capacityProviderArns" {
			cpChange = c
		}
	}
	if cpChange == nil || len(get(t, cpChange, "added").([]any)) != 1 || !strings.HasSuffix(get(t, cpChange, "added", 0).(string), "/mi2") {
		t.Errorf("capacity provider change: %v", m["changes"])
	}
	if get(t, m, "currentConfiguration", "deploymentConfiguration", "drainPercent") != 50.0 || get(t, m, "currentConfiguration", "critical") != false {
		t.Errorf("current configuration: %v", m["currentConfiguration"])
	}
	// Invalid input is refused as UpdateDaemon would refuse it.
	h.fails(1, "InvalidParameterException: capacityProviderArns[0]:", "daemon", "update", "cw", "--cluster", "c",
		"--task-definition", "cloudwatch-agent:2", "--capacity-provider", "nope", "--dry-run")
	// Nothing changed.
	after := h.okJSON("daemon", "describe", "cw", "--cluster", "c")
	if get(t, after, "daemon", "deploymentArn") != depBefore {
		t.Fatalf("dry run started a deployment: %v", after)
	}

	// --keep-unspecified: only the bake time changes; no defaults warning.
	r = h.run("daemon", "update", "cw", "--cluster", "c", "--keep-unspecified", "--bake-time", "5", "--dry-run")
	if r.code != 0 || strings.Contains(r.stdout, "WARNING") || !hasLine(r.stdout, "deploymentConfiguration.bakeTimeInMinutes", "2", "5") {
		t.Fatalf("keep-unspecified dry run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = h.run("daemon", "update", "cw", "--cluster", "c", "--keep-unspecified", "--task-definition", "cloudwatch-agent:2", "--bake-time", "0")
	if r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Fatalf("keep-unspecified update: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	dep := h.latestDeployment("cw")
	if get(t, dep, "deploymentConfiguration", "drainPercent") != 50.0 || get(t, dep, "deploymentConfiguration", "bakeTimeInMinutes") != 0.0 {
		t.Fatalf("kept deployment configuration: %v", dep)
	}
	rev := h.revision(get(t, dep, "targetDaemonRevision", "arn").(string))
	if !strings.HasSuffix(rev["td"].(string), "cloudwatch-agent:2") || rev["critical"] != false || rev["propagate"] != "DAEMON" || rev["exec"] != true {
		t.Fatalf("kept revision: %v", rev)
	}

	// From a file: members present in it count as given, even false ones.
	req := filepath.Join(t.TempDir(), "update.json")
	if err := os.WriteFile(req, []byte(`{"critical": true, "enableExecuteCommand": false, "deploymentConfiguration": {"drainPercent": 20}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = h.run("daemon", "update", "cw", "--cluster", "c", "-f", req, "--keep-unspecified")
	if r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Fatalf("keep-unspecified -f: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	dep = h.latestDeployment("cw")
	rev = h.revision(get(t, dep, "targetDaemonRevision", "arn").(string))
	if get(t, dep, "deploymentConfiguration", "drainPercent") != 20.0 || rev["critical"] != true || rev["exec"] != false || rev["propagate"] != "DAEMON" {
		t.Fatalf("keep-unspecified -f: %v %v", dep, rev)
	}

	// Without --keep-unspecified the warning names what falls back, but
	// not what was given explicitly (even as false).
	r = h.run("daemon", "update", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:2", "--capacity-provider", "mi", "--enable-execute-command=false")
	if r.code != 0 || !strings.Contains(r.stderr, "propagate tags NONE") || strings.Contains(r.stderr, "execute command off") {
		t.Fatalf("update warning: exit %d\n%s", r.code, r.stderr)
	}
	h.fails(2, "--dry-run changes nothing", "daemon", "update", "cw", "--keep-unspecified", "--dry-run", "--wait")
	h.fails(2, "missing --task-definition", "daemon", "update", "cw", "--capacity-provider", "mi")
}

func TestDaemonRollback(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "mi", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon", "create", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "mi",
		"--drain-percent", "40", "--no-critical")
	h.fails(1, "InvalidParameterException: toRevisionArn: daemon arn:aws:ecs:us-east-1:123456789012:daemon/c/cw has no revision before its current one",
		"daemon", "rollback", "cw", "--cluster", "c")
	first := get(t, h.latestDeployment("cw"), "targetDaemonRevision", "arn").(string)
	h.ok("daemon", "update", "cw", "--cluster", "c", "--task-definition", "cloudwatch-agent:2", "--capacity-provider", "mi")
	second := get(t, h.latestDeployment("cw"), "targetDaemonRevision", "arn").(string)

	out := h.ok("daemon", "rollback", "cw", "--cluster", "c")
	if !hasLine(out, "Status:", "ACTIVE") || !strings.Contains(out, "daemon-deployment/c/cw/") {
		t.Fatalf("rollback:\n%s", out)
	}
	dep := h.latestDeployment("cw")
	target := get(t, dep, "targetDaemonRevision", "arn").(string)
	rev := h.revision(target)
	if target == first || !strings.HasSuffix(rev["td"].(string), "cloudwatch-agent:1") || rev["critical"] != false ||
		get(t, dep, "deploymentConfiguration", "drainPercent") != 40.0 {
		t.Fatalf("rollback deployment: %v %v", dep, rev)
	}
	// To a named revision, which must be this daemon's.
	m := h.okJSON("daemon", "rollback", "cw", "--cluster", "c", "--to-revision", first)
	if !strings.Contains(get(t, m, "deploymentArn").(string), "daemon-deployment/c/cw/") {
		t.Fatalf("rollback json: %v", m)
	}
	current := get(t, h.latestDeployment("cw"), "targetDaemonRevision", "arn").(string)
	if rev := h.revision(current); !strings.HasSuffix(rev["td"].(string), "cloudwatch-agent:1") {
		t.Fatalf("rollback to %s: %v", first, rev)
	}
	h.fails(1, "InvalidParameterException: toRevisionArn: revision "+current+" is the daemon's current revision",
		"daemon", "rollback", "cw", "--cluster", "c", "--to-revision", current)
	h.fails(1, "InvalidParameterException: toRevisionArn: revision arn:aws:ecs:us-east-1:123456789012:daemon-revision/c/other/1 belongs to daemon",
		"daemon", "rollback", "cw", "--cluster", "c", "--to-revision", "arn:aws:ecs:us-east-1:123456789012:daemon-revision/c/other/1")
	h.fails(2, "--to-revision \"nope\": no revision in the daemon's history has that ID, task definition or number",
		"daemon", "rollback", "cw", "--cluster", "c", "--to-revision", "nope")
	// A revision whose task definition is gone cannot come back.
	h.ok("daemon-task-definition", "delete", "cloudwatch-agent:2")
	h.fails(1, "ClientException: toRevisionArn: revision "+second+" cannot be deployed again: daemonTaskDefinitionArn:",
		"daemon", "rollback", "cw", "--cluster", "c", "--to-revision", second)
}

func TestRolloutStatus(t *testing.T) {
	defer func(d time.Duration) { rolloutPoll = d }(rolloutPoll)
	rolloutPoll = 50 * time.Millisecond
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "empty", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("capacity-provider", "create", "busy", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.registerManaged("c", "busy", 1024, 2048)

	// Nothing to replace: the deployment succeeds; exit 0.
	h.ok("daemon", "create", "quick", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "empty")
	r := h.run("daemon", "rollout", "status", "quick", "--cluster", "c", "--timeout", "30s")
	if r.code != 0 || !strings.Contains(r.stdout, "SUCCESSFUL") {
		t.Fatalf("rollout status of a finished deployment: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = h.run("daemon", "update", "quick", "--cluster", "c", "--keep-unspecified", "--wait", "--timeout", "30s")
	if r.code != 0 || !strings.Contains(r.stdout, "SUCCESSFUL") {
		t.Fatalf("update --wait: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// An instance without an agent never takes the daemon: the timeout
	// ends the wait (6), with one log line per change, not per poll.
	h.ok("daemon", "create", "slow", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "busy")
	first := get(t, h.okJSON("daemon", "describe", "slow", "--cluster", "c"), "daemon", "deploymentArn").(string)
	r = h.run("daemon", "rollout", "status", "slow", "--cluster", "c", "--timeout", "1s")
	if r.code != exitTimeout || !strings.Contains(r.stderr, "timed out after 1s; deployment "+lastSegment(first)+" is still") {
		t.Fatalf("rollout status timeout: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// About 20 polls; only changes print.
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) > 8 || !strings.Contains(lines[0], lastSegment(first)) ||
		!strings.Contains(lines[0], "busy 0/1 on target") {
		t.Fatalf("plain progress lines (1 s at 50 ms polls):\n%s", r.stdout)
	}
	// A superseded deployment ends STOPPED: exit 5.
	h.ok("daemon", "update", "slow", "--cluster", "c", "--keep-unspecified")
	r = h.run("daemon", "rollout", "status", "slow", "--cluster", "c", "--deployment", first, "-o", "json")
	if r.code != exitStopped || !strings.Contains(r.stderr, "deployment "+lastSegment(first)+" STOPPED") {
		t.Fatalf("rollout status of a superseded deployment: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc["status"] != "STOPPED" || doc["daemonDeploymentArn"] != first {
		t.Fatalf("rollout status -o json: %v\n%s", err, r.stdout)
	}
	h.fails(2, "want: rollout status NAME|ARN", "daemon", "rollout", "slow")
	h.fails(2, "--timeout needs --wait", "daemon", "rollback", "slow", "--timeout", "1s")
}

func TestRolloutRendering(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) epoch { return epoch{now.Add(d)} }
	r := &rollout{
		DaemonDeploymentArn: "arn:aws:ecs:us-east-1:123456789012:daemon-deployment/c/cw/DEP1", Status: "IN_PROGRESS",
		TargetDaemonRevisionArn: "arn:aws:ecs:us-east-1:123456789012:daemon-revision/c/cw/222", BatchSize: 2, Replaced: 1,
		CapacityProviders:       []rolloutCP{{Name: "mi", Instances: 4, OnTarget: 1, Draining: 2, Launching: 2, Remaining: 3}},
		CircuitBreaker:          &breakerView{FailureCount: 1, Threshold: 3, Status: "MONITORING"},
		Alarms:                  &alarmsView{Status: "MONITORING", AlarmNames: []string{"errors", "disk"}, IgnoredAlarmNames: []string{"disk"}},
		Stalled:                 &stallView{Kind: "REVISION_FAILING", Message: "2 of 2 new tasks stopped", Since: at(-45 * time.Second)},
		StopReasons:             []string{"Essential container in task exited"},
		ProgressDeadlineSeconds: 600, LastProgressAt: at(-2 * time.Minute), StartedAt: at(-3 * time.Minute),
	}
	line := rolloutLine(r)
	want := "IN_PROGRESS | mi 1/4 on target, 2 draining, 2 launching | breaker 1/3 | alarms MONITORING | " +
		"STALLED: the new revision fails (bad release): 2 of 2 new tasks stopped | last stop reason: Essential container in task exited"
	if line != want {
		t.Errorf("line:\n got %q\nwant %q", line, want)
	}
	block := strings.Join(rolloutBlock(r, now), "\n")
	for _, w := range []string{
		"Deployment DEP1  IN_PROGRESS  3m0s",
		"  Target revision:    222",
		"  Batch size:         2 (1 replaced)",
		"  mi                 1/4        2         2          3",
		"Circuit breaker:    1/3 failures (MONITORING)",
		"Alarms:             MONITORING: errors, disk; ignored (firing at start): disk",
		"STALLED for 45s:    the new revision fails (bad release)",
		"2 of 2 new tasks stopped",
		"Stop reasons:       Essential container in task exited",
		"Progress deadline:  8m0s left (last progress 2m0s ago)",
	} {
		if !hasLine(block, strings.Fields(w)...) {
			t.Errorf("block lacks %q:\n%s", w, block)
		}
	}

	// Baking: the line shows when it ends (no clock), the block what is left.
	r.Stalled, r.StopReasons, r.CapacityProviders[0] = nil, nil, rolloutCP{Name: "mi", Instances: 4, OnTarget: 4}
	r.BakeEndsAt = at(90 * time.Second)
	if l := rolloutLine(r); !strings.Contains(l, "mi 4/4 on target | breaker 1/3") || !strings.Contains(l, "baking until 12:01:30Z") {
		t.Errorf("baking line: %q", l)
	}
	if b := strings.Join(rolloutBlock(r, now), "\n"); !hasLine(b, "Bake:", "1m30s", "left") {
		t.Errorf("baking block:\n%s", b)
	}
	// A rollback names its target and its reason once it ends.
	r.Status, r.StatusReason = "ROLLBACK_SUCCESSFUL", "Circuit breaker triggered: 3 task launch failures."
	r.RollbackTargetDaemonRevisionArn = "arn:aws:ecs:us-east-1:123456789012:daemon-revision/c/cw/111"
	if l := rolloutLine(r); strings.Contains(l, "baking") || !strings.HasSuffix(l, "| Circuit breaker triggered: 3 task launch failures.") {
		t.Errorf("ended line: %q", l)
	}
	if b := strings.Join(rolloutBlock(r, now), "\n"); !hasLine(b, "Rolling", "back", "to:", "111") || strings.Contains(b, "Bake:") {
		t.Errorf("ended block:\n%s", b)
	}
}

func TestRolloutExitCodes(t *testing.T) {
	s := &session{stdout: &strings.Builder{}, g: globals{output: "table"}}
	for status, code := range map[string]int{"SUCCESSFUL": exitOK, "ROLLBACK_SUCCESSFUL": exitRolledBack, "ROLLBACK_FAILED": exitRollbackFailed, "STOPPED": exitStopped} {
		err := outcome(s, &rollout{DaemonDeploymentArn: "x/DEP", Status: status})
		got := exitOK
		if es, ok := err.(*exitStatus); ok {
			got = es.code
		}
		if got != code {
			t.Errorf("%s: exit %d, want %d", status, got, code)
		}
	}
}

func TestRolloutFromDeployment(t *testing.T) {
	cp := "arn:aws:ecs:us-east-1:123456789012:capacity-provider/mi"
	d := types.DaemonDeployment{
		DaemonDeploymentArn: aws.String("arn:dep/D"), Status: types.DaemonDeploymentStatusInProgress,
		TargetDaemonRevision: &types.DaemonDeploymentRevisionDetail{Arn: aws.String("arn:rev/2"), CapacityProviders: []types.DaemonDeploymentCapacityProvider{
			{Arn: aws.String(cp), RunningInstanceCount: aws.Int32(2), DrainingInstanceCount: aws.Int32(0), WithoutDaemonInstanceCount: aws.Int32(1)}}},
		SourceDaemonRevisions: []types.DaemonDeploymentRevisionDetail{{Arn: aws.String("arn:rev/1"), CapacityProviders: []types.DaemonDeploymentCapacityProvider{
			{Arn: aws.String(cp), RunningInstanceCount: aws.Int32(3), DrainingInstanceCount: aws.Int32(1)}}}},
		CircuitBreaker:          &types.DaemonCircuitBreaker{FailureCount: 2, Threshold: 3, Status: "MONITORING"},
		Alarms:                  &types.DaemonDeploymentAlarms{Status: "TRIGGERED", TriggeredAlarmNames: []string{"errors"}},
		Rollback:                &types.DaemonRollback{RollbackTargetDaemonRevisionArn: aws.String("arn:rev/1")},
		DeploymentConfiguration: &types.DaemonDeploymentConfiguration{BakeTimeInMinutes: 3},
	}
	r := rolloutFromDeployment("arn:daemon", d)
	c := r.CapacityProviders
	if len(c) != 1 || c[0].Name != "mi" || c[0].Instances != 7 || c[0].OnTarget != 2 || c[0].Draining != 1 || c[0].Remaining != 5 {
		t.Fatalf("capacity providers: %+v", c)
	}
	if r.CircuitBreaker.FailureCount != 2 || r.Alarms.TriggeredAlarmNames[0] != "errors" || r.RollbackTargetDaemonRevisionArn != "arn:rev/1" ||
		r.BakeTimeInMinutes != 3 || !r.legacy {
		t.Fatalf("rollout: %+v", r)
	}
	// The legacy block has no launching/remaining columns it cannot know.
	if b := strings.Join(rolloutBlock(&r, time.Now()), "\n"); strings.Contains(b, "LAUNCHING") || !strings.Contains(b, "7") {
		t.Fatalf("legacy block:\n%s", b)
	}
}

func TestKeepUnspecifiedMerge(t *testing.T) {
	cur := &ecs.UpdateDaemonInput{DaemonArn: aws.String("d"), DaemonTaskDefinitionArn: aws.String("td:1"), CapacityProviderArns: []string{"a"},
		DeploymentConfiguration: &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(50), BakeTimeInMinutes: 2,
			Alarms: &types.DaemonAlarmConfiguration{AlarmNames: []string{"x"}, Enable: true}},
		Critical: aws.Bool(false), PropagateTags: "DAEMON", EnableECSManagedTags: true, EnableExecuteCommand: true}
	in := &ecs.UpdateDaemonInput{DaemonTaskDefinitionArn: aws.String("td:2"), Critical: aws.Bool(true)}
	kept := keepUnspecified(in, cur, map[string]bool{setTaskDef: true, setCritical: true, setExecute: true})
	if aws.ToString(in.DaemonTaskDefinitionArn) != "td:2" || !aws.ToBool(in.Critical) || in.EnableExecuteCommand ||
		in.CapacityProviderArns[0] != "a" || aws.ToFloat64(in.DeploymentConfiguration.DrainPercent) != 50 ||
		in.DeploymentConfiguration.BakeTimeInMinutes != 2 || in.DeploymentConfiguration.Alarms.AlarmNames[0] != "x" ||
		in.PropagateTags != "DAEMON" || !in.EnableECSManagedTags {
		t.Fatalf("merged: %+v %+v", in, in.DeploymentConfiguration)
	}
	if len(kept) != 6 || kept[setTaskDef] || kept[setExecute] || !kept[setBake] {
		t.Fatalf("kept: %v", kept)
	}
	// Kept settings are never reported as defaulted, whatever their value.
	if d := defaultedSettings(&ecs.UpdateDaemonInput{}, kept); strings.Join(d, ", ") != "critical true, execute command off" {
		t.Fatalf("defaulted: %v", d)
	}
}

func TestRolloutRedrawsOnTerminal(t *testing.T) {
	var out strings.Builder
	s := &session{stdout: &out, g: globals{output: "table"}}
	f := &follower{s: s, tty: true}
	r := &rollout{DaemonDeploymentArn: "x/DEP", Status: "IN_PROGRESS", CapacityProviders: []rolloutCP{{Name: "mi", Instances: 2}}}
	now := time.Now()
	f.show(r, nil, now)
	first := out.String()
	n := strings.Count(first, "\n")
	if strings.Contains(first, "\x1b[") || n != f.drawn {
		t.Fatalf("first draw (%d lines, drawn %d): %q", n, f.drawn, first)
	}
	// Redrawn even without a change (clocks move); from the block's top.
	f.show(r, nil, now.Add(time.Second))
	if second := strings.TrimPrefix(out.String(), first); !strings.HasPrefix(second, fmt.Sprintf("\x1b[%dA\x1b[J", n)) {
		t.Fatalf("redraw: %q", second)
	}
	// Without a terminal: a line only when something changed.
	out.Reset()
	f = &follower{s: s}
	f.show(r, nil, now)
	f.show(r, nil, now.Add(time.Second))
	r.CapacityProviders[0].OnTarget = 1
	f.show(r, nil, now.Add(2*time.Second))
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "mi 1/2 on target") {
		t.Fatalf("plain lines:\n%s", out.String())
	}
}
