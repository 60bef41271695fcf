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

func clusterNoun() *noun {
	return &noun{
		name:    "cluster",
		summary: "Clusters group capacity providers, daemons, services and tasks.",
		verbs: []*verb{
			{name: "create", args: "NAME [--tag KEY=VALUE]...", summary: "Create a cluster (creating an existing one returns it).", bind: clusterCreate},
			{name: "describe", args: "NAME|ARN...", summary: "Show clusters in detail.", bind: clusterDescribe},
			{name: "list", args: "", summary: "List clusters.", bind: clusterList},
			{name: "delete", args: "NAME|ARN", summary: "Delete a cluster.", bind: clusterDelete},
		},
	}
}

func clusterCreate(fs *flag.FlagSet) action {
	var tags tagFlag
	fs.Var(&tags, "tag", "resource tag `KEY=VALUE` (repeatable)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "cluster NAME"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(args[0]), Tags: tags})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { clusterTable(w, []types.Cluster{*out.Cluster}) })
	}
}

func clusterDescribe(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, -1, "cluster NAME or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: args, Include: []types.ClusterField{types.ClusterFieldTags}})
		if err != nil {
			return err
		}
		err = s.show(out, func(w io.Writer) {
			for i, cl := range out.Clusters {
				if i > 0 {
					fmt.Fprintln(w)
				}
				f := newFields(w)
				f.add("Name", str(cl.ClusterName))
				f.add("ARN", str(cl.ClusterArn))
				f.add("Status", str(cl.Status))
				f.add("Capacity providers", strings.Join(cl.CapacityProviders, ", "))
				f.add("Container instances", strconv.Itoa(int(cl.RegisteredContainerInstancesCount)))
				f.add("Running tasks", strconv.Itoa(int(cl.RunningTasksCount)))
				f.add("Pending tasks", strconv.Itoa(int(cl.PendingTasksCount)))
				f.add("Active services", strconv.Itoa(int(cl.ActiveServicesCount)))
				f.add("Tags", tagText(cl.Tags, tagKV))
				f.flush()
			}
		})
		return errors.Join(err, failuresError("cluster", out.Failures))
	}
}

func clusterList(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		all := &ecs.ListClustersOutput{ClusterArns: []string{}}
		p := ecs.NewListClustersPaginator(c, &ecs.ListClustersInput{})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return err
			}
			all.ClusterArns = append(all.ClusterArns, page.ClusterArns...)
		}
		if s.json() {
			return s.show(all, nil)
		}
		// The table shows more than ARNs, which costs a describe per 100.
		var clusters []types.Cluster
		for i := 0; i < len(all.ClusterArns); i += 100 {
			d, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: all.ClusterArns[i:min(i+100, len(all.ClusterArns))]})
			if err != nil {
				return err
			}
			clusters = append(clusters, d.Clusters...)
		}
		clusterTable(s.stdout, clusters)
		return nil
	}
}

func clusterDelete(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "cluster NAME or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.DeleteCluster(ctx, &ecs.DeleteClusterInput{Cluster: aws.String(args[0])})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { clusterTable(w, []types.Cluster{*out.Cluster}) })
	}
}

func clusterTable(w io.Writer, clusters []types.Cluster) {
	tw := newTable(w, "NAME", "STATUS", "INSTANCES", "RUNNING", "PENDING", "SERVICES", "CAPACITY PROVIDERS")
	for _, cl := range clusters {
		row(tw, str(cl.ClusterName), str(cl.Status),
			strconv.Itoa(int(cl.RegisteredContainerInstancesCount)),
			strconv.Itoa(int(cl.RunningTasksCount)),
			strconv.Itoa(int(cl.PendingTasksCount)),
			strconv.Itoa(int(cl.ActiveServicesCount)),
			strings.Join(cl.CapacityProviders, ","))
	}
	tw.Flush()
}

func tagKV(t types.Tag) (string, string) { return str(t.Key), str(t.Value) }

// failuresError turns describe failures (unknown names) into an error, so
// the command exits 1 after printing what it found.
func failuresError(kind string, failures []types.Failure) error {
	var errs []error
	for _, f := range failures {
		msg := fmt.Sprintf("%s %s", kind, str(f.Arn))
		if d := str(f.Detail); d != "" {
			msg += ": " + d
		}
		errs = append(errs, &apiError{code: str(f.Reason), msg: msg})
	}
	return errors.Join(errs...)
}
