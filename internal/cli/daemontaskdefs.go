package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

func daemonTaskDefinitionNoun() *noun {
	return &noun{
		name:    "daemon-task-definition",
		summary: "Daemon task definitions describe per-instance agents; each registration is a new revision.",
		verbs: []*verb{
			{name: "register", args: "-f FILE [--tag KEY=VALUE]...", summary: "Register a daemon task definition revision.", details: registerDetails, bind: daemonTaskDefinitionRegister},
			{name: "describe", args: "FAMILY[:REVISION]|ARN", summary: "Show a daemon task definition (the latest ACTIVE revision for a bare family).", bind: daemonTaskDefinitionDescribe},
			{name: "list", args: "[--family F | --family-prefix P] [--status S] [--latest] [--sort ASC|DESC]", summary: "List daemon task definition revisions.", bind: daemonTaskDefinitionList},
			{name: "delete", args: "FAMILY:REVISION|ARN", summary: "Delete a daemon task definition revision (daemons using it keep running).", bind: daemonTaskDefinitionDelete},
		},
	}
}

func daemonTaskDefinitionRegister(fs *flag.FlagSet) action {
	var file string
	var tags tagFlag
	fs.StringVar(&file, "f", "", "RegisterDaemonTaskDefinition request `file` (JSON; required)")
	fs.Var(&tags, "tag", "resource tag `KEY=VALUE` (repeatable; added to the file's)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		if file == "" {
			return usageErrorf("missing -f FILE")
		}
		in := &ecs.RegisterDaemonTaskDefinitionInput{}
		if err := readInputFile(file, s.stdin, in); err != nil {
			return err
		}
		in.Tags = append(in.Tags, tags...)
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.RegisterDaemonTaskDefinition(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) {
			tw := newTable(w, "FAMILY", "REVISION", "ARN")
			arn := str(out.DaemonTaskDefinitionArn)
			fam, rev := familyRevision(arn)
			row(tw, fam, rev, arn)
			tw.Flush()
		})
	}
}

func daemonTaskDefinitionDescribe(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "daemon task definition FAMILY[:REVISION] or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.DescribeDaemonTaskDefinition(ctx, &ecs.DescribeDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String(args[0])})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { daemonTaskDefinitionFields(w, out.DaemonTaskDefinition) })
	}
}

func daemonTaskDefinitionFields(w io.Writer, td *types.DaemonTaskDefinition) {
	f := newFields(w)
	f.add("ARN", str(td.DaemonTaskDefinitionArn))
	f.add("Family", str(td.Family))
	f.add("Revision", strconv.Itoa(int(td.Revision)))
	f.add("Status", string(td.Status))
	f.add("CPU", str(td.Cpu))
	f.add("Memory", str(td.Memory))
	f.add("PID mode", string(td.PidMode))
	f.add("IPC mode", string(td.IpcMode))
	f.add("Task role", str(td.TaskRoleArn))
	f.add("Execution role", str(td.ExecutionRoleArn))
	f.add("Registered", ts(td.RegisteredAt))
	f.add("Registered by", str(td.RegisteredBy))
	if td.DeleteRequestedAt != nil {
		f.add("Delete requested", ts(td.DeleteRequestedAt))
	}
	f.flush()

	fmt.Fprintln(w)
	tw := newTable(w, "CONTAINER", "IMAGE", "CPU", "MEMORY", "ESSENTIAL", "PRIVILEGED", "CAPABILITIES")
	for _, cd := range td.ContainerDefinitions {
		var caps string
		if lp := cd.LinuxParameters; lp != nil && lp.Capabilities != nil {
			caps = strings.Join(lp.Capabilities.Add, ",")
		}
		row(tw, str(cd.Name), str(cd.Image), strconv.Itoa(int(cd.Cpu)), memoryText(cd.Memory, cd.MemoryReservation),
			boolText(cd.Essential), boolText(cd.Privileged), caps)
	}
	tw.Flush()

	if len(td.Volumes) == 0 {
		return
	}
	fmt.Fprintln(w)
	sources := map[string]string{}
	for _, v := range td.Volumes {
		switch {
		case v.Host != nil:
			sources[str(v.Name)] = "host " + str(v.Host.SourcePath)
		case v.LogDriverVolumeConfiguration != nil:
			sources[str(v.Name)] = "log driver " + string(v.LogDriverVolumeConfiguration.Driver)
		default:
			sources[str(v.Name)] = "task scratch"
		}
	}
	tw = newTable(w, "VOLUME", "SOURCE", "CONTAINER", "PATH", "READ ONLY")
	mounted := map[string]bool{}
	for _, cd := range td.ContainerDefinitions {
		for _, m := range cd.MountPoints {
			mounted[str(m.SourceVolume)] = true
			row(tw, str(m.SourceVolume), sources[str(m.SourceVolume)], str(cd.Name), str(m.ContainerPath), boolText(m.ReadOnly))
		}
	}
	for _, v := range td.Volumes {
		if !mounted[str(v.Name)] {
			row(tw, str(v.Name), sources[str(v.Name)], "", "", "")
		}
	}
	tw.Flush()
}

func daemonTaskDefinitionList(fs *flag.FlagSet) action {
	var family, prefix, status, sort string
	var latest bool
	fs.StringVar(&family, "family", "", "only this `family`")
	fs.StringVar(&prefix, "family-prefix", "", "only families starting with `prefix`")
	fs.StringVar(&status, "status", "", "`status`: ACTIVE (default), DELETE_IN_PROGRESS or ALL")
	fs.BoolVar(&latest, "latest", false, "only the last registered revision of each family")
	fs.StringVar(&sort, "sort", "", "`order`: ASC (default) or DESC")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		in := &ecs.ListDaemonTaskDefinitionsInput{}
		if family != "" {
			in.Family = aws.String(family)
		}
		if prefix != "" {
			in.FamilyPrefix = aws.String(prefix)
		}
		if latest {
			in.Revision = types.DaemonTaskDefinitionRevisionFilterLastRegistered
		}
		if status != "" {
			v, err := upperEnum("status", status, "ACTIVE", "DELETE_IN_PROGRESS", "ALL")
			if err != nil {
				return err
			}
			in.Status = types.DaemonTaskDefinitionStatusFilter(v)
		}
		if sort != "" {
			v, err := upperEnum("sort", sort, "ASC", "DESC")
			if err != nil {
				return err
			}
			in.Sort = types.SortOrder(v)
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		// The daemon list operations have no SDK paginator.
		all := &ecs.ListDaemonTaskDefinitionsOutput{DaemonTaskDefinitions: []types.DaemonTaskDefinitionSummary{}}
		for {
			page, err := c.ListDaemonTaskDefinitions(ctx, in)
			if err != nil {
				return err
			}
			all.DaemonTaskDefinitions = append(all.DaemonTaskDefinitions, page.DaemonTaskDefinitions...)
			if aws.ToString(page.NextToken) == "" {
				break
			}
			in.NextToken = page.NextToken
		}
		return s.show(all, func(w io.Writer) {
			tw := newTable(w, "FAMILY", "REVISION", "STATUS", "REGISTERED", "ARN")
			for _, d := range all.DaemonTaskDefinitions {
				fam, rev := familyRevision(str(d.Arn))
				row(tw, fam, rev, string(d.Status), ts(d.RegisteredAt), str(d.Arn))
			}
			tw.Flush()
		})
	}
}

func daemonTaskDefinitionDelete(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "daemon task definition FAMILY:REVISION or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.DeleteDaemonTaskDefinition(ctx, &ecs.DeleteDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String(args[0])})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) {
			fmt.Fprintf(w, "deleting %s\n", str(out.DaemonTaskDefinitionArn))
		})
	}
}
