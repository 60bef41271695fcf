package ops_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/testenv"
)

// TestGetTaskLogsRefusals: bad input names its field and rule; a task
// whose instance has no agent connected is refused with that reason (the
// logs are read through the agent, tested with Docker in test/e2e).
func TestGetTaskLogsRefusals(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("lg")}); err != nil {
		t.Fatal(err)
	}
	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{
		Family: aws.String("two"),
		ContainerDefinitions: []types.ContainerDefinition{
			{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)},
			{Name: aws.String("side"), Image: aws.String("busybox"), Memory: aws.Int32(64)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	registerInstance(t, srv, "lg")
	run, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("lg"), TaskDefinition: td.TaskDefinition.TaskDefinitionArn})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run task: %v %+v", err, run)
	}
	task := aws.ToString(run.Tasks[0].TaskArn)
	i32 := func(v int32) *int32 { return &v }
	for _, c := range []struct {
		name string
		in   ops.GetTaskLogsRequest
		want string
	}{
		{"no task", ops.GetTaskLogsRequest{Cluster: "lg"}, "InvalidParameterException: task:"},
		{"unknown task", ops.GetTaskLogsRequest{Cluster: "lg", Task: "0123456789abcdef0123456789abcdef"}, "InvalidParameterException: task: no task"},
		{"unknown cluster", ops.GetTaskLogsRequest{Cluster: "nope", Task: task}, "ClusterNotFoundException"},
		{"container needed", ops.GetTaskLogsRequest{Cluster: "lg", Task: task}, "InvalidParameterException: container: is required: the task has containers web, side"},
		{"unknown container", ops.GetTaskLogsRequest{Cluster: "lg", Task: task, Container: "db"}, `InvalidParameterException: container: the task has no container "db"`},
		{"bad start", ops.GetTaskLogsRequest{Cluster: "lg", Task: task, Container: "web", StartTime: "yesterday"}, "InvalidParameterException: startTime: must be a time in RFC 3339 form"},
		{"both starts", ops.GetTaskLogsRequest{Cluster: "lg", Task: task, Container: "web", StartTime: "2026-01-01T00:00:00Z", NextToken: "2026-01-01T00:00:00Z"}, "InvalidParameterException: nextToken: give startTime or nextToken, not both"},
		{"tail", ops.GetTaskLogsRequest{Cluster: "lg", Task: task, Container: "web", Tail: i32(0)}, "InvalidParameterException: tail: must be between 1 and 10000 (got 0)"},
		{"wait", ops.GetTaskLogsRequest{Cluster: "lg", Task: task, Container: "web", WaitSeconds: i32(21)}, "InvalidParameterException: waitSeconds: must be between 0 and 20 (got 21)"},
		{"window", ops.GetTaskLogsRequest{Cluster: "lg", Task: task, Container: "web", MaxBytes: i32(10)}, "InvalidParameterException: maxBytes: must be between 1024 and 1048576 (got 10)"},
		{"no agent", ops.GetTaskLogsRequest{Cluster: "lg", Task: task, Container: "web"}, "ClientException: the agent of container instance"},
	} {
		var out ops.GetTaskLogsResponse
		err := callExtension(ctx, srv, "GetTaskLogs", c.in, &out)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
}
