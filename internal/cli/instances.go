package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

func instanceNoun() *noun {
	return &noun{
		name:    "instance",
		summary: "Container instances: the hosts whose agents run tasks and daemons.",
		verbs: []*verb{
			{name: "list", args: "[--cluster C] [--status S]", summary: "List instances with their agent, daemons, tasks and free resources.", details: `
DAEMONS is the daemon tasks RUNNING on the instance over the ACTIVE daemons
of its capacity provider (the ones it should run).`, bind: instanceList},
			{name: "describe", args: "ID|ARN... [--cluster C]", summary: "Show instances in detail.", bind: instanceDescribe},
			{name: "drain", args: "ID|ARN... [--cluster C]", summary: "Set instances DRAINING: their tasks move elsewhere, no new ones come.", bind: instanceState(types.ContainerInstanceStatusDraining)},
			{name: "activate", args: "ID|ARN... [--cluster C]", summary: "Set DRAINING instances ACTIVE again.", bind: instanceState(types.ContainerInstanceStatusActive)},
			{name: "join", args: "--cluster C --capacity-provider CP [--count N]", summary: "Print the line that makes a machine of yours join a capacity provider.", details: joinDetails, bind: instanceJoin},
		},
	}
}

// instanceCounts is what the table shows of an instance beyond its record.
type instanceCounts struct {
	daemonsRunning, daemonsExpected int
}

func instanceList(fs *flag.FlagSet) action {
	var cluster, status string
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.StringVar(&status, "status", "", "only instances in `status`: ACTIVE, DRAINING, REGISTERING, ...")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		in := &ecs.ListContainerInstancesInput{Cluster: optional(cluster)}
		if status != "" {
			in.Status = types.ContainerInstanceStatus(strings.ToUpper(status))
		}
		all := &ecs.ListContainerInstancesOutput{ContainerInstanceArns: []string{}}
		p := ecs.NewListContainerInstancesPaginator(c, in)
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return err
			}
			all.ContainerInstanceArns = append(all.ContainerInstanceArns, page.ContainerInstanceArns...)
		}
		if s.json() {
			return s.show(all, nil)
		}
		insts, err := describeInstances(ctx, c, cluster, all.ContainerInstanceArns)
		if err != nil {
			return err
		}
		views, err := instanceViews(ctx, c, cluster, insts)
		if err != nil {
			return err
		}
		instanceTable(s.stdout, insts, views)
		return nil
	}
}

func describeInstances(ctx context.Context, c *ecs.Client, cluster string, refs []string) ([]types.ContainerInstance, error) {
	var out []types.ContainerInstance
	for i := 0; i < len(refs); i += 100 {
		d, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: optional(cluster), ContainerInstances: refs[i:min(i+100, len(refs))]})
		if err != nil {
			return nil, err
		}
		if err := failuresError("container instance", d.Failures); err != nil {
			return nil, err
		}
		out = append(out, d.ContainerInstances...)
	}
	return out, nil
}

// instanceViews counts, per instance ARN, the daemon tasks running on it
// (from the cluster's tasks, a describe per 100) and the ACTIVE daemons
// of its capacity provider (a daemon listing per provider).
func instanceViews(ctx context.Context, c *ecs.Client, cluster string, insts []types.ContainerInstance) (map[string]instanceCounts, error) {
	views := map[string]instanceCounts{}
	if len(insts) == 0 {
		return views, nil
	}
	tasks, err := listTasks(ctx, c, &ecs.ListTasksInput{Cluster: optional(cluster)})
	if err != nil {
		return nil, err
	}
	described, err := describeTasks(ctx, c, cluster, tasks)
	if err != nil {
		return nil, err
	}
	for _, t := range described {
		if strings.HasPrefix(str(t.Group), "daemon:") && str(t.LastStatus) == "RUNNING" {
			v := views[str(t.ContainerInstanceArn)]
			v.daemonsRunning++
			views[str(t.ContainerInstanceArn)] = v
		}
	}
	clusterArn := cluster
	if clusterArn == "" {
		clusterArn = "default" // ListDaemons without a cluster lists them all
	}
	expected := map[string]int{}
	for _, ci := range insts {
		cp := str(ci.CapacityProviderName)
		if cp == "" {
			continue
		}
		if _, done := expected[cp]; done {
			continue
		}
		n := 0
		in := &ecs.ListDaemonsInput{ClusterArn: aws.String(clusterArn), CapacityProviderArns: []string{cp}}
		for {
			page, err := c.ListDaemons(ctx, in)
			if err != nil {
				return nil, err
			}
			for _, d := range page.DaemonSummariesList {
				if d.Status == types.DaemonStatusActive {
					n++
				}
			}
			if aws.ToString(page.NextToken) == "" {
				break
			}
			in.NextToken = page.NextToken
		}
		expected[cp] = n
	}
	for _, ci := range insts {
		v := views[str(ci.ContainerInstanceArn)]
		v.daemonsExpected = expected[str(ci.CapacityProviderName)]
		views[str(ci.ContainerInstanceArn)] = v
	}
	return views, nil
}

// resource is an instance's integer resource by name ("" when absent).
func resource(rs []types.Resource, name string) string {
	for _, r := range rs {
		if str(r.Name) == name {
			return strconv.Itoa(int(r.IntegerValue))
		}
	}
	return ""
}

func agentVersion(ci types.ContainerInstance) string {
	if ci.VersionInfo == nil {
		return ""
	}
	return str(ci.VersionInfo.AgentVersion)
}

func instanceTable(w io.Writer, insts []types.ContainerInstance, views map[string]instanceCounts) {
	tw := newTable(w, "INSTANCE", "STATUS", "AGENT", "DAEMONS", "RUNNING", "PENDING", "FREE CPU", "FREE MEMORY", "CAPACITY PROVIDER", "VERSION")
	for _, ci := range insts {
		agent := "disconnected"
		if ci.AgentConnected {
			agent = "connected"
		}
		daemons := "" // not counted
		if v, ok := views[str(ci.ContainerInstanceArn)]; ok {
			daemons = fmt.Sprintf("%d/%d", v.daemonsRunning, v.daemonsExpected)
		}
		row(tw, lastSegment(str(ci.ContainerInstanceArn)), str(ci.Status), agent, daemons,
			strconv.Itoa(int(ci.RunningTasksCount)), strconv.Itoa(int(ci.PendingTasksCount)),
			resource(ci.RemainingResources, "CPU"), resource(ci.RemainingResources, "MEMORY"),
			str(ci.CapacityProviderName), agentVersion(ci))
	}
	tw.Flush()
}

func instanceDescribe(fs *flag.FlagSet) action {
	var cluster string
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 100, "instance ID or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: optional(cluster), ContainerInstances: args})
		if err != nil {
			return err
		}
		if s.json() {
			return errors.Join(s.show(out, nil), failuresError("container instance", out.Failures))
		}
		views, err := instanceViews(ctx, c, cluster, out.ContainerInstances)
		if err != nil {
			return err
		}
		for i, ci := range out.ContainerInstances {
			if i > 0 {
				fmt.Fprintln(s.stdout)
			}
			v := views[str(ci.ContainerInstanceArn)]
			f := newFields(s.stdout)
			f.add("Instance", lastSegment(str(ci.ContainerInstanceArn)))
			f.add("ARN", str(ci.ContainerInstanceArn))
			f.add("Status", str(ci.Status))
			if r := str(ci.StatusReason); r != "" {
				f.add("Status reason", r)
			}
			f.add("Agent connected", strconv.FormatBool(ci.AgentConnected))
			f.add("Agent version", agentVersion(ci))
			f.add("Capacity provider", str(ci.CapacityProviderName))
			f.add("Registered", ts(ci.RegisteredAt))
			f.add("Daemons running", fmt.Sprintf("%d of %d", v.daemonsRunning, v.daemonsExpected))
			f.add("Running tasks", strconv.Itoa(int(ci.RunningTasksCount)))
			f.add("Pending tasks", strconv.Itoa(int(ci.PendingTasksCount)))
			f.add("Free CPU", resource(ci.RemainingResources, "CPU")+" of "+resource(ci.RegisteredResources, "CPU"))
			f.add("Free memory", resource(ci.RemainingResources, "MEMORY")+" of "+resource(ci.RegisteredResources, "MEMORY")+" MiB")
			f.add("Attributes", tagText(ci.Attributes, func(a types.Attribute) (string, string) { return str(a.Name), str(a.Value) }))
			f.flush()
		}
		return failuresError("container instance", out.Failures)
	}
}

func instanceState(status types.ContainerInstanceStatus) func(fs *flag.FlagSet) action {
	return func(fs *flag.FlagSet) action {
		var cluster string
		fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
		return func(ctx context.Context, s *session, args []string) error {
			if err := wantArgs(args, 1, 10, "instance ID or ARN"); err != nil {
				return err
			}
			c, err := s.client(ctx)
			if err != nil {
				return err
			}
			out, err := c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{
				Cluster: optional(cluster), ContainerInstances: args, Status: status})
			if err != nil {
				return err
			}
			err = s.show(out, func(w io.Writer) { instanceTable(w, out.ContainerInstances, nil) })
			return errors.Join(err, failuresError("container instance", out.Failures))
		}
	}
}

// optional is nil for an empty flag, so the server applies its default.
func optional(v string) *string {
	if v == "" {
		return nil
	}
	return aws.String(v)
}
