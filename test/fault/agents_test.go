package fault

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/runtime"
)

// agentKillDeadline bounds recovery from a killed agent: the instances
// controller notices the dead process at its next reconcile (a 15 s resync
// at most), deregisters and terminates the instance, and the service's
// task comes back on a replacement that starts its daemon first.
var agentKillDeadline = 2 * time.Minute

// TestKillAgents kills agents with SIGKILL, first while a task starts on
// their instance, then in steady state (a third of the fleet at once).
func TestKillAgents(t *testing.T) {
	f := newFleet(t, nil)
	f.setup(*instancesFlag, false)

	// During task start: jobs whose main container waits for a gate
	// container to turn healthy, so each stays mid-start (a container up,
	// the task not RUNNING) for seconds. The first instance seen in that
	// state loses its agent.
	jobs := f.runGatedJobs(2)
	victim, job := f.midStart(jobs)
	f.kill9(victim)
	killed := time.Now()
	for _, tk := range f.describe(jobs) {
		t.Logf("job %s was %s on %s when its agent died", aws.ToString(tk.TaskArn), aws.ToString(tk.LastStatus), aws.ToString(tk.ContainerInstanceArn))
	}
	f.converge("kill -9 during task start", agentKillDeadline, gone(victim))
	f.verify("kill -9 during task start")
	f.lost(victim)
	// It held at the kill: the server never heard the job run.
	if tk := f.h.Task(job); tk == nil {
		t.Errorf("record: no event of job %s", job)
	} else if s, ok := tk.First("RUNNING"); ok {
		t.Errorf("record: job %s was RUNNING at %s, before its agent died at %s: the kill did not land mid-start",
			job, s.At.Format(time.RFC3339Nano), killed.Format(time.RFC3339Nano))
	}

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

// gateDelay is how long a gated job's gate container takes to turn healthy.
const gateDelay = 15

// runGatedJobs starts n standalone tasks whose main container depends on
// a gate container turning HEALTHY, gateDelay seconds after it starts.
func (f *fleet) runGatedJobs(n int) []string {
	f.t.Helper()
	ctx := context.Background()
	ready := fmt.Sprintf("sleep %d; touch /tmp/ready; %s", gateDelay, loopCmd)
	out, err := f.c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("gated-job"),
		ContainerDefinitions: []types.ContainerDefinition{
			{Name: aws.String("gate"), Image: aws.String(f.image), Memory: aws.Int32(jobMemory / 2), Command: []string{"sh", "-c", ready},
				Environment: hollowEnv("SIM_HEALTH_AFTER", fmt.Sprintf("%ds", gateDelay)),
				HealthCheck: &types.HealthCheck{Command: []string{"CMD-SHELL", "test -f /tmp/ready"}, Interval: aws.Int32(5), Retries: aws.Int32(1)}},
			{Name: aws.String("main"), Image: aws.String(f.image), Memory: aws.Int32(jobMemory / 2), Command: []string{"sh", "-c", loopCmd},
				DependsOn: []types.ContainerDependency{{ContainerName: aws.String("gate"), Condition: types.ContainerConditionHealthy}}},
		}})
	if err != nil {
		f.t.Fatalf("register gated-job: %v", err)
	}
	run, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: out.TaskDefinition.TaskDefinitionArn,
		Count: aws.Int32(int32(n)), CapacityProviderStrategy: f.strategy()})
	if err != nil || len(run.Tasks) != n {
		f.t.Fatalf("run gated jobs: %v %+v", err, run)
	}
	var arns []string
	for _, tk := range run.Tasks {
		arns = append(arns, aws.ToString(tk.TaskArn))
	}
	f.jobs = append(f.jobs, arns...)
	return arns
}

// midStart waits until one of jobs is mid-start on its instance: its gate
// container runs in Docker while the task is not RUNNING (nor stopped).
// It returns the instance and the job.
func (f *fleet) midStart(jobs []string) (string, string) {
	f.t.Helper()
	ctx := context.Background()
	var instance, job string
	eventually(f.t, 60*time.Second, "a job mid-start", func() bool {
		cs, err := f.rt.List(ctx, map[string]string{"com.capstan.cluster": f.cluster})
		if err != nil {
			return false
		}
		up := map[string]bool{}
		for _, c := range cs {
			if c.State == runtime.StateRunning && c.Labels["com.capstan.container-name"] == "gate" {
				up[c.Labels["com.capstan.task-arn"]] = true
			}
		}
		for _, tk := range f.describe(jobs) {
			switch aws.ToString(tk.LastStatus) {
			case "RUNNING", "DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED":
				continue
			}
			if up[aws.ToString(tk.TaskArn)] {
				instance, job = aws.ToString(tk.ContainerInstanceArn), aws.ToString(tk.TaskArn)
				return true
			}
		}
		return false
	})
	return instance, job
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
