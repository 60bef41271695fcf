package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// The identity nouns (user, group, policy, whoami) are built on the SDK's
// IAM and STS clients: the server speaks those APIs on the same endpoint.

func (s *session) iam(ctx context.Context) (*iam.Client, error) {
	if _, err := s.client(ctx); err != nil {
		return nil, err
	}
	return iam.NewFromConfig(s.conn.aws, func(o *iam.Options) { o.BaseEndpoint = aws.String(s.conn.endpoint) }), nil
}

func (s *session) sts(ctx context.Context) (*sts.Client, error) {
	if _, err := s.client(ctx); err != nil {
		return nil, err
	}
	return sts.NewFromConfig(s.conn.aws, func(o *sts.Options) { o.BaseEndpoint = aws.String(s.conn.endpoint) }), nil
}

// iamAction is an action on min to max arguments (want names them when
// missing) with an IAM client.
func iamAction(min, max int, want string, run func(ctx context.Context, s *session, c *iam.Client, args []string) error) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, min, max, want); err != nil {
			return err
		}
		c, err := s.iam(ctx)
		if err != nil {
			return err
		}
		return run(ctx, s, c, args)
	}
}

// allPages reads every page of p and returns their items.
func allPages[O, T any](ctx context.Context, p interface {
	HasMorePages() bool
	NextPage(context.Context, ...func(*iam.Options)) (*O, error)
}, items func(*O) []T) ([]T, error) {
	out := []T{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, items(page)...)
	}
	return out, nil
}

func userNoun() *noun {
	return &noun{
		name:    "user",
		summary: "IAM users: people and programs with their own access keys and policies.",
		verbs: append([]*verb{
			{name: "create", args: "NAME [--path /P/] [--tag KEY=VALUE]...", summary: "Create a user (no keys, no permissions).", bind: userCreate},
			{name: "list", args: "[--path-prefix /P/]", summary: "List users.", bind: userList},
			{name: "show", args: "[NAME]", summary: "Show a user (yourself without NAME): groups, policies, keys.", bind: userShow},
			{name: "delete", args: "NAME", summary: "Delete a user that has no keys, policies or groups left.", bind: userDelete},
			{name: "create-key", args: "NAME", summary: "Create an access key (at most two per user); the secret is shown once.", bind: userCreateKey},
			{name: "list-keys", args: "NAME", summary: "List a user's access keys.", bind: userListKeys},
			{name: "activate-key", args: "NAME KEY-ID", summary: "Let an access key authenticate again.", bind: userKeyStatus("Active")},
			{name: "deactivate-key", args: "NAME KEY-ID", summary: "Stop an access key from authenticating (it is kept).", bind: userKeyStatus("Inactive")},
			{name: "delete-key", args: "NAME KEY-ID", summary: "Delete an access key.", bind: userDeleteKey},
			{name: "add-to-group", args: "NAME GROUP", summary: "Make the user a member of a group.", bind: userAddToGroup},
			{name: "remove-from-group", args: "NAME GROUP", summary: "Remove the user from a group.", bind: userRemoveFromGroup},
		}, userPolicies.verbs()...),
	}
}

// iamTagFlag collects repeatable KEY=VALUE tags for IAM.
type iamTagFlag []iamtypes.Tag

func (t *iamTagFlag) String() string { return "" }

func (t *iamTagFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	*t = append(*t, iamtypes.Tag{Key: aws.String(k), Value: aws.String(val)})
	return nil
}

func iamTagKV(t iamtypes.Tag) (string, string) { return str(t.Key), str(t.Value) }

func userCreate(fs *flag.FlagSet) action {
	var tags iamTagFlag
	path := fs.String("path", "", "`path` of the user, e.g. /teams/apps/ (default /)")
	fs.Var(&tags, "tag", "tag `KEY=VALUE` (repeatable)")
	return iamAction(1, 1, "user NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		in := &iam.CreateUserInput{UserName: aws.String(args[0]), Tags: tags}
		if *path != "" {
			in.Path = path
		}
		out, err := c.CreateUser(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { userTable(w, []iamtypes.User{*out.User}) })
	})
}

func userList(fs *flag.FlagSet) action {
	prefix := fs.String("path-prefix", "", "only users whose path starts with `PREFIX`")
	return iamAction(0, 0, "", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		in := &iam.ListUsersInput{}
		if *prefix != "" {
			in.PathPrefix = prefix
		}
		users, err := allPages(ctx, iam.NewListUsersPaginator(c, in), func(o *iam.ListUsersOutput) []iamtypes.User { return o.Users })
		if err != nil {
			return err
		}
		all := &iam.ListUsersOutput{Users: users}
		return s.show(all, func(w io.Writer) { userTable(w, all.Users) })
	})
}

func userTable(w io.Writer, users []iamtypes.User) {
	tw := newTable(w, "NAME", "PATH", "CREATED", "ARN")
	for _, u := range users {
		row(tw, str(u.UserName), str(u.Path), ts(u.CreateDate), str(u.Arn))
	}
	tw.Flush()
}

func userShow(fs *flag.FlagSet) action {
	return iamAction(0, 1, "", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		in := &iam.GetUserInput{}
		if len(args) == 1 {
			in.UserName = aws.String(args[0])
		}
		out, err := c.GetUser(ctx, in)
		if err != nil {
			return err
		}
		if s.json() || out.User.UserName == nil { // the root has nothing more to show
			return s.show(out, func(w io.Writer) {
				f := newFields(w)
				f.add("ARN", str(out.User.Arn))
				f.add("Account", str(out.User.UserId))
				f.flush()
			})
		}
		name := out.User.UserName
		groups, err := c.ListGroupsForUser(ctx, &iam.ListGroupsForUserInput{UserName: name})
		if err != nil {
			return err
		}
		inline, err := c.ListUserPolicies(ctx, &iam.ListUserPoliciesInput{UserName: name})
		if err != nil {
			return err
		}
		attached, err := c.ListAttachedUserPolicies(ctx, &iam.ListAttachedUserPoliciesInput{UserName: name})
		if err != nil {
			return err
		}
		keys, err := c.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: name})
		if err != nil {
			return err
		}
		f := newFields(s.stdout)
		f.add("Name", str(name))
		f.add("ARN", str(out.User.Arn))
		f.add("User ID", str(out.User.UserId))
		f.add("Path", str(out.User.Path))
		f.add("Created", ts(out.User.CreateDate))
		f.add("Tags", tagText(out.User.Tags, iamTagKV))
		var gs []string
		for _, g := range groups.Groups {
			gs = append(gs, str(g.GroupName))
		}
		f.add("Groups", strings.Join(gs, ", "))
		f.add("Inline policies", strings.Join(inline.PolicyNames, ", "))
		f.add("Attached policies", attachedText(attached.AttachedPolicies))
		var ks []string
		for _, k := range keys.AccessKeyMetadata {
			ks = append(ks, str(k.AccessKeyId)+" ("+string(k.Status)+")")
		}
		f.add("Access keys", strings.Join(ks, ", "))
		f.flush()
		return nil
	})
}

func attachedText(ps []iamtypes.AttachedPolicy) string {
	var out []string
	for _, p := range ps {
		out = append(out, str(p.PolicyArn))
	}
	return strings.Join(out, ", ")
}

func userDelete(fs *flag.FlagSet) action {
	return iamAction(1, 1, "user NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		if _, err := c.DeleteUser(ctx, &iam.DeleteUserInput{UserName: aws.String(args[0])}); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "deleted user %s\n", args[0])
		return nil
	})
}

func userCreateKey(fs *flag.FlagSet) action {
	return iamAction(1, 1, "user NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		out, err := c.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(args[0])})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) {
			fmt.Fprintf(w, "AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n", str(out.AccessKey.AccessKeyId), str(out.AccessKey.SecretAccessKey))
		})
	})
}

func userListKeys(fs *flag.FlagSet) action {
	return iamAction(1, 1, "user NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		out, err := c.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: aws.String(args[0])})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) {
			tw := newTable(w, "ACCESS KEY ID", "STATUS", "CREATED")
			for _, k := range out.AccessKeyMetadata {
				row(tw, str(k.AccessKeyId), string(k.Status), ts(k.CreateDate))
			}
			tw.Flush()
		})
	})
}

func userKeyStatus(status iamtypes.StatusType) func(fs *flag.FlagSet) action {
	return func(fs *flag.FlagSet) action {
		return iamAction(2, 2, "user NAME and KEY-ID", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
			if _, err := c.UpdateAccessKey(ctx, &iam.UpdateAccessKeyInput{UserName: aws.String(args[0]), AccessKeyId: aws.String(args[1]), Status: status}); err != nil {
				return err
			}
			fmt.Fprintf(s.stdout, "access key %s of %s is %s\n", args[1], args[0], status)
			return nil
		})
	}
}

func userDeleteKey(fs *flag.FlagSet) action {
	return iamAction(2, 2, "user NAME and KEY-ID", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		if _, err := c.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: aws.String(args[0]), AccessKeyId: aws.String(args[1])}); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "deleted access key %s of %s\n", args[1], args[0])
		return nil
	})
}

func userAddToGroup(fs *flag.FlagSet) action {
	return iamAction(2, 2, "user NAME and GROUP", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		if _, err := c.AddUserToGroup(ctx, &iam.AddUserToGroupInput{UserName: aws.String(args[0]), GroupName: aws.String(args[1])}); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "%s is a member of %s\n", args[0], args[1])
		return nil
	})
}

func userRemoveFromGroup(fs *flag.FlagSet) action {
	return iamAction(2, 2, "user NAME and GROUP", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		if _, err := c.RemoveUserFromGroup(ctx, &iam.RemoveUserFromGroupInput{UserName: aws.String(args[0]), GroupName: aws.String(args[1])}); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "%s is no longer a member of %s\n", args[0], args[1])
		return nil
	})
}

// userPolicies are the SDK calls on a user's policies.
var userPolicies = policyHolder{
	noun: "user",
	put: func(ctx context.Context, c *iam.Client, name, policy, doc string) error {
		_, err := c.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: &name, PolicyName: &policy, PolicyDocument: &doc})
		return err
	},
	delete: func(ctx context.Context, c *iam.Client, name, policy string) error {
		_, err := c.DeleteUserPolicy(ctx, &iam.DeleteUserPolicyInput{UserName: &name, PolicyName: &policy})
		return err
	},
	attach: func(ctx context.Context, c *iam.Client, name, arn string, detach bool) (err error) {
		if detach {
			_, err = c.DetachUserPolicy(ctx, &iam.DetachUserPolicyInput{UserName: &name, PolicyArn: &arn})
		} else {
			_, err = c.AttachUserPolicy(ctx, &iam.AttachUserPolicyInput{UserName: &name, PolicyArn: &arn})
		}
		return err
	},
}

// documentFlag registers --document: a file, "-" for standard input, or
// the JSON itself.
func documentFlag(fs *flag.FlagSet) *string {
	return fs.String("document", "", "policy document: a `FILE`, - for standard input, or the JSON itself (required)")
}

func readDocument(s *session, v string) (string, error) {
	v = strings.TrimSpace(v)
	var b []byte
	var err error
	switch {
	case v == "":
		return "", usageErrorf("--document is required")
	case strings.HasPrefix(v, "{"):
		return v, nil
	case v == "-":
		b, err = io.ReadAll(s.stdin)
	default:
		b, err = os.ReadFile(strings.TrimPrefix(v, "file://"))
	}
	if err != nil {
		return "", fmt.Errorf("--document: %w", err)
	}
	return string(b), nil
}

// resolvePolicy takes a managed policy's ARN, or its name, which it looks
// up among the account's policies.
func resolvePolicy(ctx context.Context, c *iam.Client, v string) (string, error) {
	if strings.HasPrefix(v, "arn:") {
		return v, nil
	}
	p := iam.NewListPoliciesPaginator(c, &iam.ListPoliciesInput{Scope: iamtypes.PolicyScopeTypeLocal})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return "", err
		}
		for _, pol := range page.Policies {
			if strings.EqualFold(str(pol.PolicyName), v) {
				return str(pol.Arn), nil
			}
		}
	}
	return "", &apiError{code: "NoSuchEntity", msg: fmt.Sprintf("no managed policy is named %s", v)}
}

// decodeDocument undoes the URL encoding IAM returns documents in.
func decodeDocument(d *string) string {
	if d == nil {
		return ""
	}
	if u, err := url.PathUnescape(*d); err == nil {
		return u
	}
	return *d
}

// prettyDocument indents a policy document for a table.
func prettyDocument(doc string) string {
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		return doc
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return doc
	}
	return string(b)
}

func whoamiNoun() *noun {
	return &noun{
		name:    "whoami",
		summary: "Show who the configured credential is (STS GetCallerIdentity).",
		run: &verb{
			summary: "Show the account, ARN and user ID of the caller.",
			bind:    whoamiRun,
		},
	}
}

func whoamiRun(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		c, err := s.sts(ctx)
		if err != nil {
			return err
		}
		out, err := c.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) {
			f := newFields(w)
			f.add("Account", str(out.Account))
			f.add("ARN", str(out.Arn))
			f.add("User ID", str(out.UserId))
			f.flush()
		})
	}
}
