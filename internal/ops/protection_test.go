package ops_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
)

// liveTasks lists a service's tasks whose desired status is RUNNING.
func liveTasks(t *testing.T, c *ecs.Client, cluster, service string) []string {
	t.Helper()
	out, err := c.ListTasks(context.Background(), &ecs.ListTasksInput{Cluster: aws.String(cluster), ServiceName: aws.String(service), DesiredStatus: types.DesiredStatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	return out.TaskArns
}

// waitLive waits until the service has n tasks desired RUNNING.
func waitLive(t *testing.T, c *ecs.Client, cluster, service string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := liveTasks(t, c, cluster, service)
		if len(got) == n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("service %s has %d live tasks, want %d", service, len(got), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestTaskProtectionHoldsScaleIn(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("pr")}); err != nil {
		t.Fatal(err)
	}
	registerInstance(t, srv, "pr")
	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("pr"), ServiceName: aws.String("web"),
		TaskDefinition: td.TaskDefinition.TaskDefinitionArn, DesiredCount: aws.Int32(3)}); err != nil {
		t.Fatal(err)
	}
	tasks := waitLive(t, c, "pr", "web", 3)

	before := time.Now()
	up, err := c.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("pr"), Tasks: tasks[:2],
		ProtectionEnabled: true, ExpiresInMinutes: aws.Int32(60)})
	if err != nil {
		t.Fatal(err)
	}
	if len(up.ProtectedTasks) != 2 || len(up.Failures) != 0 || !up.ProtectedTasks[0].ProtectionEnabled {
		t.Fatalf("update answered %+v, failures %+v", up.ProtectedTasks, up.Failures)
	}
	exp := aws.ToTime(up.ProtectedTasks[0].ExpirationDate)
	if exp.Before(before.Add(59*time.Minute)) || exp.After(time.Now().Add(61*time.Minute)) {
		t.Fatalf("expires %v, want an hour from now", exp)
	}
	get, err := c.GetTaskProtection(ctx, &ecs.GetTaskProtectionInput{Cluster: aws.String("pr"), Tasks: append(tasks, "0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	if len(get.ProtectedTasks) != 3 || !get.ProtectedTasks[1].ProtectionEnabled || get.ProtectedTasks[2].ProtectionEnabled ||
		get.ProtectedTasks[2].ExpirationDate != nil || len(get.Failures) != 1 || aws.ToString(get.Failures[0].Reason) != "MISSING" {
		t.Fatalf("get answered %+v, failures %+v", get.ProtectedTasks, get.Failures)
	}

	// Scale-in to 1 stops only the unprotected task.
	if _, err := c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("pr"), Service: aws.String("web"), DesiredCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	left := waitLive(t, c, "pr", "web", 2)
	for _, a := range left {
		if a != tasks[0] && a != tasks[1] {
			t.Fatalf("scale-in kept %s, which is not protected; left %v", a, left)
		}
	}
	time.Sleep(time.Second)
	if got := liveTasks(t, c, "pr", "web"); len(got) != 2 {
		t.Fatalf("protected tasks were stopped: %v", got)
	}
	// Protection off: scale-in goes on to desired.
	if _, err := c.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("pr"), Tasks: tasks[:1], ProtectionEnabled: false}); err != nil {
		t.Fatal(err)
	}
	left = waitLive(t, c, "pr", "web", 1)
	if left[0] != tasks[1] {
		t.Fatalf("left %v, want the protected %s", left, tasks[1])
	}

	// Bad input and tasks protection does not apply to.
	run, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("pr"), TaskDefinition: td.TaskDefinition.TaskDefinitionArn})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run task: %v", err)
	}
	up, err = c.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("pr"), ProtectionEnabled: true,
		Tasks: []string{aws.ToString(run.Tasks[0].TaskArn), tasks[2], "0123456789abcdef0123456789abcdef"}})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, f := range up.Failures {
		reasons[aws.ToString(f.Arn)] = aws.ToString(f.Reason)
	}
	if len(up.ProtectedTasks) != 0 || reasons[aws.ToString(run.Tasks[0].TaskArn)] != "TASK_NOT_VALID" || reasons[tasks[2]] != "TASK_NOT_VALID" ||
		reasons["0123456789abcdef0123456789abcdef"] != "MISSING" {
		t.Fatalf("standalone, stopped and unknown tasks: protected %+v, failures %v", up.ProtectedTasks, reasons)
	}
	for _, m := range []int32{0, 2881} {
		_, err = c.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("pr"), Tasks: tasks[1:2], ProtectionEnabled: true, ExpiresInMinutes: aws.Int32(m)})
		wantECSError(t, err, "InvalidParameterException", "expiresInMinutes")
	}
	_, err = c.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("pr"), Tasks: []string{"not-a-task"}, ProtectionEnabled: true})
	wantECSError(t, err, "InvalidParameterException", "tasks[0]")
	_, err = c.GetTaskProtection(ctx, &ecs.GetTaskProtectionInput{Cluster: aws.String("nope"), Tasks: tasks[:1]})
	wantECSError(t, err, "ClusterNotFoundException")
}
