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

const registerDetails = `
FILE is the request JSON, the same document the AWS CLI takes with
--cli-input-json (member names as in the ECS API: "family",
"containerDefinitions", ...); "-" reads standard input. Members the request
does not have are rejected by name, so read-only members of describe output
(arn, revision, status, ...) must be removed first.`

func taskDefinitionNoun() *noun {
	return &noun{
		name:    "task-definition",
		summary: "Task definitions describe application tasks; each registration is a new revision.",
		verbs: []*verb{
			{name: "register", args: "-f FILE [--tag KEY=VALUE]...", summary: "Register a task definition revision.", details: registerDetails, bind: taskDefinitionRegister},
			{name: "describe", args: "FAMILY[:REVISION]|ARN", summary: "Show a task definition (the latest ACTIVE revision for a bare family).", bind: taskDefinitionDescribe},
			{name: "list", args: "[--family-prefix P] [--status S] [--sort ASC|DESC]", summary: "List task definition revisions.", bind: taskDefinitionList},
			{name: "deregister", args: "FAMILY:REVISION|ARN", summary: "Mark a task definition revision INACTIVE.", bind: taskDefinitionDeregister},
		},
	}
}

func taskDefinitionRegister(fs *flag.FlagSet) action {
	var file string
	var tags tagFlag
	fs.StringVar(&file, "f", "", "RegisterTaskDefinition request `file` (JSON; required)")
	fs.Var(&tags, "tag", "resource tag `KEY=VALUE` (repeatable; added to the file's)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		if file == "" {
			return usageErrorf("missing -f FILE")
		}
		in := &ecs.RegisterTaskDefinitionInput{}
		if err := readInputFile(file, s.stdin, in); err != nil {
			return err
		}
		in.Tags = append(in.Tags, tags...)
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.RegisterTaskDefinition(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { taskDefinitionTable(w, []types.TaskDefinition{*out.TaskDefinition}) })
	}
}

func taskDefinitionDescribe(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "task definition FAMILY[:REVISION] or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{
			TaskDefinition: aws.String(args[0]),
			Include:        []types.TaskDefinitionField{types.TaskDefinitionFieldTags},
		})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) {
			td := out.TaskDefinition
			f := newFields(w)
			f.add("ARN", str(td.TaskDefinitionArn))
			f.add("Family", str(td.Family))
			f.add("Revision", strconv.Itoa(int(td.Revision)))
			f.add("Status", string(td.Status))
			f.add("Network mode", string(td.NetworkMode))
			f.add("CPU", str(td.Cpu))
			f.add("Memory", str(td.Memory))
			f.add("PID mode", string(td.PidMode))
			f.add("IPC mode", string(td.IpcMode))
			f.add("Task role", str(td.TaskRoleArn))
			f.add("Execution role", str(td.ExecutionRoleArn))
			f.add("Requires", joinEnums(td.RequiresCompatibilities))
			f.add("Registered", ts(td.RegisteredAt))
			f.add("Registered by", str(td.RegisteredBy))
			f.add("Tags", tagText(out.Tags, tagKV))
			f.flush()
			fmt.Fprintln(w)
			tw := newTable(w, "CONTAINER", "IMAGE", "CPU", "MEMORY", "ESSENTIAL", "PORTS")
			for _, cd := range td.ContainerDefinitions {
				row(tw, str(cd.Name), str(cd.Image), strconv.Itoa(int(cd.Cpu)), memoryText(cd.Memory, cd.MemoryReservation),
					boolText(cd.Essential), portsText(cd.PortMappings))
			}
			tw.Flush()
			if len(td.Volumes) > 0 {
				fmt.Fprintln(w)
				tw := newTable(w, "VOLUME", "HOST PATH")
				for _, v := range td.Volumes {
					var src string
					if v.Host != nil {
						src = str(v.Host.SourcePath)
					}
					row(tw, str(v.Name), src)
				}
				tw.Flush()
			}
		})
	}
}

func taskDefinitionList(fs *flag.FlagSet) action {
	var prefix, status, sort string
	fs.StringVar(&prefix, "family-prefix", "", "only families starting with `prefix`")
	fs.StringVar(&status, "status", "", "`status`: ACTIVE (default), INACTIVE or DELETE_IN_PROGRESS")
	fs.StringVar(&sort, "sort", "", "`order`: ASC (default) or DESC")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		in := &ecs.ListTaskDefinitionsInput{}
		if prefix != "" {
			in.FamilyPrefix = aws.String(prefix)
		}
		if status != "" {
			v, err := upperEnum("status", status, "ACTIVE", "INACTIVE", "DELETE_IN_PROGRESS")
			if err != nil {
				return err
			}
			in.Status = types.TaskDefinitionStatus(v)
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
		all := &ecs.ListTaskDefinitionsOutput{TaskDefinitionArns: []string{}}
		p := ecs.NewListTaskDefinitionsPaginator(c, in)
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return err
			}
			all.TaskDefinitionArns = append(all.TaskDefinitionArns, page.TaskDefinitionArns...)
		}
		return s.show(all, func(w io.Writer) {
			tw := newTable(w, "FAMILY", "REVISION", "ARN")
			for _, arn := range all.TaskDefinitionArns {
				fam, rev := familyRevision(arn)
				row(tw, fam, rev, arn)
			}
			tw.Flush()
		})
	}
}

func taskDefinitionDeregister(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "task definition FAMILY:REVISION or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String(args[0])})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { taskDefinitionTable(w, []types.TaskDefinition{*out.TaskDefinition}) })
	}
}

func taskDefinitionTable(w io.Writer, tds []types.TaskDefinition) {
	tw := newTable(w, "FAMILY", "REVISION", "STATUS", "CPU", "MEMORY", "CONTAINERS", "ARN")
	for _, td := range tds {
		row(tw, str(td.Family), strconv.Itoa(int(td.Revision)), string(td.Status), str(td.Cpu), str(td.Memory),
			strconv.Itoa(len(td.ContainerDefinitions)), str(td.TaskDefinitionArn))
	}
	tw.Flush()
}

func joinEnums[T ~string](vs []T) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}

// memoryText shows the hard limit, or the soft one marked as such.
func memoryText(hard, soft *int32) string {
	switch {
	case hard != nil && soft != nil:
		return i32(hard) + " (soft " + i32(soft) + ")"
	case hard != nil:
		return i32(hard)
	case soft != nil:
		return "soft " + i32(soft)
	}
	return ""
}

func portsText(pms []types.PortMapping) string {
	parts := make([]string, 0, len(pms))
	for _, p := range pms {
		c := i32(p.ContainerPort)
		if c == "" {
			c = str(p.ContainerPortRange)
		}
		if h := i32(p.HostPort); h != "" {
			c = h + ":" + c
		}
		if p.Protocol != "" {
			c += "/" + string(p.Protocol)
		}
		parts = append(parts, c)
	}
	return strings.Join(parts, ", ")
}
