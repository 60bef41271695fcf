package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

func taskNoun() *noun {
	return &noun{
		name:    "task",
		summary: "Tasks: run, list, inspect and stop them (services' and daemons' too).",
		verbs: []*verb{
			{name: "list", args: "[--cluster C] [--service S | --daemon D | --family F | --started-by S] [--instance ID] [--status S]", summary: "List tasks.", bind: taskList},
			{name: "describe", args: "ID|ARN... [--cluster C]", summary: "Show tasks in detail, with their containers.", bind: taskDescribe},
			{name: "run", args: "TD [--cluster C] [--count N] [--capacity-provider CP] [flags]", summary: "Run tasks of a task definition.", details: `
TD is a task definition ARN, FAMILY:REVISION or FAMILY (its latest ACTIVE revision).`, bind: taskRun},
			{name: "stop", args: "ID|ARN [--cluster C] [--reason R]", summary: "Stop a task.", bind: taskStop},
		},
	}
}

func taskList(fs *flag.FlagSet) action {
	var cluster, service, daemon, family, startedBy, instance, status string
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.StringVar(&service, "service", "", "only tasks of `service`")
	fs.StringVar(&daemon, "daemon", "", "only tasks of daemon `name`")
	fs.StringVar(&family, "family", "", "only tasks of task definition `family`")
	fs.StringVar(&startedBy, "started-by", "", "only tasks started by `value`")
	fs.StringVar(&instance, "instance", "", "only tasks on container instance `ID|ARN`")
	fs.StringVar(&status, "status", "", "desired `status`: RUNNING (default), PENDING or STOPPED")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		in := &ecs.ListTasksInput{Cluster: optional(cluster), ServiceName: optional(service), DaemonName: optional(daemon),
			Family: optional(family), StartedBy: optional(startedBy), ContainerInstance: optional(instance)}
		if status != "" {
			v, err := upperEnum("status", status, "RUNNING", "PENDING", "STOPPED")
			if err != nil {
				return err
			}
			in.DesiredStatus = types.DesiredStatus(v)
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		arns, err := listTasks(ctx, c, in)
		if err != nil {
			return err
		}
		if s.json() {
			return s.show(&ecs.ListTasksOutput{TaskArns: arns}, nil)
		}
		tasks, err := describeTasks(ctx, c, cluster, arns)
		if err != nil {
			return err
		}
		taskTable(s.stdout, tasks)
		return nil
	}
}

// listTasks pages through ListTasks.
func listTasks(ctx context.Context, c *ecs.Client, in *ecs.ListTasksInput) ([]string, error) {
	arns := []string{}
	p := ecs.NewListTasksPaginator(c, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		arns = append(arns, page.TaskArns...)
	}
	return arns, nil
}

// describeTasks describes tasks 100 at a time; a task gone meanwhile is
// left out.
func describeTasks(ctx context.Context, c *ecs.Client, cluster string, arns []string) ([]types.Task, error) {
	var out []types.Task
	for i := 0; i < len(arns); i += 100 {
		d, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: optional(cluster), Tasks: arns[i:min(i+100, len(arns))]})
		if err != nil {
			return nil, err
		}
		out = append(out, d.Tasks...)
	}
	return out, nil
}

func taskDefName(arn string) string {
	fam, rev := familyRevision(arn)
	if rev == "" {
		return fam
	}
	return fam + ":" + rev
}

func taskTable(w io.Writer, tasks []types.Task) {
	tw := newTable(w, "TASK", "GROUP", "LAST STATUS", "DESIRED", "TASK DEFINITION", "INSTANCE", "STARTED", "STOP REASON")
	for _, t := range tasks {
		row(tw, lastSegment(str(t.TaskArn)), str(t.Group), str(t.LastStatus), str(t.DesiredStatus),
			taskDefName(str(t.TaskDefinitionArn)), lastSegment(str(t.ContainerInstanceArn)), ts(t.StartedAt), str(t.StoppedReason))
	}
	tw.Flush()
}

func taskDescribe(fs *flag.FlagSet) action {
	var cluster string
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 100, "task ID or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: optional(cluster), Tasks: args, Include: []types.TaskField{types.TaskFieldTags}})
		if err != nil {
			return err
		}
		err = s.show(out, func(w io.Writer) {
			for i, t := range out.Tasks {
				if i > 0 {
					fmt.Fprintln(w)
				}
				f := newFields(w)
				f.add("Task", lastSegment(str(t.TaskArn)))
				f.add("ARN", str(t.TaskArn))
				f.add("Cluster", lastSegment(str(t.ClusterArn)))
				f.add("Task definition", taskDefName(str(t.TaskDefinitionArn)))
				f.add("Group", str(t.Group))
				f.add("Started by", str(t.StartedBy))
				f.add("Last status", str(t.LastStatus))
				f.add("Desired status", str(t.DesiredStatus))
				f.add("Health", string(t.HealthStatus))
				f.add("Instance", lastSegment(str(t.ContainerInstanceArn)))
				f.add("Capacity provider", str(t.CapacityProviderName))
				f.add("CPU / memory", str(t.Cpu)+" / "+str(t.Memory))
				f.add("Created", ts(t.CreatedAt))
				f.add("Started", ts(t.StartedAt))
				f.add("Stopped", ts(t.StoppedAt))
				f.add("Stop code", string(t.StopCode))
				f.add("Stopped reason", str(t.StoppedReason))
				f.add("Execute command", fmt.Sprint(t.EnableExecuteCommand))
				f.add("Tags", tagText(t.Tags, tagKV))
				f.flush()
				tw := newTable(w, "  CONTAINER", "IMAGE", "LAST STATUS", "EXIT", "HEALTH", "REASON")
				for _, ct := range t.Containers {
					row(tw, "  "+str(ct.Name), str(ct.Image), str(ct.LastStatus), i32(ct.ExitCode), string(ct.HealthStatus), str(ct.Reason))
				}
				tw.Flush()
			}
		})
		return errors.Join(err, failuresError("task", out.Failures))
	}
}

func taskRun(fs *flag.FlagSet) action {
	var cluster, group, startedBy, cp string
	var count int
	var exec bool
	var tags tagFlag
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.IntVar(&count, "count", 1, "number of `tasks` to run (1-10)")
	fs.StringVar(&group, "group", "", "task `group` (default family:FAMILY)")
	fs.StringVar(&startedBy, "started-by", "", "`value` recorded as startedBy")
	fs.StringVar(&cp, "capacity-provider", "", "capacity provider `NAME` to run on (default: the cluster's strategy)")
	fs.BoolVar(&exec, "enable-execute-command", false, "allow execute-command into the tasks")
	fs.Var(&tags, "tag", "resource tag `KEY=VALUE` (repeatable)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "task definition"); err != nil {
			return err
		}
		if count < 1 || count > 10 {
			return usageErrorf("--count %d: want 1 to 10", count)
		}
		in := &ecs.RunTaskInput{TaskDefinition: aws.String(args[0]), Cluster: optional(cluster), Count: aws.Int32(int32(count)),
			Group: optional(group), StartedBy: optional(startedBy), EnableExecuteCommand: exec, Tags: tags}
		if cp != "" {
			in.CapacityProviderStrategy = []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cp), Weight: 1}}
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.RunTask(ctx, in)
		if err != nil {
			return err
		}
		err = s.show(out, func(w io.Writer) { taskTable(w, out.Tasks) })
		return errors.Join(err, failuresError("could not place on", out.Failures))
	}
}

func taskStop(fs *flag.FlagSet) action {
	var cluster, reason string
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.StringVar(&reason, "reason", "", "`reason` recorded as the task's stoppedReason")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "task ID or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.StopTask(ctx, &ecs.StopTaskInput{Cluster: optional(cluster), Task: aws.String(args[0]), Reason: optional(strings.TrimSpace(reason))})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { taskTable(w, []types.Task{*out.Task}) })
	}
}
