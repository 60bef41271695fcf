package fault

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// agentKillDeadline bounds recovery from a killed agent: the instances
// controller notices the dead process at its next reconcile (a 15 s resync
// at most), deregisters and terminates the instance, and the service's
// task comes back on a replacement that starts its daemon first.
var agentKillDeadline = 2 * time.Minute

// TestKillAgents kills agents with SIGKILL, first while tasks start on
// their instance, then in steady state (a third of the fleet at once).
func TestKillAgents(t *testing.T) {
	f := newFleet(t, nil)
	f.setup(*instancesFlag, false)

	// During task start: jobs are placed, and their instance dies before
	// (or while) its agent starts them.
	jobs := f.runJobs(2)
	var victim string
	ctx := context.Background()
	out, err := f.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(f.cluster), Tasks: jobs})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range out.Tasks {
		if victim = aws.ToString(tk.ContainerInstanceArn); victim != "" {
			break
		}
	}
	if victim == "" {
		t.Fatalf("jobs not placed: %+v", out.Tasks)
	}
	f.kill9(victim)
	for _, tk := range f.describe(jobs) {
		t.Logf("job %s was %s on %s when its agent died", aws.ToString(tk.TaskArn), aws.ToString(tk.LastStatus), aws.ToString(tk.ContainerInstanceArn))
	}
	f.converge("kill -9 during task start", agentKillDeadline, gone(victim))
	f.verify("kill -9 during task start")
	f.lost(victim)

	// Steady state: a third of the instances die at once.
	s := f.mustSnapshot()
	victims := f.serviceInstances(s, serviceName)[:max(1, *instancesFlag/3)]
	for _, v := range victims {
		f.kill9(v)
	}
	f.converge("kill -9 in steady state", agentKillDeadline, gone(victims...))
	f.verify("kill -9 in steady state")
	for _, v := range victims {
		f.lost(v)
	}
}

// describe returns the tasks by ARN.
func (f *fleet) describe(arns []string) []types.Task {
	f.t.Helper()
	out, err := f.c.DescribeTasks(context.Background(), &ecs.DescribeTasksInput{Cluster: aws.String(f.cluster), Tasks: arns})
	if err != nil {
		f.t.Fatal(err)
	}
	return out.Tasks
}

// lost checks a dead instance's record: deregistered, every task that was
// on it STOPPED with a reason, nothing of it left running in Docker.
func (f *fleet) lost(instance string) {
	f.t.Helper()
	ctx := context.Background()
	out, err := f.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(f.cluster), ContainerInstances: []string{instance}})
	if err != nil || len(out.ContainerInstances) != 1 {
		f.t.Fatalf("describe %s: %+v %v", instance, out, err)
	}
	if s := aws.ToString(out.ContainerInstances[0].Status); s != "INACTIVE" {
		f.t.Errorf("lost instance %s is %s", instance, s)
	}
	// The API and the record agree that its tasks stopped.
	f.fetch()
	var arns []string
	for _, tk := range f.h.Tasks() {
		if tk.Instance != instance {
			continue
		}
		arns = append(arns, tk.Arn)
		if last := tk.States[len(tk.States)-1]; last.Status != "STOPPED" {
			f.t.Errorf("record: task %s (%s) of lost instance %s ends %s, no STOPPED event recorded", tk.Arn, tk.Group, instance, last.Status)
		}
	}
	for _, arn := range f.jobs {
		if !slices.Contains(arns, arn) {
			arns = append(arns, arn)
		}
	}
	for _, tk := range f.describe(arns) {
		if aws.ToString(tk.ContainerInstanceArn) != instance {
			continue
		}
		if aws.ToString(tk.LastStatus) != "STOPPED" || aws.ToString(tk.StoppedReason) == "" {
			f.t.Errorf("task %s (%s) of lost instance %s is %s (%q)", aws.ToString(tk.TaskArn), aws.ToString(tk.Group), instance, aws.ToString(tk.LastStatus), aws.ToString(tk.StoppedReason))
		}
		if f.h.Task(aws.ToString(tk.TaskArn)) == nil {
			f.t.Errorf("record: task %s (%s) of lost instance %s has no event at all", aws.ToString(tk.TaskArn), aws.ToString(tk.Group), instance)
		}
	}
	eventually(f.t, 60*time.Second, "the lost instance's containers removed", func() bool {
		cs, err := f.rt.List(ctx, map[string]string{"com.capstan.instance": instance})
		return err == nil && len(cs) == 0
	})
}
