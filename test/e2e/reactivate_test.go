package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/coverage"
)

// TestReactivateHeldMachineDaemonFirst: a joined machine whose critical
// daemon keeps failing is held DRAINING by auto-repair. An operator
// activates it with the AWS CLI once the cause is gone: the answer is
// REGISTERING, the daemon starts again, the machine turns ACTIVE and only
// then takes the service task that waited for room. The event history
// shows no app task beside no critical daemon.
func TestReactivateHeldMachineDaemonFirst(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	r := &rollout{fleet: f, cp: "own", service: "web", desired: 1}
	r.cpArn = f.capacityProvider(r.cp)
	// The daemon fails to start while the host has /flag/fail: a cause
	// outside Capstan, which an operator clears before activating.
	flags := t.TempDir()
	td, err := f.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agentd"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agentd"), Image: aws.String(f.image), Memory: aws.Int32(32),
			Command:     []string{"sh", "-c", "if [ -e /flag/fail ]; then echo failing; exit 1; fi; " + loop},
			MountPoints: []types.MountPoint{{SourceVolume: aws.String("flags"), ContainerPath: aws.String("/flag"), ReadOnly: aws.Bool(true)}}}},
		Volumes: []types.DaemonVolume{{Name: aws.String("flags"), Host: &types.HostVolumeProperties{SourcePath: aws.String(flags)}}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("agentd"), ClusterArn: aws.String(f.cluster),
		DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn, CapacityProviderArns: []string{r.cpArn}, Critical: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	r.daemonArn = aws.ToString(d.DaemonArn)

	out, _ := f.capstanOK("instance", "join", "--cluster", f.cluster, "--capacity-provider", r.cp, "--count", "2")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		startJoinLine(t, l)
	}
	eventually(t, 3*time.Minute, "2 joined instances ACTIVE", func() bool { return len(r.activeInstances()) == 2 })
	// 700 MiB of 1024: one service task per machine.
	c := f.container("web", "sh", "-c", loop)
	c.Memory = aws.Int32(700)
	web := f.register("web", c)
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String(r.service),
		TaskDefinition: aws.String(web), DesiredCount: aws.Int32(1),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(r.cp)}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "service RUNNING", func() bool { return len(r.runningApps()) == 1 })
	r.begin = time.Now()

	// The victim runs the app task; its daemon dies and cannot start again.
	victim := aws.ToString(r.runningApps()[0].ContainerInstanceArn)
	if err := os.WriteFile(filepath.Join(flags, "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	killDaemonOn(t, r, victim)
	eventually(t, 3*time.Minute, "auto-repair gives up and holds the machine", func() bool {
		in := f.instance(victim)
		return aws.ToString(in.Status) == "DRAINING" && strings.HasPrefix(aws.ToString(in.StatusReason), "Auto-repair failed")
	})
	eventually(t, time.Minute, "the service task moved off the held machine", func() bool {
		apps := r.runningApps()
		return len(apps) == 1 && aws.ToString(apps[0].ContainerInstanceArn) != victim
	})
	// A second service task has room only on the held machine: it waits.
	if _, err := f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(f.cluster), Service: aws.String(r.service), DesiredCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	r.desired = 2
	time.Sleep(3 * time.Second)
	if n := len(r.runningApps()); n != 1 {
		t.Fatalf("%d service tasks RUNNING while the only machine with room is held, want 1", n)
	}

	// The cause fixed, the operator activates the machine.
	if err := os.Remove(filepath.Join(flags, "fail")); err != nil {
		t.Fatal(err)
	}
	activated := time.Now()
	stdout, stderr, err := runAWS(t, f.srv.Env(), "ecs", "update-container-instances-state", "--cluster", f.cluster,
		"--container-instances", victim, "--status", "ACTIVE", "--endpoint-url", f.srv.URL, "--region", "us-east-1", "--output", "json")
	if err != nil {
		t.Fatalf("aws ecs update-container-instances-state: %v\n%s", err, stderr)
	}
	var answer struct {
		ContainerInstances []struct{ Status, StatusReason string }
		Failures           []any
	}
	if err := json.Unmarshal([]byte(stdout), &answer); err != nil || len(answer.ContainerInstances) != 1 || len(answer.Failures) != 0 {
		t.Fatalf("answer %s: %v", stdout, err)
	}
	if got := answer.ContainerInstances[0]; got.Status != "REGISTERING" || got.StatusReason != "" {
		t.Fatalf("answer: status %q reason %q, want REGISTERING (its critical daemon does not run yet), the hold cleared", got.Status, got.StatusReason)
	}
	eventually(t, 2*time.Minute, "the machine ACTIVE with its daemon, then the waiting task on it", func() bool {
		return aws.ToString(f.instance(victim).Status) == "ACTIVE" && len(r.runningApps()) == 2
	})
	var daemonStarted time.Time
	for _, dt := range f.daemonTasks("agentd", "RUNNING") {
		if aws.ToString(dt.ContainerInstanceArn) == victim {
			daemonStarted = aws.ToTime(dt.StartedAt)
		}
	}
	if daemonStarted.IsZero() || daemonStarted.Before(activated) {
		t.Fatalf("no daemon task started on %s since the activation (started %v)", victim, daemonStarted)
	}
	for _, app := range r.runningApps() {
		if aws.ToString(app.ContainerInstanceArn) == victim && !aws.ToTime(app.StartedAt).After(daemonStarted) {
			t.Errorf("app %s started at %v, before the daemon at %v", aws.ToString(app.TaskArn), app.StartedAt, daemonStarted)
		}
	}

	// From the record: REGISTERING then ACTIVE after the activation, and no
	// app task beside no critical daemon on any machine.
	to := time.Now()
	h := r.history()
	var seen []string
	for _, st := range h.Instance(victim).States {
		if !st.At.Before(activated) {
			seen = append(seen, st.Status)
		}
	}
	if len(seen) < 2 || seen[0] != "REGISTERING" || seen[len(seen)-1] != "ACTIVE" {
		t.Errorf("states of %s since the activation: %v, want REGISTERING … ACTIVE", victim, seen)
	}
	dm := []coverage.Daemon{{Name: "agentd", Arn: r.daemonArn, Critical: true, CPs: []string{r.cp}, Created: r.begin.Add(-time.Hour)}}
	if gaps := h.Gaps(dm, r.begin, to, coverage.Options{InferRepair: true}); len(gaps) > 0 {
		t.Errorf("coverage gaps: %+v", gaps)
	}
}

// killDaemonOn kills the container of the daemon task RUNNING on
// instance, and returns the task's ARN.
func killDaemonOn(t *testing.T, r *rollout, instance string) string {
	t.Helper()
	arn := ""
	for _, dt := range r.daemonTasks("agentd", "RUNNING") {
		if aws.ToString(dt.ContainerInstanceArn) == instance {
			arn = aws.ToString(dt.TaskArn)
		}
	}
	out, err := exec.Command("docker", "ps", "-q", "--filter", "label=com.capstan.task-arn="+arn).Output()
	id := strings.TrimSpace(string(out))
	if err != nil || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("daemon container of %s: %q %v", arn, id, err)
	}
	if out, err := exec.Command("docker", "kill", id).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	return arn
}
