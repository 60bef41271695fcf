package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// awsJSON runs the AWS CLI against the harness's server and decodes its
// output: the view the new nouns are held to.
func (h *harness) awsJSON(args ...string) map[string]any {
	h.t.Helper()
	path := testenv.RequireBinary(h.t, "awscli", "aws")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, "--endpoint-url", h.srv.URL, "--output", "json")...)
	cmd.Env = h.srv.Env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		h.t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	m := map[string]any{}
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		h.t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return m
}

func strs(t *testing.T, v any) []string {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("not a list: %v", v)
	}
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	slices.Sort(out)
	return out
}

// The task, service and instance nouns show what the AWS CLI shows of the
// same objects, and the cluster's counts follow them.
func TestTaskServiceInstanceNouns(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	_, err := h.srv.ECS().RegisterTaskDefinition(context.Background(), &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String(testenv.BusyboxImage(t)),
			Memory: aws.Int32(32), Essential: aws.Bool(true), Command: []string{"sleep", "3600"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// One instance with a real agent (on Docker), one registered without,
	// and one of capacity provider mi, which runs daemon tick.
	i1 := agents.Start(t, h.srv, "c").InstanceArn
	i2 := h.registerInstance("c")
	h.ok("capacity-provider", "create", "mi", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	td, err := h.srv.ECS().RegisterDaemonTaskDefinition(context.Background(), &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("tick"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("tick"), Image: aws.String(testenv.BusyboxImage(t)),
			Memory: aws.Int32(16), Command: []string{"sleep", "3600"}}}})
	if err != nil {
		t.Fatal(err)
	}
	h.ok("daemon", "create", "tick", "--cluster", "c", "--task-definition", aws.ToString(td.DaemonTaskDefinitionArn),
		"--capacity-provider", "mi", "--no-critical")
	i3 := agents.StartEnv(t, agents.EnvFor(t, h.srv, "c", "mi", t.TempDir()), nil).InstanceArn

	// Services.
	out := h.ok("service", "create", "web", "--cluster", "c", "--task-definition", "web", "--desired-count", "2", "--wait", "--timeout", "90s")
	if !hasLine(out, "web", "ACTIVE", "2") || !strings.Contains(out, "(web:1): COMPLETED, 2 of 2 running, 0 pending, 0 failed") {
		t.Fatalf("service create:\n%s", out)
	}
	mine := h.okJSON("service", "describe", "web", "--cluster", "c")
	theirs := h.awsJSON("ecs", "describe-services", "--cluster", "c", "--services", "web")
	for _, f := range []string{"serviceArn", "status", "desiredCount", "taskDefinition", "launchType"} {
		if a, b := get(t, mine, "services", 0, f), get(t, theirs, "services", 0, f); a != b {
			t.Fatalf("service %s: capstan %v, aws %v", f, a, b)
		}
	}
	if got, want := strs(t, h.okJSON("service", "list", "--cluster", "c")["serviceArns"]), strs(t, h.awsJSON("ecs", "list-services", "--cluster", "c")["serviceArns"]); !slices.Equal(got, want) || len(got) != 1 {
		t.Fatalf("service list %v, aws %v", got, want)
	}
	out = h.ok("service", "status", "web", "--cluster", "c")
	if !strings.Contains(out, "Service web: ACTIVE, 2 desired") || !hasLine(out, "DEPLOYMENT", "STATUS", "TASK", "DEFINITION") || !strings.Contains(out, "PRIMARY  web:1") {
		t.Fatalf("service status:\n%s", out)
	}

	// Tasks: one run by hand beside the service's (and the daemon's).
	run := h.okJSON("task", "run", "web:1", "--cluster", "c", "--started-by", "me")
	taskArn := get(t, run, "tasks", 0, "taskArn").(string)
	var listed []string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		listed = strs(t, h.okJSON("task", "list", "--cluster", "c")["taskArns"])
		table := h.ok("task", "list", "--cluster", "c")
		running := 0
		for _, line := range strings.Split(table, "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[2] == "RUNNING" {
				running++
			}
		}
		if len(listed) == 4 && running == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for 4 RUNNING tasks:\n%s\n%s", table, h.ok("service", "status", "web", "--cluster", "c"))
		}
	}
	if want := strs(t, h.awsJSON("ecs", "list-tasks", "--cluster", "c")["taskArns"]); !slices.Equal(listed, want) {
		t.Fatalf("task list %v, aws %v", listed, want)
	}
	if got := strs(t, h.okJSON("task", "list", "--cluster", "c", "--daemon", "tick")["taskArns"]); len(got) != 1 {
		t.Fatalf("task list --daemon tick: %v", got)
	}
	if got := strs(t, h.okJSON("task", "list", "--cluster", "c", "--started-by", "me")["taskArns"]); !slices.Equal(got, []string{taskArn}) {
		t.Fatalf("task list --started-by me: %v, want %s", got, taskArn)
	}
	if got := strs(t, h.okJSON("task", "list", "--cluster", "c", "--service", "web")["taskArns"]); len(got) != 2 || slices.Contains(got, taskArn) {
		t.Fatalf("task list --service web: %v", got)
	}
	id := lastSegment(taskArn)
	mine = h.okJSON("task", "describe", id, "--cluster", "c")
	theirs = h.awsJSON("ecs", "describe-tasks", "--cluster", "c", "--tasks", id)
	for _, f := range []string{"taskArn", "lastStatus", "desiredStatus", "taskDefinitionArn", "group", "startedBy", "containerInstanceArn"} {
		if a, b := get(t, mine, "tasks", 0, f), get(t, theirs, "tasks", 0, f); a != b {
			t.Fatalf("task %s: capstan %v, aws %v", f, a, b)
		}
	}
	out = h.ok("task", "describe", id, "--cluster", "c")
	if !hasLine(out, "Task:", id) || !hasLine(out, "Task", "definition:", "web:1") || !hasLine(out, "Started", "by:", "me") || !hasLine(out, "CONTAINER", "IMAGE") {
		t.Fatalf("task describe:\n%s", out)
	}
	out = h.ok("task", "list", "--cluster", "c")
	if !hasLine(out, "TASK", "GROUP") || !hasLine(out, id, "family:web") {
		t.Fatalf("task list table:\n%s", out)
	}

	// Instances.
	if got, want := strs(t, h.okJSON("instance", "list", "--cluster", "c")["containerInstanceArns"]), strs(t, h.awsJSON("ecs", "list-container-instances", "--cluster", "c")["containerInstanceArns"]); !slices.Equal(got, want) || len(got) != 3 {
		t.Fatalf("instance list %v, aws %v", got, want)
	}
	out = h.ok("instance", "list", "--cluster", "c")
	if !hasLine(out, "INSTANCE", "STATUS", "AGENT", "DAEMONS", "RUNNING", "PENDING", "FREE", "CPU") ||
		!hasLine(out, lastSegment(i1), "ACTIVE", "connected", "0/0") || !hasLine(out, lastSegment(i2), "ACTIVE", "disconnected", "0/0", "0", "0", "1024", "2048") ||
		!hasLine(out, lastSegment(i3), "ACTIVE", "connected", "1/1") {
		t.Fatalf("instance list table:\n%s", out)
	}
	sum := 0
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) > 4 {
			n, _ := strconv.Atoi(f[4])
			sum += n
		}
	}
	if sum != 4 {
		t.Fatalf("RUNNING column adds up to %d, want 4:\n%s", sum, out)
	}
	h.ok("instance", "drain", lastSegment(i2), "--cluster", "c")
	theirs = h.awsJSON("ecs", "describe-container-instances", "--cluster", "c", "--container-instances", i2)
	if get(t, theirs, "containerInstances", 0, "status") != "DRAINING" {
		t.Fatalf("after drain, aws sees %v", get(t, theirs, "containerInstances", 0, "status"))
	}
	out = h.ok("instance", "describe", lastSegment(i2), "--cluster", "c")
	if !hasLine(out, "Status:", "DRAINING") || !hasLine(out, "Agent", "connected:", "false") || !hasLine(out, "Daemons", "running:", "0", "of", "0") || !hasLine(out, "Free", "CPU:") {
		t.Fatalf("instance describe:\n%s", out)
	}
	h.ok("instance", "activate", i2, "--cluster", "c")
	theirs = h.awsJSON("ecs", "describe-container-instances", "--cluster", "c", "--container-instances", i2)
	if get(t, theirs, "containerInstances", 0, "status") != "ACTIVE" {
		t.Fatalf("after activate, aws sees %v", get(t, theirs, "containerInstances", 0, "status"))
	}

	// The cluster's counts, through the CLI and the AWS CLI.
	theirs = h.awsJSON("ecs", "describe-clusters", "--clusters", "c")
	mine = h.okJSON("cluster", "describe", "c")
	for _, f := range []string{"registeredContainerInstancesCount", "activeServicesCount", "runningTasksCount", "pendingTasksCount"} {
		if a, b := get(t, mine, "clusters", 0, f), get(t, theirs, "clusters", 0, f); a != b {
			t.Fatalf("cluster %s: capstan %v, aws %v", f, a, b)
		}
	}
	if get(t, theirs, "clusters", 0, "registeredContainerInstancesCount") != 3.0 || get(t, theirs, "clusters", 0, "activeServicesCount") != 1.0 {
		t.Fatalf("cluster counts: %v", theirs)
	}
	if get(t, theirs, "clusters", 0, "runningTasksCount") != 4.0 || get(t, theirs, "clusters", 0, "pendingTasksCount") != 0.0 {
		t.Fatalf("running and pending tasks: %v", theirs)
	}
	if out := h.ok("cluster", "list"); !hasLine(out, "c", "ACTIVE", "3", "4", "0", "1") {
		t.Fatalf("cluster list:\n%s", out)
	}

	// Stopping and deleting.
	h.ok("task", "stop", id, "--cluster", "c", "--reason", "done with it")
	theirs = h.awsJSON("ecs", "describe-tasks", "--cluster", "c", "--tasks", id)
	if get(t, theirs, "tasks", 0, "desiredStatus") != "STOPPED" || get(t, theirs, "tasks", 0, "stoppedReason") != "done with it" {
		t.Fatalf("after stop, aws sees %v", theirs)
	}
	h.ok("service", "update", "web", "--cluster", "c", "--desired-count", "0")
	if got := get(t, h.awsJSON("ecs", "describe-services", "--cluster", "c", "--services", "web"), "services", 0, "desiredCount"); got != 0.0 {
		t.Fatalf("after update, aws sees desiredCount %v", got)
	}
	h.ok("service", "delete", "web", "--cluster", "c")
	if got := get(t, h.awsJSON("ecs", "describe-services", "--cluster", "c", "--services", "web"), "services", 0, "status"); got == "ACTIVE" {
		t.Fatalf("after delete, aws sees status %v", got)
	}

	// Bad input.
	h.fails(2, "--status \"bogus\": want one of RUNNING, PENDING, STOPPED", "task", "list", "--status", "bogus")
	h.fails(2, "missing --task-definition", "service", "create", "api", "--cluster", "c")
	h.fails(2, "nothing to change", "service", "update", "web", "--cluster", "c")
	h.fails(1, "capstan: InvalidParameterException: ", "task", "stop", "nosuch", "--cluster", "c")
	h.fails(1, "capstan: MISSING: service arn:aws:ecs:us-east-1:123456789012:service/c/nosuch", "service", "status", "nosuch", "--cluster", "c")
	h.fails(1, "capstan: InvalidParameterException: ", "instance", "drain", "nosuch", "--cluster", "c")
}
