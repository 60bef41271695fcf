package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

func (f *fleet) capacityProvider(name string) string {
	f.t.Helper()
	out, err := f.c.CreateCapacityProvider(context.Background(), &ecs.CreateCapacityProviderInput{Name: aws.String(name), Cluster: aws.String(f.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return aws.ToString(out.CapacityProvider.CapacityProviderArn)
}

func (f *fleet) daemon(name, cp string, critical bool, cmd ...string) string {
	f.t.Helper()
	ctx := context.Background()
	td, err := f.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(name),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String(name), Image: aws.String(f.image), Memory: aws.Int32(32), Command: cmd}}})
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := f.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String(name), ClusterArn: aws.String(f.cluster),
		DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn, CapacityProviderArns: []string{cp}, Critical: aws.Bool(critical)})
	if err != nil {
		f.t.Fatal(err)
	}
	return aws.ToString(out.DaemonArn)
}

func (f *fleet) instance(arn string) types.ContainerInstance {
	f.t.Helper()
	out, err := f.c.DescribeContainerInstances(context.Background(), &ecs.DescribeContainerInstancesInput{Cluster: aws.String(f.cluster), ContainerInstances: []string{arn}})
	if err != nil || len(out.ContainerInstances) != 1 {
		f.t.Fatalf("describe instance: %+v %v", out, err)
	}
	return out.ContainerInstances[0]
}

func (f *fleet) daemonTasks(daemon, status string) []types.Task {
	f.t.Helper()
	ctx := context.Background()
	list, err := f.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(f.cluster), DaemonName: aws.String(daemon), DesiredStatus: types.DesiredStatus(status)})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(list.TaskArns) == 0 {
		return nil
	}
	out, err := f.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(f.cluster), Tasks: list.TaskArns})
	if err != nil {
		f.t.Fatal(err)
	}
	return out.Tasks
}

// TestDaemonRunsFirstAndLeavesLast: a joined machine gets its critical
// daemon before any task; drained by an operator it keeps the daemon and
// its registration, and takes tasks again once activated.
func TestDaemonRunsFirstAndLeavesLast(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	cp := f.capacityProvider("fleet-mi")
	f.daemon("metrics", cp, true, "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done")
	a := agents.StartEnv(t, agents.EnvFor(t, f.srv, f.cluster, "fleet-mi", t.TempDir()), f.rt)
	eventually(t, 60*time.Second, "instance ACTIVE", func() bool { return aws.ToString(f.instance(a.InstanceArn).Status) == "ACTIVE" })
	dts := f.daemonTasks("metrics", "RUNNING")
	if len(dts) != 1 || aws.ToString(dts[0].LastStatus) != "RUNNING" || aws.ToString(dts[0].ContainerInstanceArn) != a.InstanceArn {
		t.Fatalf("daemon tasks when ACTIVE: %+v", dts)
	}
	td := f.register("app", f.container("app", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	app := f.waitStatus(f.run(td), "RUNNING", 60*time.Second)
	if !dts[0].StartedAt.Before(*app.StartedAt) {
		t.Fatalf("daemon started %v, app %v", dts[0].StartedAt, app.StartedAt)
	}
	// Exactly one daemon task, also after the controller had time to act again.
	time.Sleep(500 * time.Millisecond)
	if n := len(f.daemonTasks("metrics", "RUNNING")); n != 1 {
		t.Fatalf("%d daemon tasks", n)
	}

	if _, err := f.c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String(f.cluster),
		ContainerInstances: []string{a.InstanceArn}, Status: types.ContainerInstanceStatusDraining}); err != nil {
		t.Fatal(err)
	}
	// A joined machine an operator drains stays registered, DRAINING, with
	// its daemon (as ECS drains: standalone tasks are left to finish). A
	// provisioned one is drained, its daemons last, and deregistered
	// (TestManagedInstanceLifecycle).
	if _, err := f.c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(f.cluster), Task: app.TaskArn}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(aws.ToString(app.TaskArn), "STOPPED", 60*time.Second)
	// Once empty it was deregistered at once before; it must stay.
	for range 20 {
		if s := aws.ToString(f.instance(a.InstanceArn).Status); s != "DRAINING" {
			t.Fatalf("drained joined machine is %s, want DRAINING and registered", s)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if n := len(f.daemonTasks("metrics", "RUNNING")); n != 1 {
		t.Fatalf("%d daemon tasks RUNNING on the drained joined machine, want 1", n)
	}
	if _, err := f.c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String(f.cluster),
		ContainerInstances: []string{a.InstanceArn}, Status: types.ContainerInstanceStatusActive}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(f.run(td), "RUNNING", 60*time.Second)
}

func TestFailingDaemons(t *testing.T) {
	f := newFleet(t)
	cp := f.capacityProvider("fleet-mi")
	f.daemon("flaky", cp, false, "sh", "-c", "exit 1")
	a := agents.StartEnv(t, agents.EnvFor(t, f.srv, f.cluster, "fleet-mi", t.TempDir()), f.rt)
	// A non-critical daemon never blocks the instance.
	eventually(t, 60*time.Second, "instance ACTIVE despite a failing non-critical daemon", func() bool {
		return aws.ToString(f.instance(a.InstanceArn).Status) == "ACTIVE"
	})
	// It is restarted (with back-off): more than one attempt shows up.
	eventually(t, 60*time.Second, "a second attempt", func() bool { return len(f.daemonTasks("flaky", "STOPPED")) >= 2 })

	g := newFleet(t)
	gcp := g.capacityProvider("strict-mi")
	g.daemon("broken", gcp, true, "sh", "-c", "exit 1")
	b := agents.StartEnv(t, agents.EnvFor(t, g.srv, g.cluster, "strict-mi", t.TempDir()), g.rt)
	eventually(t, 60*time.Second, "a failed critical daemon start", func() bool { return len(g.daemonTasks("broken", "STOPPED")) >= 1 })
	if s := aws.ToString(g.instance(b.InstanceArn).Status); s != "REGISTERING" {
		t.Fatalf("instance with a failing critical daemon is %s", s)
	}
	// Each failed start is reported as an impaired-daemon event.
	eventually(t, 30*time.Second, "DAEMON_TASK_START_IMPAIRED event", func() bool {
		out, err := g.srv.Service.ListEvents(context.Background(), &ops.ListEventsRequest{Cluster: g.cluster, DetailType: "ECS Daemon Service Action"})
		if err != nil {
			return false
		}
		for _, ev := range out.Events {
			if strings.Contains(string(ev.Detail), "DAEMON_TASK_START_IMPAIRED") && strings.Contains(string(ev.Detail), "TASK_FAILED_TO_RUN") {
				return true
			}
		}
		return false
	})
}

// TestExactlyOneDaemonPerInstance adds a second daemon while the server and
// an agent restart: every instance ends with exactly one task of each.
func TestExactlyOneDaemonPerInstance(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	cp := f.capacityProvider("fleet-mi")
	loop := []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}
	f.daemon("logs", cp, true, loop...)
	envA := agents.EnvFor(t, f.srv, f.cluster, "fleet-mi", t.TempDir())
	envB := agents.EnvFor(t, f.srv, f.cluster, "fleet-mi", t.TempDir())
	a := agents.StartEnv(t, envA, f.rt)
	agents.StartEnv(t, envB, f.rt)
	eventually(t, 60*time.Second, "both instances ACTIVE with the first daemon", func() bool {
		return len(f.daemonTasks("logs", "RUNNING")) == 2 && aws.ToString(f.instance(a.InstanceArn).Status) == "ACTIVE"
	})
	arn := f.daemon("traces", cp, false, loop...)
	a.Stop()
	f.srv = f.srv.Restart(t)
	f.c = f.srv.ECS()
	agents.StartEnv(t, envA, f.rt)
	for _, name := range []string{"logs", "traces"} {
		eventually(t, 90*time.Second, name+" on both instances", func() bool {
			running := f.daemonTasks(name, "RUNNING")
			per := map[string]int{}
			for _, tk := range running {
				if aws.ToString(tk.LastStatus) == "RUNNING" {
					per[aws.ToString(tk.ContainerInstanceArn)]++
				}
			}
			return len(per) == 2 && per[a.InstanceArn] == 1
		})
	}
	// No duplicates: one live task per daemon and instance, also in Docker.
	time.Sleep(time.Second)
	for _, name := range []string{"logs", "traces"} {
		per := map[string]int{}
		for _, tk := range f.daemonTasks(name, "RUNNING") {
			per[aws.ToString(tk.ContainerInstanceArn)]++
			if cs := f.containers(aws.ToString(tk.TaskArn)); len(cs) != 1 {
				t.Fatalf("%s task %s has %d containers", name, aws.ToString(tk.TaskArn), len(cs))
			}
		}
		for inst, n := range per {
			if n != 1 {
				t.Fatalf("%s: %d tasks on %s", name, n, inst)
			}
		}
	}
	d, err := f.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
	if err != nil || len(d.Daemon.CurrentRevisions) != 1 || d.Daemon.CurrentRevisions[0].TotalRunningCount != 2 {
		t.Fatalf("describe daemon counts: %+v %v", d, err)
	}
}
