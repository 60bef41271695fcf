package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
)

func policyNoun() *noun {
	return &noun{
		name:    "policy",
		summary: "Customer managed IAM policies, and what a user's policies decide.",
		verbs: []*verb{
			{name: "create", args: "NAME --document FILE|JSON [--description TEXT] [--path /P/]", summary: "Create a managed policy.", bind: policyCreate},
			{name: "list", args: "", summary: "List the account's managed policies.", bind: policyList},
			{name: "show", args: "ARN|NAME", summary: "Show a managed policy and its default document.", bind: policyShow},
			{name: "delete", args: "ARN|NAME", summary: "Delete a managed policy (detach it first); its old versions go with it.", bind: policyDelete},
			{name: "simulate", args: "--user NAME --action ACTION... [--resource ARN...] [--context KEY=VALUE...]",
				summary: "Show whether a user may perform actions, and which statements allow or deny them.",
				details: `
Asks the server's SimulatePrincipalPolicy: each action is decided on each
resource (* without --resource) against all of the user's policies, those of
its groups included. The statements that decided are listed with their policy,
Sid and lines. --context supplies condition keys (repeatable; a key given
twice has several values).`,
				bind: policySimulate},
		},
	}
}

func policyCreate(fs *flag.FlagSet) action {
	doc := documentFlag(fs)
	desc := fs.String("description", "", "what the policy is for")
	path := fs.String("path", "", "`path` of the policy (default /)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "policy NAME"); err != nil {
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
		in := &iam.CreatePolicyInput{PolicyName: aws.String(args[0]), PolicyDocument: aws.String(d)}
		if *desc != "" {
			in.Description = desc
		}
		if *path != "" {
			in.Path = path
		}
		out, err := c.CreatePolicy(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { policyTable(w, []iamtypes.Policy{*out.Policy}) })
	}
}

func policyList(fs *flag.FlagSet) action {
	return iamAction(0, 0, "", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		p := iam.NewListPoliciesPaginator(c, &iam.ListPoliciesInput{Scope: iamtypes.PolicyScopeTypeLocal})
		policies, err := allPages(ctx, p, func(o *iam.ListPoliciesOutput) []iamtypes.Policy { return o.Policies })
		if err != nil {
			return err
		}
		all := &iam.ListPoliciesOutput{Policies: policies}
		return s.show(all, func(w io.Writer) { policyTable(w, all.Policies) })
	})
}

func policyTable(w io.Writer, ps []iamtypes.Policy) {
	tw := newTable(w, "NAME", "VERSION", "ATTACHMENTS", "ARN")
	for _, p := range ps {
		row(tw, str(p.PolicyName), str(p.DefaultVersionId), i32(p.AttachmentCount), str(p.Arn))
	}
	tw.Flush()
}

func policyShow(fs *flag.FlagSet) action {
	return iamAction(1, 1, "policy ARN or NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		arn, err := resolvePolicy(ctx, c, args[0])
		if err != nil {
			return err
		}
		out, err := c.GetPolicy(ctx, &iam.GetPolicyInput{PolicyArn: aws.String(arn)})
		if err != nil {
			return err
		}
		v, err := c.GetPolicyVersion(ctx, &iam.GetPolicyVersionInput{PolicyArn: aws.String(arn), VersionId: out.Policy.DefaultVersionId})
		if err != nil {
			return err
		}
		doc := decodeDocument(v.PolicyVersion.Document)
		if s.json() {
			// One object: the policy, and its default document as JSON.
			b, err := marshalShape(out)
			if err != nil {
				return err
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				return err
			}
			var d any
			if json.Unmarshal([]byte(doc), &d) != nil {
				d = doc
			}
			m["Document"] = d
			b, _ = json.MarshalIndent(m, "", "  ")
			fmt.Fprintln(s.stdout, string(b))
			return nil
		}
		p := out.Policy
		f := newFields(s.stdout)
		f.add("Name", str(p.PolicyName))
		f.add("ARN", str(p.Arn))
		f.add("Description", str(p.Description))
		f.add("Default version", str(p.DefaultVersionId))
		f.add("Attachments", i32(p.AttachmentCount))
		f.add("Created", ts(p.CreateDate))
		f.add("Updated", ts(p.UpdateDate))
		f.flush()
		fmt.Fprintf(s.stdout, "\n%s\n", prettyDocument(doc))
		return nil
	})
}

func policyDelete(fs *flag.FlagSet) action {
	return iamAction(1, 1, "policy ARN or NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		arn, err := resolvePolicy(ctx, c, args[0])
		if err != nil {
			return err
		}
		vs, err := c.ListPolicyVersions(ctx, &iam.ListPolicyVersionsInput{PolicyArn: aws.String(arn)})
		if err != nil {
			return err
		}
		// IAM deletes a policy with one version only; the others go first.
		for _, v := range vs.Versions {
			if !v.IsDefaultVersion {
				if _, err := c.DeletePolicyVersion(ctx, &iam.DeletePolicyVersionInput{PolicyArn: aws.String(arn), VersionId: v.VersionId}); err != nil {
					return err
				}
			}
		}
		if _, err := c.DeletePolicy(ctx, &iam.DeletePolicyInput{PolicyArn: aws.String(arn)}); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "deleted policy %s\n", arn)
		return nil
	})
}

func policySimulate(fs *flag.FlagSet) action {
	var actions, resources listFlag
	var contexts []string
	user := fs.String("user", "", "the user `NAME` whose policies decide (required)")
	fs.Var(&actions, "action", "an `ACTION` such as ecs:UpdateDaemon (repeatable; required)")
	fs.Var(&resources, "resource", "a resource `ARN` (repeatable; default *)")
	fs.Func("context", "a condition key and value `KEY=VALUE` (repeatable)", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, got %q", v)
		}
		contexts = append(contexts, v)
		return nil
	})
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		if *user == "" {
			return usageErrorf("--user is required")
		}
		if len(actions) == 0 {
			return usageErrorf("--action is required")
		}
		c, err := s.iam(ctx)
		if err != nil {
			return err
		}
		u, err := c.GetUser(ctx, &iam.GetUserInput{UserName: user})
		if err != nil {
			return err
		}
		in := &iam.SimulatePrincipalPolicyInput{PolicySourceArn: u.User.Arn, ActionNames: actions, ResourceArns: resources}
		var keys []string
		values := map[string][]string{}
		for _, kv := range contexts {
			k, v, _ := strings.Cut(kv, "=")
			if _, ok := values[k]; !ok {
				keys = append(keys, k)
			}
			values[k] = append(values[k], v)
		}
		for _, k := range keys {
			typ := iamtypes.ContextKeyTypeEnumString
			if len(values[k]) > 1 {
				typ = iamtypes.ContextKeyTypeEnumStringList
			}
			in.ContextEntries = append(in.ContextEntries, iamtypes.ContextEntry{ContextKeyName: aws.String(k), ContextKeyValues: values[k], ContextKeyType: typ})
		}
		results, err := allPages(ctx, iam.NewSimulatePrincipalPolicyPaginator(c, in),
			func(o *iam.SimulatePrincipalPolicyOutput) []iamtypes.EvaluationResult { return o.EvaluationResults })
		if err != nil {
			return err
		}
		all := &iam.SimulatePrincipalPolicyOutput{EvaluationResults: results}
		if s.json() {
			return s.show(all, nil)
		}
		docs := &policyDocs{c: c, ctx: ctx, texts: map[string]string{}}
		tw := newTable(s.stdout, "ACTION", "RESOURCE", "DECISION", "BY")
		for _, r := range all.EvaluationResults {
			by := []string{}
			for _, m := range r.MatchedStatements {
				by = append(by, docs.describe(m))
			}
			if len(by) == 0 {
				by = append(by, "no statement allows it")
			}
			row(tw, str(r.EvalActionName), str(r.EvalResourceName), string(r.EvalDecision), by[0])
			for _, b := range by[1:] {
				row(tw, "", "", "", b)
			}
		}
		tw.Flush()
		return nil
	}
}

// policyHolder is the SDK's calls on the policies of a user or a group,
// the noun.
type policyHolder struct {
	noun   string
	put    func(ctx context.Context, c *iam.Client, name, policy, doc string) error
	delete func(ctx context.Context, c *iam.Client, name, policy string) error
	attach func(ctx context.Context, c *iam.Client, name, arn string, detach bool) error
}

// verbs are the noun's verbs on its policies.
func (h policyHolder) verbs() []*verb {
	return []*verb{
		{name: "put-policy", args: "NAME POLICY-NAME --document FILE|JSON", summary: "Add or replace an inline policy of the " + h.noun + ".", bind: h.putPolicy},
		{name: "delete-policy", args: "NAME POLICY-NAME", summary: "Delete an inline policy of the " + h.noun + ".", bind: h.deletePolicy},
		{name: "attach-policy", args: "NAME POLICY-ARN|POLICY-NAME", summary: "Attach a managed policy to the " + h.noun + ".", bind: h.attachPolicy(false)},
		{name: "detach-policy", args: "NAME POLICY-ARN|POLICY-NAME", summary: "Detach a managed policy from the " + h.noun + ".", bind: h.attachPolicy(true)},
	}
}

func (h policyHolder) putPolicy(fs *flag.FlagSet) action {
	doc := documentFlag(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 2, 2, h.noun+" NAME and POLICY-NAME"); err != nil {
			return err
		}
		d, err := readDocument(s, *doc) // before connecting: a usage error needs no server
		if err != nil {
			return err
		}
		c, err := s.iam(ctx)
		if err != nil {
			return err
		}
		if err := h.put(ctx, c, args[0], args[1], d); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "put policy %s on %s %s\n", args[1], h.noun, args[0])
		return nil
	}
}

func (h policyHolder) deletePolicy(fs *flag.FlagSet) action {
	return iamAction(2, 2, h.noun+" NAME and POLICY-NAME", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
		if err := h.delete(ctx, c, args[0], args[1]); err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, "deleted policy %s of %s %s\n", args[1], h.noun, args[0])
		return nil
	})
}

func (h policyHolder) attachPolicy(detach bool) func(fs *flag.FlagSet) action {
	return func(fs *flag.FlagSet) action {
		return iamAction(2, 2, h.noun+" NAME and POLICY", func(ctx context.Context, s *session, c *iam.Client, args []string) error {
			arn, err := resolvePolicy(ctx, c, args[1])
			if err != nil {
				return err
			}
			if err := h.attach(ctx, c, args[0], arn, detach); err != nil {
				return err
			}
			done := "attached %s to %s %s\n"
			if detach {
				done = "detached %s from %s %s\n"
			}
			fmt.Fprintf(s.stdout, done, arn, h.noun, args[0])
			return nil
		})
	}
}

// policyDocs fetches the documents that matched statements come from, to
// name each statement by its Sid and effect.
type policyDocs struct {
	c     *iam.Client
	ctx   context.Context
	texts map[string]string
}

// text is the document of a policy the simulator names: "user/U/inline/P",
// "group/G/inline/P" or a managed policy's ARN ("" when it cannot be read).
func (d *policyDocs) text(id string) string {
	if t, ok := d.texts[id]; ok {
		return t
	}
	var doc *string
	parts := strings.Split(id, "/")
	switch {
	case len(parts) == 4 && parts[0] == "user" && parts[2] == "inline":
		if out, err := d.c.GetUserPolicy(d.ctx, &iam.GetUserPolicyInput{UserName: &parts[1], PolicyName: &parts[3]}); err == nil {
			doc = out.PolicyDocument
		}
	case len(parts) == 4 && parts[0] == "group" && parts[2] == "inline":
		if out, err := d.c.GetGroupPolicy(d.ctx, &iam.GetGroupPolicyInput{GroupName: &parts[1], PolicyName: &parts[3]}); err == nil {
			doc = out.PolicyDocument
		}
	case strings.HasPrefix(id, "arn:"):
		if p, err := d.c.GetPolicy(d.ctx, &iam.GetPolicyInput{PolicyArn: &id}); err == nil {
			if v, err := d.c.GetPolicyVersion(d.ctx, &iam.GetPolicyVersionInput{PolicyArn: &id, VersionId: p.Policy.DefaultVersionId}); err == nil {
				doc = v.PolicyVersion.Document
			}
		}
	}
	t := decodeDocument(doc)
	d.texts[id] = t
	return t
}

// describe says which statement matched: its effect, Sid, policy and lines.
func (d *policyDocs) describe(m iamtypes.Statement) string {
	id := str(m.SourcePolicyId)
	if m.StartPosition == nil || m.EndPosition == nil {
		return id
	}
	lines := "line " + strconv.Itoa(int(m.StartPosition.Line))
	if m.EndPosition.Line != m.StartPosition.Line {
		lines = "lines " + strconv.Itoa(int(m.StartPosition.Line)) + "-" + strconv.Itoa(int(m.EndPosition.Line))
	}
	var st struct{ Sid, Effect string }
	if frag := between(d.text(id), m.StartPosition, m.EndPosition); frag != "" {
		json.Unmarshal([]byte(frag), &st)
	}
	out := st.Effect
	if st.Sid != "" {
		out += " " + st.Sid
	}
	return strings.TrimSpace(out + " (" + id + ", " + lines + ")")
}

// between is the text from start to end inclusive (lines and columns from
// 1, columns in characters).
func between(text string, start, end *iamtypes.Position) string {
	off := func(p *iamtypes.Position) int {
		line, i := int32(1), 0
		for line < p.Line {
			j := strings.IndexByte(text[i:], '\n')
			if j < 0 {
				return -1
			}
			i += j + 1
			line++
		}
		for col := int32(1); col < p.Column && i < len(text); col++ {
			_, n := utf8.DecodeRuneInString(text[i:])
			i += n
		}
		return i
	}
	a, b := off(start), off(end)
	if a < 0 || b < a || b >= len(text) {
		return ""
	}
	return text[a : b+1]
}
