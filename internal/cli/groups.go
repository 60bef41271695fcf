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
		verbs: append([]*verb{
			{name: "create", args: "NAME [--path /P/]", summary: "Create a group.", bind: groupCreate},
			{name: "list", args: "[--path-prefix /P/]", summary: "List groups.", bind: groupList},
			{name: "show", args: "NAME", summary: "Show a group: members and policies.", bind: groupShow},
			{name: "delete", args: "NAME", summary: "Delete a group without members or policies.", bind: groupDelete},
		}, groupPolicies.verbs()...),
	}
}

func groupCreate(fs *flag.FlagSet) action {
	path := fs.String("path", "", "`path` of the group (default /)")
	return iamAction(1, 1, "group NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		in := &iam.CreateGroupInput{GroupName: aws.String(args[0])}
		if *path != "" {
			in.Path = path
		}
		out, err := c.CreateGroup(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { groupTable(w, []iamtypes.Group{*out.Group}) })
	})
}

func groupList(fs *flag.FlagSet) action {
	prefix := fs.String("path-prefix", "", "only groups whose path starts with `PREFIX`")
	return iamAction(0, 0, "", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		in := &iam.ListGroupsInput{}
		if *prefix != "" {
			in.PathPrefix = prefix
		}
		groups, err := allPages(ctx, iam.NewListGroupsPaginator(c, in), func(o *iam.ListGroupsOutput) []iamtypes.Group { return o.Groups })
		if err != nil {
			return err
		}
		all := &iam.ListGroupsOutput{Groups: groups}
		return s.show(all, func(w io.Writer) { groupTable(w, all.Groups) })
	})
}

func groupTable(w io.Writer, groups []iamtypes.Group) {
	tw := newTable(w, "NAME", "PATH", "CREATED", "ARN")
	for _, g := range groups {
		row(tw, str(g.GroupName), str(g.Path), ts(g.CreateDate), str(g.Arn))
	}
	tw.Flush()
}

func groupShow(fs *flag.FlagSet) action {
	return iamAction(1, 1, "group NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
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
	})
}

func groupDelete(fs *flag.FlagSet) action {
	return iamAction(1, 1, "group NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		if _, err := c.DeleteGroup(ctx, &iam.DeleteGroupInput{GroupName: aws.String(args[0])}); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "deleted group %s\n", args[0])
		return nil
	})
}

// groupPolicies are the SDK calls on a group's policies.
var groupPolicies = policyHolder{
	noun: "group",
	put: func(ctx context.Context, c *iam.Client, name, policy, doc string) error {
		_, err := c.PutGroupPolicy(ctx, &iam.PutGroupPolicyInput{GroupName: &name, PolicyName: &policy, PolicyDocument: &doc})
		return err
	},
	delete: func(ctx context.Context, c *iam.Client, name, policy string) error {
		_, err := c.DeleteGroupPolicy(ctx, &iam.DeleteGroupPolicyInput{GroupName: &name, PolicyName: &policy})
		return err
	},
	attach: func(ctx context.Context, c *iam.Client, name, arn string, detach bool) (err error) {
		if detach {
			_, err = c.DetachGroupPolicy(ctx, &iam.DetachGroupPolicyInput{GroupName: &name, PolicyArn: &arn})
		} else {
			_, err = c.AttachGroupPolicy(ctx, &iam.AttachGroupPolicyInput{GroupName: &name, PolicyArn: &arn})
		}
		return err
	},
}
