package ops_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/testenv"
)

// TestEnableExecuteCommandKept: RunTask, StartTask and a service's tasks
// keep the call's enableExecuteCommand, and DescribeTasks shows it.
func TestEnableExecuteCommandKept(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("ex")}); err != nil {
		t.Fatal(err)
	}
	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("one"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(16)}}})
	if err != nil {
		t.Fatal(err)
	}
	ci := registerInstance(t, srv, "ex")
	tdArn := td.TaskDefinition.TaskDefinitionArn
	want := map[string]bool{}
	for _, on := range []bool{true, false} {
		run, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("ex"), TaskDefinition: tdArn, EnableExecuteCommand: on})
		if err != nil || len(run.Tasks) != 1 {
			t.Fatalf("run task: %v %+v", err, run)
		}
		want[aws.ToString(run.Tasks[0].TaskArn)] = on
		if run.Tasks[0].EnableExecuteCommand != on {
			t.Errorf("RunTask(enableExecuteCommand=%v) answered %v", on, run.Tasks[0].EnableExecuteCommand)
		}
	}
	st, err := c.StartTask(ctx, &ecs.StartTaskInput{Cluster: aws.String("ex"), TaskDefinition: tdArn,
		ContainerInstances: []string{aws.ToString(ci.ContainerInstanceArn)}, EnableExecuteCommand: true})
	if err != nil || len(st.Tasks) != 1 {
		t.Fatalf("start task: %v %+v", err, st)
	}
	want[aws.ToString(st.Tasks[0].TaskArn)] = true
	if _, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("ex"), ServiceName: aws.String("svc"),
		TaskDefinition: tdArn, DesiredCount: aws.Int32(1), EnableExecuteCommand: true}); err != nil {
		t.Fatal(err)
	}
	var svcTask string
	for deadline := time.Now().Add(20 * time.Second); svcTask == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		l, err := c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("ex"), ServiceName: aws.String("svc")})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.TaskArns) > 0 {
			svcTask = l.TaskArns[0]
		}
	}
	if svcTask == "" {
		t.Fatal("the service started no task")
	}
	want[svcTask] = true
	arns := make([]string, 0, len(want))
	for a := range want {
		arns = append(arns, a)
	}
	d, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("ex"), Tasks: arns})
	if err != nil || len(d.Tasks) != len(arns) {
		t.Fatalf("describe: %v %+v", err, d)
	}
	for _, task := range d.Tasks {
		if got := task.EnableExecuteCommand; got != want[aws.ToString(task.TaskArn)] {
			t.Errorf("task %s: enableExecuteCommand %v, want %v", aws.ToString(task.TaskArn), got, want[aws.ToString(task.TaskArn)])
		}
	}
}

// SplitCommand splits as a POSIX shell would, without expansions.
func TestSplitCommand(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{"sh", []string{"sh"}, ""},
		{"  sh  -c   'echo hi; exit 3' ", []string{"sh", "-c", "echo hi; exit 3"}, ""},
		{`echo "a \"b\" \$c" d\ e ''`, []string{"echo", `a "b" $c`, "d e", ""}, ""},
		{`'it'\''s'`, []string{"it's"}, ""},
		{"sh -c 'x", nil, "unterminated single quote"},
		{`echo "x`, nil, "unterminated double quote"},
		{"   ", nil, "has no words"},
	} {
		got, err := ops.SplitCommand(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want error %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
}
