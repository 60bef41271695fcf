package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

const serviceWaitHelp = `
--wait follows the service's PRIMARY deployment until its rollout state is
COMPLETED (exit 0) or FAILED (exit 5), printing a line per change; with
--timeout it gives up after that long (exit 6) and the deployment goes on.`

func serviceNoun() *noun {
	return &noun{
		name:    "service",
		summary: "Services keep a number of tasks of a task definition running.",
		verbs: []*verb{
			{name: "create", args: "NAME --task-definition TD [--desired-count N] [flags] | -f FILE", summary: "Create a service.", details: `
TD is a task definition ARN, FAMILY:REVISION or FAMILY. -f FILE takes the
CreateService request JSON; flags given alongside override it.` + "\n" + serviceWaitHelp, bind: serviceCreate},
			{name: "update", args: "NAME [--task-definition TD] [--desired-count N] [--force-new-deployment]", summary: "Change a service; a new task definition starts a deployment.", details: serviceWaitHelp, bind: serviceUpdate},
			{name: "describe", args: "NAME|ARN... [--cluster C]", summary: "Show services in detail.", bind: serviceDescribe},
			{name: "list", args: "[--cluster C]", summary: "List services.", bind: serviceList},
			{name: "delete", args: "NAME|ARN [--cluster C] [--force]", summary: "Delete a service (--force: even with a desired count above 0).", bind: serviceDelete},
			{name: "status", args: "NAME|ARN [--cluster C] [--wait]", summary: "Show a service's deployments and latest events.", details: serviceWaitHelp, bind: serviceStatus},
		},
	}
}

func serviceCreate(fs *flag.FlagSet) action {
	var cluster, taskDef, cp, file string
	var desired int
	var exec bool
	var w waitFlags
	var tags tagFlag
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.StringVar(&taskDef, "task-definition", "", "task definition `ARN|FAMILY[:REVISION]`")
	fs.IntVar(&desired, "desired-count", 1, "number of `tasks` to keep running")
	fs.StringVar(&cp, "capacity-provider", "", "capacity provider `NAME` to run on (default: the cluster's strategy)")
	fs.BoolVar(&exec, "enable-execute-command", false, "allow execute-command into the service's tasks")
	fs.StringVar(&file, "f", "", "CreateService request `file` (JSON)")
	fs.Var(&tags, "tag", "resource tag `KEY=VALUE` (repeatable)")
	w.register(fs, "the first deployment until it completes or fails")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 1, ""); err != nil {
			return err
		}
		if err := w.check(); err != nil {
			return err
		}
		in := &ecs.CreateServiceInput{}
		if file != "" {
			if err := readInputFile(file, s.stdin, in); err != nil {
				return err
			}
		}
		if len(args) == 1 {
			in.ServiceName = aws.String(args[0])
		}
		if aws.ToString(in.ServiceName) == "" {
			return usageErrorf("missing service NAME")
		}
		if s.set("cluster") {
			in.Cluster = aws.String(cluster)
		}
		if s.set("task-definition") {
			in.TaskDefinition = aws.String(taskDef)
		}
		if aws.ToString(in.TaskDefinition) == "" {
			return usageErrorf("missing --task-definition")
		}
		if s.set("desired-count") || in.DesiredCount == nil {
			if desired < 0 {
				return usageErrorf("--desired-count %d: want 0 or more", desired)
			}
			in.DesiredCount = aws.Int32(int32(desired))
		}
		if cp != "" {
			in.CapacityProviderStrategy = []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cp), Weight: 1}}
		}
		if s.set("enable-execute-command") {
			in.EnableExecuteCommand = exec
		}
		in.Tags = append(in.Tags, tags...)
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.CreateService(ctx, in)
		if err != nil {
			return err
		}
		if err := s.show(out, func(w io.Writer) { serviceTable(w, []types.Service{*out.Service}) }); err != nil || !w.wait {
			return err
		}
		return s.followService(ctx, c, str(out.Service.ClusterArn), str(out.Service.ServiceArn), w.timeout)
	}
}

func serviceUpdate(fs *flag.FlagSet) action {
	var cluster, taskDef string
	var desired int
	var force bool
	var w waitFlags
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.StringVar(&taskDef, "task-definition", "", "new task definition `ARN|FAMILY[:REVISION]`")
	fs.IntVar(&desired, "desired-count", 0, "number of `tasks` to keep running")
	fs.BoolVar(&force, "force-new-deployment", false, "replace every task even if nothing changed")
	w.register(fs, "the deployment until it completes or fails")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "service NAME or ARN"); err != nil {
			return err
		}
		if err := w.check(); err != nil {
			return err
		}
		in := &ecs.UpdateServiceInput{Service: aws.String(args[0]), Cluster: optional(cluster), TaskDefinition: optional(taskDef), ForceNewDeployment: force}
		if s.set("desired-count") {
			if desired < 0 {
				return usageErrorf("--desired-count %d: want 0 or more", desired)
			}
			in.DesiredCount = aws.Int32(int32(desired))
		}
		if in.TaskDefinition == nil && in.DesiredCount == nil && !force {
			return usageErrorf("nothing to change: give --task-definition, --desired-count or --force-new-deployment")
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.UpdateService(ctx, in)
		if err != nil {
			return err
		}
		if err := s.show(out, func(w io.Writer) { serviceTable(w, []types.Service{*out.Service}) }); err != nil || !w.wait {
			return err
		}
		return s.followService(ctx, c, str(out.Service.ClusterArn), str(out.Service.ServiceArn), w.timeout)
	}
}

func serviceTable(w io.Writer, svcs []types.Service) {
	tw := newTable(w, "NAME", "STATUS", "DESIRED", "RUNNING", "PENDING", "TASK DEFINITION", "ROLLOUT", "CREATED")
	for _, v := range svcs {
		rollout := ""
		for _, d := range v.Deployments {
			if str(d.Status) == "PRIMARY" {
				rollout = string(d.RolloutState)
			}
		}
		row(tw, str(v.ServiceName), str(v.Status), strconv.Itoa(int(v.DesiredCount)), strconv.Itoa(int(v.RunningCount)),
			strconv.Itoa(int(v.PendingCount)), taskDefName(str(v.TaskDefinition)), rollout, ts(v.CreatedAt))
	}
	tw.Flush()
}

func deploymentTable(w io.Writer, deps []types.Deployment) {
	tw := newTable(w, "DEPLOYMENT", "STATUS", "TASK DEFINITION", "DESIRED", "RUNNING", "PENDING", "FAILED", "ROLLOUT", "UPDATED")
	for _, d := range deps {
		row(tw, str(d.Id), str(d.Status), taskDefName(str(d.TaskDefinition)), strconv.Itoa(int(d.DesiredCount)),
			strconv.Itoa(int(d.RunningCount)), strconv.Itoa(int(d.PendingCount)), strconv.Itoa(int(d.FailedTasks)),
			string(d.RolloutState), ts(d.UpdatedAt))
	}
	tw.Flush()
}

func (s *session) describeServices(ctx context.Context, c *ecs.Client, cluster string, refs []string) (*ecs.DescribeServicesOutput, error) {
	out := &ecs.DescribeServicesOutput{Services: []types.Service{}}
	for i := 0; i < len(refs); i += 10 {
		d, err := c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: optional(cluster), Services: refs[i:min(i+10, len(refs))],
			Include: []types.ServiceField{types.ServiceFieldTags}})
		if err != nil {
			return nil, err
		}
		out.Services = append(out.Services, d.Services...)
		out.Failures = append(out.Failures, d.Failures...)
	}
	return out, nil
}

func serviceDescribe(fs *flag.FlagSet) action {
	var cluster string
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, -1, "service NAME or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := s.describeServices(ctx, c, cluster, args)
		if err != nil {
			return err
		}
		err = s.show(out, func(w io.Writer) {
			for i, v := range out.Services {
				if i > 0 {
					fmt.Fprintln(w)
				}
				f := newFields(w)
				f.add("Name", str(v.ServiceName))
				f.add("ARN", str(v.ServiceArn))
				f.add("Cluster", lastSegment(str(v.ClusterArn)))
				f.add("Status", str(v.Status))
				f.add("Task definition", taskDefName(str(v.TaskDefinition)))
				f.add("Desired / running / pending", fmt.Sprintf("%d / %d / %d", v.DesiredCount, v.RunningCount, v.PendingCount))
				f.add("Scheduling", string(v.SchedulingStrategy))
				f.add("Execute command", strconv.FormatBool(v.EnableExecuteCommand))
				f.add("Created", ts(v.CreatedAt))
				f.add("Tags", tagText(v.Tags, tagKV))
				f.flush()
				fmt.Fprintln(w)
				deploymentTable(w, v.Deployments)
			}
		})
		return errors.Join(err, failuresError("service", out.Failures))
	}
}

func serviceList(fs *flag.FlagSet) action {
	var cluster string
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		all := &ecs.ListServicesOutput{ServiceArns: []string{}}
		p := ecs.NewListServicesPaginator(c, &ecs.ListServicesInput{Cluster: optional(cluster)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return err
			}
			all.ServiceArns = append(all.ServiceArns, page.ServiceArns...)
		}
		if s.json() {
			return s.show(all, nil)
		}
		out, err := s.describeServices(ctx, c, cluster, all.ServiceArns)
		if err != nil {
			return err
		}
		serviceTable(s.stdout, out.Services)
		return nil
	}
}

func serviceDelete(fs *flag.FlagSet) action {
	var cluster string
	var force bool
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.BoolVar(&force, "force", false, "delete even if the desired count is above 0")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "service NAME or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		in := &ecs.DeleteServiceInput{Service: aws.String(args[0]), Cluster: optional(cluster)}
		if force {
			in.Force = aws.Bool(true)
		}
		out, err := c.DeleteService(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { serviceTable(w, []types.Service{*out.Service}) })
	}
}

func serviceStatus(fs *flag.FlagSet) action {
	var cluster string
	var w waitFlags
	var events int
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	w.register(fs, "the PRIMARY deployment until it completes or fails")
	fs.IntVar(&events, "events", 5, "show the latest `n` service events")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "service NAME or ARN"); err != nil {
			return err
		}
		if err := w.check(); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := s.describeServices(ctx, c, cluster, args)
		if err != nil {
			return err
		}
		if err := failuresError("service", out.Failures); err != nil {
			return err
		}
		v := out.Services[0]
		if w.wait {
			return s.followService(ctx, c, str(v.ClusterArn), str(v.ServiceArn), w.timeout)
		}
		return s.show(out, func(w io.Writer) {
			fmt.Fprintf(w, "Service %s: %s, %d desired, %d running, %d pending\n\n", str(v.ServiceName), str(v.Status), v.DesiredCount, v.RunningCount, v.PendingCount)
			deploymentTable(w, v.Deployments)
			if len(v.Events) > 0 && events > 0 {
				fmt.Fprintln(w)
				for _, e := range v.Events[:min(events, len(v.Events))] {
					fmt.Fprintf(w, "%s  %s\n", ts(e.CreatedAt), str(e.Message))
				}
			}
		})
	}
}

// followService polls the service until its PRIMARY deployment's rollout
// ends, printing a line whenever the deployment's counts change.
func (s *session) followService(ctx context.Context, c *ecs.Client, cluster, service string, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	last := ""
	for {
		out, err := c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String(cluster), Services: []string{service}})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		if err := failuresError("service", out.Failures); err != nil {
			return err
		}
		var primary *types.Deployment
		for i, d := range out.Services[0].Deployments {
			if str(d.Status) == "PRIMARY" {
				primary = &out.Services[0].Deployments[i]
			}
		}
		if primary == nil {
			return fmt.Errorf("service %s has no PRIMARY deployment", lastSegment(service))
		}
		line := fmt.Sprintf("deployment %s (%s): %s, %d of %d running, %d pending, %d failed", str(primary.Id), taskDefName(str(primary.TaskDefinition)),
			primary.RolloutState, primary.RunningCount, primary.DesiredCount, primary.PendingCount, primary.FailedTasks)
		if line != last {
			fmt.Fprintln(s.stdout, line)
			last = line
		}
		switch primary.RolloutState {
		case types.DeploymentRolloutStateCompleted:
			return nil
		case types.DeploymentRolloutStateFailed:
			return &exitStatus{code: exitStopped, msg: fmt.Sprintf("deployment %s FAILED: %s", str(primary.Id), str(primary.RolloutStateReason))}
		}
		select {
		case <-ctx.Done():
		case <-time.After(rolloutPoll):
			continue
		}
		break
	}
	if timeout == 0 {
		return errors.New("interrupted; the deployment goes on (capstan service status --wait follows it again)")
	}
	return &exitStatus{code: exitTimeout, msg: fmt.Sprintf("timed out after %s; the deployment goes on", timeout)}
}
