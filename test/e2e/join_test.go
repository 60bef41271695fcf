package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/coverage"
	"github.com/capstanhq/capstan/internal/testenv"
)

// startJoinLine runs one line `capstan instance join` printed, through a
// shell as a user would paste it, as a separate agent process. The test
// adds only what sharing one host needs (a data dir and the instance's
// size each), under the line's own settings.
func startJoinLine(t *testing.T, line string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", line)
	// Its own process group: the shell and the agent are killed together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(testenv.CapstanBinary(t))+":"+os.Getenv("PATH"),
		"ECS_DATADIR="+dir, "CAPSTAN_METRICS_ADDR=127.0.0.1:0", "CAPSTAN_METADATA_ADDR=0.0.0.0:0",
		"ECS_IMAGE_PULL_BEHAVIOR=prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT=5s",
		"CAPSTAN_INSTANCE_CPU=1024", "CAPSTAN_INSTANCE_MEMORY=1024")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("agent log:\n%s", log.String())
		}
		removeInstanceOf(t, dir)
	})
}

// TestJoinedMachinesRolloutInPlace: three machines join a capacity
// provider with the lines `capstan instance join` prints; each gets the
// critical daemon before anything else, the service runs on them, and a
// daemon rollout (drainPercent 33: one machine at a time) changes them in
// place: no machine is replaced, each is drained of its app task (started
// elsewhere first) before its daemon is replaced, then activated again.
// The event history shows no app task beside no critical daemon, the
// service never below its desired count, and at most one machine drained.
// Then a machine's daemon is killed and auto-repair mends it in place.
func TestJoinedMachinesRolloutInPlace(t *testing.T) {
	joinedRollout(t, 33, 1)
}

// TestJoinedMachinesRolloutInPlaceTwoAtATime: the same with drainPercent
// 66, two of the three machines changed at once. Both drained machines
// hold a service task and only the third has room, so one task can move
// only once the other drained machine is ACTIVE again: the rollout must
// not stall on it.
func TestJoinedMachinesRolloutInPlaceTwoAtATime(t *testing.T) {
	joinedRollout(t, 66, 2)
}

// joinedRollout joins three machines, runs a service of two tasks on them
// (one per machine) and rolls the critical daemon out in place with
// drainPercent, checking from the event history that at most window
// machines drained at once.
func joinedRollout(t *testing.T, drainPercent float64, window int) {
	ctx := context.Background()
	f := newFleet(t)
	r := &rollout{fleet: f, cp: "own", service: "web", desired: 2}
	r.cpArn = f.capacityProvider(r.cp)
	r.daemonArn = f.daemon("agentd", r.cpArn, true, "sh", "-c", loop)

	out, _ := f.capstanOK("instance", "join", "--cluster", f.cluster, "--capacity-provider", r.cp, "--count", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("join printed %d lines, want 3:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, " capstan agent") || !strings.Contains(l, "CAPSTAN_ENDPOINT="+f.srv.URL) || !strings.Contains(l, "ECS_CLUSTER="+f.cluster) {
			t.Fatalf("join line %q", l)
		}
		startJoinLine(t, l)
	}
	eventually(t, 3*time.Minute, "3 joined instances ACTIVE", func() bool { return len(r.activeInstances()) == 3 })
	before := r.instanceArns()
	// Daemon first: each instance's daemon task started before it was ACTIVE
	// (the instance waited REGISTERING for it).
	dts := f.daemonTasks("agentd", "RUNNING")
	if len(dts) != 3 {
		t.Fatalf("%d daemon tasks RUNNING on 3 joined instances", len(dts))
	}

	// 700 MiB of 1024: one service task per machine, the third has room.
	c := f.container("web", "sh", "-c", loop)
	c.Memory = aws.Int32(700)
	td := f.register("web", c)
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String(r.service),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(int32(r.desired)),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(r.cp)}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "service RUNNING on joined machines", func() bool { return len(r.runningApps()) == r.desired })
	for _, app := range r.runningApps() {
		for _, dt := range dts {
			if aws.ToString(dt.ContainerInstanceArn) == aws.ToString(app.ContainerInstanceArn) && !dt.StartedAt.Before(*app.StartedAt) {
				t.Errorf("app %s started before the daemon on its instance", aws.ToString(app.TaskArn))
			}
		}
	}

	r.begin = time.Now()
	rev := r.newRevision("sh", "-c", "echo v2; "+loop)
	depArn := r.update(rev, &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(drainPercent)})
	dep := r.waitDeployment(depArn, 8*time.Minute, types.DaemonDeploymentStatusSuccessful, types.DaemonDeploymentStatusRollbackSuccessful, types.DaemonDeploymentStatusStopped)
	if dep.Status != types.DaemonDeploymentStatusSuccessful {
		t.Fatalf("deployment %s: %s", dep.Status, aws.ToString(dep.StatusReason))
	}
	r.onRevision(aws.ToString(dep.TargetDaemonRevision.Arn), 3)
	// In place: the same machines, all ACTIVE again.
	if after := r.instanceArns(); !slices.Equal(after, before) {
		t.Errorf("instances before %v, after %v: joined machines must not be replaced", before, after)
	}
	eventually(t, time.Minute, "service back to its desired count", func() bool { return len(r.runningApps()) == r.desired })
	// From the record: no app task beside no critical daemon, the service
	// never below its desired count, and window machines drained at a time,
	// each drained and activated again by the rollout.
	to := time.Now()
	h := r.history()
	d := []coverage.Daemon{{Name: "agentd", Arn: r.daemonArn, Critical: true, CPs: []string{r.cp}, Created: r.begin.Add(-time.Hour)}}
	if gaps := h.Gaps(d, r.begin, to, coverage.Options{}); len(gaps) > 0 {
		t.Errorf("coverage gaps: %+v", gaps)
	}
	if n := h.MinRunning("service:"+r.service, r.begin, to); n < r.desired {
		t.Errorf("service had %d tasks RUNNING at some moment, desired %d", n, r.desired)
	}
	type span struct{ from, to time.Time }
	var spans []span
	for _, in := range h.Instances() {
		var since time.Time
		for _, st := range in.States {
			switch {
			case st.At.Before(r.begin):
			case st.Status == "DRAINING" && since.IsZero():
				since = st.At
			case st.Status == "ACTIVE" && !since.IsZero():
				spans = append(spans, span{since, st.At})
				since = time.Time{}
			}
		}
		if !since.IsZero() {
			t.Errorf("instance %s still DRAINING after the rollout", in.Arn)
		}
	}
	if len(spans) != 3 {
		t.Errorf("%d drain-and-activate spans, want one per machine: %+v", len(spans), spans)
	}
	// The most machines drained at one moment is the window: never more,
	// and the rollout used all of it.
	most := 0
	for _, a := range spans {
		n := 0
		for _, b := range spans {
			if !b.from.After(a.from) && a.from.Before(b.to) {
				n++
			}
		}
		most = max(most, n)
	}
	if most != window {
		t.Errorf("at most %d machines drained at once, want the window, %d: %+v", most, window, spans)
	}
	if window == 1 && !t.Failed() {
		joinedAutoRepair(t, r, before)
	}
}

// joinedAutoRepair kills the critical daemon's container on a machine
// that runs a service task: auto-repair drains the machine in place (the
// task moves off), restarts the daemon and activates the machine again,
// which stays registered; the record shows the repair and no app task
// beside no critical daemon while the machine served.
func joinedAutoRepair(t *testing.T, r *rollout, machines []string) {
	apps := r.runningApps()
	if len(apps) == 0 {
		t.Fatal("no service task to repair under")
	}
	victim := aws.ToString(apps[0].ContainerInstanceArn)
	begin := time.Now()
	old := killDaemonOn(t, r, victim)
	eventually(t, 3*time.Minute, "the machine repaired in place: ACTIVE with a new daemon task", func() bool {
		if aws.ToString(r.instance(victim).Status) != "ACTIVE" {
			return false
		}
		for _, dt := range r.daemonTasks("agentd", "RUNNING") {
			if aws.ToString(dt.ContainerInstanceArn) == victim && aws.ToString(dt.TaskArn) != old {
				return true
			}
		}
		return false
	})
	eventually(t, time.Minute, "service back to its desired count", func() bool { return len(r.runningApps()) == r.desired })
	if after := r.instanceArns(); !slices.Equal(after, machines) {
		t.Errorf("instances before %v, after the repair %v: a joined machine must not be replaced", machines, after)
	}
	to := time.Now()
	h := r.history()
	repaired := false
	for _, in := range h.Instances() {
		if in.Arn != victim {
			continue
		}
		drained := false
		for _, st := range in.States {
			switch {
			case st.At.Before(begin):
			case st.Status == "DRAINING" && strings.Contains(st.Reason, "auto-repair"):
				drained = true
			case st.Status == "ACTIVE" && drained:
				repaired = true
			}
		}
	}
	if !repaired {
		t.Errorf("no auto-repair drain and activation of %s in the record", victim)
	}
	d := []coverage.Daemon{{Name: "agentd", Arn: r.daemonArn, Critical: true, CPs: []string{r.cp}, Created: r.begin.Add(-time.Hour)}}
	if gaps := h.Gaps(d, begin, to, coverage.Options{InferRepair: true}); len(gaps) > 0 {
		t.Errorf("coverage gaps during the repair: %+v", gaps)
	}
}
