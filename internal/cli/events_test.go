package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// syncBuffer is written by a command running in another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) registerInstance(cluster string) string {
	h.t.Helper()
	out, err := h.srv.ECS().RegisterContainerInstance(context.Background(), &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String(cluster),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 2048},
		},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return aws.ToString(out.ContainerInstance.ContainerInstanceArn)
}

func (h *harness) setInstanceState(cluster, arn string, status types.ContainerInstanceStatus) {
	h.t.Helper()
	_, err := h.srv.ECS().UpdateContainerInstancesState(context.Background(), &ecs.UpdateContainerInstancesStateInput{
		Cluster: aws.String(cluster), ContainerInstances: []string{arn}, Status: status})
	if err != nil {
		h.t.Fatal(err)
	}
}

func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		evs = append(evs, m)
	}
	return evs
}

func TestEvents(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "ev")
	inst := h.registerInstance("ev")
	short := inst[strings.Index(inst, "container-instance/"):]

	out := h.ok("events", "--cluster", "ev")
	if !hasLine(out, "TIME", "TYPE", "RESOURCE", "SUMMARY") || !strings.Contains(out, "ECS Container Instance State Change") ||
		!strings.Contains(out, short) || !strings.Contains(out, "ACTIVE, agent disconnected") {
		t.Fatalf("table:\n%s", out)
	}
	evs := jsonLines(t, h.ok("events", "--cluster", "ev", "-o", "json"))
	if len(evs) != 1 || evs[0]["detail-type"] != "ECS Container Instance State Change" || evs[0]["source"] != "aws.ecs" ||
		get(t, evs[0], "detail", "containerInstanceArn") != inst {
		t.Fatalf("json lines: %v", evs)
	}
	if out := h.ok("events", "--cluster", "ev", "--type", "task", "-o", "json"); strings.TrimSpace(out) != "" {
		t.Fatalf("task events where there are none:\n%s", out)
	}
	h.fails(2, `--type "bogus"`, "events", "--cluster", "ev", "--type", "bogus")
	h.fails(1, "ClusterNotFoundException", "events", "--cluster", "nope")
	if out := h.ok("events", "-h"); !strings.Contains(out, "Usage: capstan events [--cluster C]") || !strings.Contains(out, "--follow") {
		t.Fatalf("help:\n%s", out)
	}

	// A daemon's events, found by name; its deployment settles on its own.
	h.ok("capacity-provider", "create", "mi", "--cluster", "ev", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	h.ok("daemon", "create", "cw", "--cluster", "ev", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "mi")
	waitFor(t, "the daemon's deployment events", func() bool {
		return strings.Contains(h.ok("events", "--daemon", "cw", "--cluster", "ev"), "DAEMON_DEPLOYMENT_SUCCESSFUL")
	})
	out = h.ok("events", "--daemon", "arn:aws:ecs:us-east-1:123456789012:daemon/ev/cw", "--type", "deployment")
	if strings.Contains(out, "Container Instance") || !hasLine(out, "TIME", "TYPE") {
		t.Fatalf("daemon events:\n%s", out)
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "DAEMON_DEPLOYMENT_") {
				names = append(names, f)
			}
		}
	}
	if strings.Join(names, " ") != "DAEMON_DEPLOYMENT_PENDING DAEMON_DEPLOYMENT_IN_PROGRESS DAEMON_DEPLOYMENT_SUCCESSFUL" {
		t.Fatalf("deployment events %v:\n%s", names, out)
	}
}

func TestEventsFollow(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "ev")
	inst := h.registerInstance("ev")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"events", "--cluster", "ev", "--follow", "-o", "json"}, func(k string) string { return h.env[k] },
			strings.NewReader(""), &stdout, &stderr)
	}()
	waitFor(t, "the registration event", func() bool { return strings.Contains(stdout.String(), `"status":"ACTIVE"`) })

	h.setInstanceState("ev", inst, types.ContainerInstanceStatusDraining)
	waitFor(t, "the drain event", func() bool { return strings.Contains(stdout.String(), `"status":"DRAINING"`) })
	h.setInstanceState("ev", inst, types.ContainerInstanceStatusActive)
	waitFor(t, "the activation event", func() bool { return len(jsonLines(t, stdout.String())) == 3 })

	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("follow exited %d: %s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not stop when cancelled")
	}
	evs := jsonLines(t, stdout.String())
	var statuses []string
	for _, e := range evs {
		statuses = append(statuses, get(t, e, "detail", "status").(string))
	}
	if strings.Join(statuses, " ") != "ACTIVE DRAINING ACTIVE" {
		t.Fatalf("followed %v", statuses)
	}
	if stderr.String() != "" {
		t.Fatalf("stderr: %s", stderr.String())
	}
}
