package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
)

func groupNoun() *noun {
	return &noun{
		name:    "group",
		summary: "IAM groups: their policies apply to every member.",
		verbs: []*verb{
			{name: "create", args: "NAME [--path /P/]", summary: "Create a group.", bind: groupCreate},
			{name: "list", args: "[--path-prefix /P/]", summary: "List groups.", bind: groupList},
			{name: "show", args: "NAME", summary: "Show a group: members and policies.", bind: groupShow},
			{name: "delete", args: "NAME", summary: "Delete a group without members or policies.", bind: groupDelete},
			{name: "put-policy", args: "NAME POLICY-NAME --document FILE|JSON", summary: "Add or replace an inline policy of the group.", bind: groupPutPolicy},
			{name: "delete-policy", args: "NAME POLICY-NAME", summary: "Delete an inline policy of the group.", bind: groupDeletePolicy},
			{name: "attach-policy", args: "NAME POLICY-ARN|POLICY-NAME", summary: "Attach a managed policy to the group.", bind: groupAttach(false)},
			{name: "detach-policy", args: "NAME POLICY-ARN|POLICY-NAME", summary: "Detach a managed policy from the group.", bind: groupAttach(true)},
		},
	}
}

func groupCreate(fs *flag.FlagSet) action {
	path := fs.String("path", "", "`path` of the group (default /)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "group NAME"); err != nil {
			return err
		}
		c, err := s.iam(ctx)
		if err != nil {
			return err
		}
		in := &iam.CreateGroupInput{GroupName: aws.String(args[0])}
		if *path != "" {
			in.Path = path
		}
		out, err := c.CreateGroup(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { groupTable(w, []iamtypes.Group{*out.Group}) })
	}
}

func groupList(fs *flag.FlagSet) action {
	prefix := fs.String("path-prefix", "", "only groups whose path starts with `PREFIX`")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		c, err := s.iam(ctx)
		if err != nil {
			return err
		}
		in := &iam.ListGroupsInput{}
		if *prefix != "" {
			in.PathPrefix = prefix
		}
		all := &iam.ListGroupsOutput{Groups: []iamtypes.Group{}}
		p := iam.NewListGroupsPaginator(c, in)
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return err
			}
			all.Groups = append(all.Groups, page.Groups...)
		}
		return s.show(all, func(w io.Writer) { groupTable(w, all.Groups) })
	}
}

func groupTable(w io.Writer, groups []iamtypes.Group) {
	tw := newTable(w, "NAME", "PATH", "CREATED", "ARN")
	for _, g := range groups {
		row(tw, str(g.GroupName), str(g.Path), ts(g.CreateDate), str(g.Arn))
	}
	tw.Flush()
}

func groupShow(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "group NAME"); err != nil {
			return err
		}
		c, err := s.iam(ctx)
		if err != nil {
			return err
		}
		name := aws.String(args[0])
		out, err := c.GetGroup(ctx, &iam.GetGroupInput{GroupName: name})
		if err != nil {
			return err
		}
		if s.json() {
			return s.show(out, nil)
		}
		inline, err := c.ListGroupPolicies(ctx, &iam.ListGroupPoliciesInput{GroupName: name})
		if err != nil {
			return err
		}
		attached, err := c.ListAttachedGroupPolicies(ctx, &iam.ListAttachedGroupPoliciesInput{GroupName: name})
		if err != nil {
			return err
		}
		f := newFields(s.stdout)
		f.add("Name", str(out.Group.GroupName))
		f.add("ARN", str(out.Group.Arn))
		f.add("Path", str(out.Group.Path))
		f.add("Created", ts(out.Group.CreateDate))
		var members []string
		for _, u := range out.Users {
			members = append(members, str(u.UserName))
		}
		f.add("Members", strings.Join(members, ", "))
		f.add("Inline policies", strings.Join(inline.PolicyNames, ", "))
		f.add("Attached policies", attachedText(attached.AttachedPolicies))
		f.flush()
		return nil
	}
}

func groupDelete(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "group NAME"); err != nil {
			return err
		}
		c, err := s.iam(ctx)
		if err != nil {
			return err
		}
		if _, err := c.DeleteGroup(ctx, &iam.DeleteGroupInput{GroupName: aws.String(args[0])}); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "deleted group %s\n", args[0])
		return nil
	}
}

func groupPutPolicy(fs *flag.FlagSet) action {
	doc := documentFlag(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 2, 2, "group NAME and POLICY-NAME"); err != nil {
			return err
		}
		d, err := readDocument(s, *doc)
		if err != nil {
			return err
		}
		c, err := s.iam(ctx)
		if err != nil {
			return err
		}
		if _, err := c.PutGroupPolicy(ctx, &iam.PutGroupPolicyInput{GroupName: aws.String(args[0]), PolicyName: aws.String(args[1]), PolicyDocument: aws.String(d)}); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "put policy %s on group %s\n", args[1], args[0])
		return nil
	}
}

func groupDeletePolicy(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 2, 2, "group NAME and POLICY-NAME"); err != nil {
			return err
		}
		c, err := s.iam(ctx)
		if err != nil {
			return err
		}
		if _, err := c.DeleteGroupPolicy(ctx, &iam.DeleteGroupPolicyInput{GroupName: aws.String(args[0]), PolicyName: aws.String(args[1])}); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "deleted policy %s of group %s\n", args[1], args[0])
		return nil
	}
}

func groupAttach(detach bool) func(fs *flag.FlagSet) action {
	return func(fs *flag.FlagSet) action {
		return func(ctx context.Context, s *session, args []string) error {
			if err := wantArgs(args, 2, 2, "group NAME and POLICY"); err != nil {
				return err
			}
			c, err := s.iam(ctx)
			if err != nil {
				return err
			}
			arn, err := resolvePolicy(ctx, c, args[1])
			if err != nil {
				return err
			}
			if detach {
				_, err = c.DetachGroupPolicy(ctx, &iam.DetachGroupPolicyInput{GroupName: aws.String(args[0]), PolicyArn: aws.String(arn)})
			} else {
				_, err = c.AttachGroupPolicy(ctx, &iam.AttachGroupPolicyInput{GroupName: aws.String(args[0]), PolicyArn: aws.String(arn)})
			}
			if err != nil {
				return err
			}
			verb := "attached %s to group %s\n"
			if detach {
				verb = "detached %s from group %s\n"
			}
			fmt.Fprintf(s.stdout, verb, arn, args[0])
			return nil
		}
	}
}
