package fault

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

var (
	// restartDeadline bounds a crashed non-critical daemon's restart on
	// its instance (5 s back-off, then a start).
	restartDeadline = 45 * time.Second
	// repairDeadline bounds auto-repair of an instance whose critical
	// daemon crashed: drain, a replacement with the daemon first, the
	// service task moved, the old instance terminated.
	repairDeadline = 2 * time.Minute
	// rolloutDeadline bounds a daemon deployment by instance replacement
	// over the fleet, bad or good, to its end (scaled with the fleet).
	rolloutDeadline = 4 * time.Minute
)

// daemonContainer returns the running container of daemon on instance.
func (f *fleet) daemonContainer(s *snapshot, daemon, instance string) (string, string) {
	f.t.Helper()
	for _, c := range s.containers {
		tk := s.tasks[c.Labels["com.capstan.task-arn"]]
		if aws.ToString(tk.Group) == "daemon:"+daemon && c.Labels["com.capstan.instance"] == instance {
			return c.ID, aws.ToString(tk.TaskArn)
		}
	}
	f.t.Fatalf("no running container of daemon %s on %s", daemon, instance)
	return "", ""
}

// dockerKill kills a container the way an operator or the OOM killer would.
func (f *fleet) dockerKill(id string) {
	f.t.Helper()
	if f.crash(id) {
		return
	}
	if out, err := exec.Command("docker", "kill", id).CombinedOutput(); err != nil {
		f.t.Fatalf("docker kill %s: %v\n%s", id, err, out)
	}
}

// TestCrashDaemons kills daemon containers with docker kill: a
// non-critical daemon is restarted on its instance, a critical one gets
// its instance repaired (replaced).
func TestCrashDaemons(t *testing.T) {
	f := newFleet(t, nil)
	f.setup(*instancesFlag, true)

	s := f.mustSnapshot()
	insts := f.serviceInstances(s, serviceName)
	id, old := f.daemonContainer(s, "logs", insts[0])
	f.dockerKill(id)
	f.converge("non-critical daemon crashed", restartDeadline, func(s *snapshot) string {
		if _, ok := s.instances[insts[0]]; !ok {
			return "the instance of the crashed non-critical daemon is gone"
		}
		if tk := f.describe([]string{old})[0]; aws.ToString(tk.LastStatus) != "STOPPED" {
			return fmt.Sprintf("crashed daemon task %s is %s", old, aws.ToString(tk.LastStatus))
		}
		return ""
	})
	f.verify("non-critical daemon crashed")

	s = f.mustSnapshot()
	victim := f.serviceInstances(s, serviceName)[0]
	id, _ = f.daemonContainer(s, "guard", victim)
	f.dockerKill(id)
	f.converge("critical daemon crashed", scaled(repairDeadline), gone(victim))
	f.verify("critical daemon crashed")
	f.lost(victim)
}

// updateDaemon deploys a new revision of the guard daemon and returns the
// deployment ARN.
func (f *fleet) updateDaemon(td string) string {
	f.t.Helper()
	out, err := f.c.UpdateDaemon(context.Background(), &ecs.UpdateDaemonInput{DaemonArn: aws.String(f.daemons[0].Arn),
		DaemonTaskDefinitionArn: aws.String(td), CapacityProviderArns: []string{f.cpArn}, Critical: aws.Bool(true),
		DeploymentConfiguration: &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(34)}})
	if err != nil {
		f.t.Fatalf("update daemon: %v", err)
	}
	return aws.ToString(out.DeploymentArn)
}

func (f *fleet) deployment(arn string) types.DaemonDeployment {
	f.t.Helper()
	out, err := f.c.DescribeDaemonDeployments(context.Background(), &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{arn}})
	if err != nil || len(out.DaemonDeployments) != 1 {
		f.t.Fatalf("describe deployment %s: %+v %v", arn, out, err)
	}
	return out.DaemonDeployments[0]
}

// ended is a convergence condition: the deployment reached status, and
// every instance runs the guard from task definition td.
func (f *fleet) ended(dep string, status types.DaemonDeploymentStatus, td string) func(*snapshot) string {
	return func(s *snapshot) string {
		if d := f.deployment(dep); d.Status != status {
			return fmt.Sprintf("deployment is %s (%s)", d.Status, aws.ToString(d.StatusReason))
		}
		for _, tk := range s.tasks {
			if aws.ToString(tk.Group) == "daemon:guard" && aws.ToString(tk.LastStatus) == "RUNNING" && aws.ToString(tk.TaskDefinitionArn) != td {
				return fmt.Sprintf("guard on %s runs %s, want %s", aws.ToString(tk.ContainerInstanceArn), aws.ToString(tk.TaskDefinitionArn), td)
			}
		}
		return ""
	}
}

// TestBadDaemonRevision deploys a revision of the critical daemon that
// exits at once: the circuit breaker rolls it back and every instance
// runs the good revision again. Then the bad revision again, superseded
// mid-rollout by a good one, which completes.
func TestBadDaemonRevision(t *testing.T) {
	f := newFleet(t, nil)
	f.setup(*instancesFlag, false)
	good := f.daemonTDs["guard"]

	bad := f.daemonTaskDef("guard", "echo bad release; exit 1")
	dep := f.updateDaemon(bad)
	f.converge("bad revision rolled back", scaled(rolloutDeadline), f.ended(dep, types.DaemonDeploymentStatusRollbackSuccessful, good))
	f.verify("bad revision rolled back")
	d := f.deployment(dep)
	t.Logf("bad deployment: %s, %s, breaker %+v", d.Status, aws.ToString(d.StatusReason), d.CircuitBreaker)

	dep = f.updateDaemon(bad)
	ctx := context.Background()
	eventually(t, scaled(rolloutDeadline), "the bad rollout under way", func() bool {
		out, err := f.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(f.cluster), Status: types.ContainerInstanceStatusDraining})
		return err == nil && len(out.ContainerInstanceArns) > 0
	})
	fixed := f.daemonTaskDef("guard", "echo fixed; "+loopCmd)
	next := f.updateDaemon(fixed)
	f.converge("good revision superseding a bad rollout", scaled(rolloutDeadline), f.ended(next, types.DaemonDeploymentStatusSuccessful, fixed))
	f.verify("good revision superseding a bad rollout")
	// A newer UpdateDaemon stops an in-flight deployment (docs/daemons.md,
	// States): STOPPED, saying so, with its stop time and no finish.
	d = f.deployment(dep)
	if d.Status != types.DaemonDeploymentStatusStopped || !strings.HasPrefix(aws.ToString(d.StatusReason), "Superseded by") ||
		d.StoppedAt == nil || d.FinishedAt != nil {
		t.Errorf("superseded deployment: %s (%q), stopped at %v, finished at %v; want STOPPED, superseded, a stop time and no finish",
			d.Status, aws.ToString(d.StatusReason), d.StoppedAt, d.FinishedAt)
	}
}
