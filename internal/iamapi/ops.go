package iamapi

import (
	"context"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/iam"
)

// opFunc serves one action; a nil result means the action has no output.
type opFunc func(c *call) (any, error)

// iamOperations are the IAM actions served. onUser, onIAMUser, onGroup
// and onPolicy authorize an action on the resource it names; the others
// authorize themselves.
var iamOperations map[string]opFunc

// stsOperations are the STS actions served.
var stsOperations = map[string]opFunc{"GetCallerIdentity": getCallerIdentity}

func init() {
	iamOperations = map[string]opFunc{
		"CreateUser":   createUser,
		"GetUser":      onUser(getUser),
		"ListUsers":    listUsers,
		"DeleteUser":   onUser(deleteUser),
		"TagUser":      tagUser,
		"UntagUser":    untagUser,
		"ListUserTags": onUser(listUserTags),

		"CreateAccessKey": onIAMUser(createAccessKey),
		"ListAccessKeys":  onIAMUser(listAccessKeys),
		"UpdateAccessKey": onIAMUser(updateAccessKey),
		"DeleteAccessKey": onIAMUser(deleteAccessKey),

		"CreateGroup":         createGroup,
		"GetGroup":            onGroup(getGroup),
		"ListGroups":          listGroups,
		"DeleteGroup":         onGroup(deleteGroup),
		"AddUserToGroup":      onGroup(addUserToGroup),
		"RemoveUserFromGroup": onGroup(removeUserFromGroup),
		"ListGroupsForUser":   onIAMUser(listGroupsForUser),

		"PutUserPolicy":     onIAMUser(putUserPolicy),
		"GetUserPolicy":     onIAMUser(getUserPolicy),
		"ListUserPolicies":  onIAMUser(listUserPolicies),
		"DeleteUserPolicy":  onIAMUser(deleteUserPolicy),
		"PutGroupPolicy":    onGroup(putGroupPolicy),
		"GetGroupPolicy":    onGroup(getGroupPolicy),
		"ListGroupPolicies": onGroup(listGroupPolicies),
		"DeleteGroupPolicy": onGroup(deleteGroupPolicy),

		"CreatePolicy":            createPolicy,
		"GetPolicy":               onPolicy(getPolicy),
		"ListPolicies":            listPolicies,
		"DeletePolicy":            onPolicy(deletePolicy),
		"GetPolicyVersion":        onPolicy(getPolicyVersion),
		"CreatePolicyVersion":     onPolicy(createPolicyVersion),
		"ListPolicyVersions":      onPolicy(listPolicyVersions),
		"DeletePolicyVersion":     onPolicy(deletePolicyVersion),
		"SetDefaultPolicyVersion": onPolicy(setDefaultPolicyVersion),

		"AttachUserPolicy":          needsUserName(attachUserPolicy),
		"DetachUserPolicy":          needsUserName(detachUserPolicy),
		"AttachGroupPolicy":         attachGroupPolicy,
		"DetachGroupPolicy":         detachGroupPolicy,
		"ListAttachedUserPolicies":  needsUserName(onUser(listAttachedUserPolicies)),
		"ListAttachedGroupPolicies": onGroup(listAttachedGroupPolicies),

		"SimulatePrincipalPolicy": simulatePrincipalPolicy,
	}
}

// Actions lists the IAM and STS actions served, for the docs' test.
func Actions() (iamActions, stsActions []string) {
	for a := range iamOperations {
		iamActions = append(iamActions, a)
	}
	for a := range stsOperations {
		stsActions = append(stsActions, a)
	}
	return iamActions, stsActions
}

// namedOp serves an action on one user, group or policy, which the caller
// has been authorized on.
type namedOp func(c *call, name string) (any, error)

// onUser authorizes the call on the user UserName (the caller without
// one; the name is then empty for the root and agents).
func onUser(op namedOp) opFunc {
	return func(c *call) (any, error) {
		name, err := c.authorizeUser(nil)
		if err != nil {
			return nil, err
		}
		return op(c, name)
	}
}

// onIAMUser is onUser for what only IAM users have (keys, inline
// policies, groups): the root's credential is the server's
// configuration, not IAM's.
func onIAMUser(op namedOp) opFunc {
	return onUser(func(c *call, name string) (any, error) {
		if name == "" {
			return nil, invalidInput("The account root has no IAM user: name one with UserName (the root's credential is set in the server's configuration).")
		}
		return op(c, name)
	})
}

// needsUserName refuses a call without UserName, for actions that do not
// default to the caller.
func needsUserName(op opFunc) opFunc {
	return func(c *call) (any, error) {
		if err := requiredParam(c, "UserName"); err != nil {
			return nil, err
		}
		return op(c)
	}
}

// onGroup authorizes the call on the group GroupName.
func onGroup(op namedOp) opFunc {
	return func(c *call) (any, error) {
		name, err := c.authorizeGroup(nil)
		if err != nil {
			return nil, err
		}
		return op(c, name)
	}
}

// onPolicy authorizes the call on the managed policy PolicyArn.
func onPolicy(op namedOp) opFunc {
	return func(c *call) (any, error) {
		arn := c.str("PolicyArn")
		res := arn
		if res == "" {
			res = "*"
		}
		if err := c.authorize([]string{res}, nil); err != nil {
			return nil, err
		}
		return op(c, arn)
	}
}

func (c *call) authorizeGroup(extra map[string][]string) (string, error) {
	name := c.str("GroupName")
	return name, c.authorize([]string{c.groupResource(name)}, extra)
}

// requestTags are the condition keys of tags a request adds.
func requestTags(tags []iam.Tag) map[string][]string {
	conds := map[string][]string{}
	var keys []string
	for _, t := range tags {
		conds["aws:RequestTag/"+t.Key] = []string{t.Value}
		keys = append(keys, t.Key)
	}
	if len(keys) > 0 {
		conds["aws:TagKeys"] = keys
	}
	return conds
}

func normPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// Users.

func createUser(c *call) (any, error) {
	name, tags := c.str("UserName"), c.tags("Tags")
	if c.str("PermissionsBoundary") != "" {
		return nil, invalidInput("PermissionsBoundary: permissions boundaries are not supported.")
	}
	path := c.str("Path")
	if err := c.authorize([]string{iam.UserARN(c.account(), normPath(path), name)}, requestTags(tags)); err != nil {
		return nil, err
	}
	u, err := c.h.store.CreateUser(c.ctx, name, path, tags)
	if err != nil {
		return nil, err
	}
	return struct{ User userXML }{toUser(u, true)}, nil
}

func getUser(c *call, name string) (any, error) {
	if name == "" { // the root, as IAM shows it: no name, the account as its ID
		return struct{ User userXML }{userXML{Path: "/", UserId: c.account(), Arn: iam.RootARN(c.account()), CreateDate: timestamp(c.h.started)}}, nil
	}
	u, err := c.h.store.GetUser(c.ctx, name)
	if err != nil {
		return nil, err
	}
	return struct{ User userXML }{toUser(u, true)}, nil
}

func listUsers(c *call) (any, error) {
	if err := c.authorize([]string{"*"}, nil); err != nil {
		return nil, err
	}
	users, err := c.h.store.ListUsers(c.ctx, c.str("PathPrefix"))
	if err != nil {
		return nil, err
	}
	l, pg, err := page(c, users, func(u iam.User) userXML { return toUser(u, false) })
	if err != nil {
		return nil, err
	}
	return struct {
		Users list[userXML]
		paging
	}{l, pg}, nil
}

func deleteUser(c *call, name string) (any, error) { return nil, c.h.store.DeleteUser(c.ctx, name) }

func tagUser(c *call) (any, error) {
	tags := c.tags("Tags")
	name, err := c.authorizeUser(requestTags(tags))
	if err != nil {
		return nil, err
	}
	return nil, c.h.store.TagUser(c.ctx, name, tags)
}

func untagUser(c *call) (any, error) {
	keys := c.list("TagKeys")
	conds := map[string][]string{}
	if len(keys) > 0 {
		conds["aws:TagKeys"] = keys
	}
	name, err := c.authorizeUser(conds)
	if err != nil {
		return nil, err
	}
	return nil, c.h.store.UntagUser(c.ctx, name, keys)
}

func listUserTags(c *call, name string) (any, error) {
	u, err := c.h.store.GetUser(c.ctx, name)
	if err != nil {
		return nil, err
	}
	l, pg, err := page(c, u.Tags, func(t iam.Tag) tagXML { return tagXML{t.Key, t.Value} })
	if err != nil {
		return nil, err
	}
	return struct {
		Tags list[tagXML]
		paging
	}{l, pg}, nil
}

// Access keys: without UserName, a user acts on its own keys.

func createAccessKey(c *call, name string) (any, error) {
	k, err := c.h.store.CreateAccessKey(c.ctx, name)
	if err != nil {
		return nil, err
	}
	return struct{ AccessKey accessKeyXML }{toAccessKey(k)}, nil
}

func listAccessKeys(c *call, name string) (any, error) {
	keys, err := c.h.store.ListAccessKeys(c.ctx, name)
	if err != nil {
		return nil, err
	}
	l, pg, err := page(c, keys, toAccessKey)
	if err != nil {
		return nil, err
	}
	return struct {
		AccessKeyMetadata list[accessKeyXML]
		paging
	}{l, pg}, nil
}

func updateAccessKey(c *call, name string) (any, error) {
	return nil, c.h.store.UpdateAccessKey(c.ctx, name, c.str("AccessKeyId"), c.str("Status"))
}

func deleteAccessKey(c *call, name string) (any, error) {
	return nil, c.h.store.DeleteAccessKey(c.ctx, name, c.str("AccessKeyId"))
}

// Groups.

func createGroup(c *call) (any, error) {
	name, path := c.str("GroupName"), c.str("Path")
	if err := c.authorize([]string{iam.GroupARN(c.account(), normPath(path), name)}, nil); err != nil {
		return nil, err
	}
	g, err := c.h.store.CreateGroup(c.ctx, name, path)
	if err != nil {
		return nil, err
	}
	return struct{ Group groupXML }{toGroup(g)}, nil
}

func getGroup(c *call, name string) (any, error) {
	g, users, err := c.h.store.GetGroup(c.ctx, name)
	if err != nil {
		return nil, err
	}
	l, pg, err := page(c, users, func(u iam.User) userXML { return toUser(u, false) })
	if err != nil {
		return nil, err
	}
	return struct {
		Group groupXML
		Users list[userXML]
		paging
	}{toGroup(g), l, pg}, nil
}

func listGroups(c *call) (any, error) {
	if err := c.authorize([]string{"*"}, nil); err != nil {
		return nil, err
	}
	groups, err := c.h.store.ListGroups(c.ctx, c.str("PathPrefix"))
	if err != nil {
		return nil, err
	}
	return groupPage(c, groups)
}

func groupPage(c *call, groups []iam.Group) (any, error) {
	l, pg, err := page(c, groups, toGroup)
	if err != nil {
		return nil, err
	}
	return struct {
		Groups list[groupXML]
		paging
	}{l, pg}, nil
}

func deleteGroup(c *call, name string) (any, error) { return nil, c.h.store.DeleteGroup(c.ctx, name) }

func addUserToGroup(c *call, name string) (any, error) {
	return nil, c.h.store.AddUserToGroup(c.ctx, name, c.str("UserName"))
}

func removeUserFromGroup(c *call, name string) (any, error) {
	return nil, c.h.store.RemoveUserFromGroup(c.ctx, name, c.str("UserName"))
}

func listGroupsForUser(c *call, name string) (any, error) {
	groups, err := c.h.store.ListGroupsForUser(c.ctx, name)
	if err != nil {
		return nil, err
	}
	return groupPage(c, groups)
}

// Inline policies.

func putUserPolicy(c *call, name string) (any, error) {
	return nil, c.h.store.PutUserPolicy(c.ctx, name, c.str("PolicyName"), c.document("PolicyDocument"))
}

func getUserPolicy(c *call, name string) (any, error) {
	p, err := c.h.store.GetUserPolicy(c.ctx, name, c.str("PolicyName"))
	if err != nil {
		return nil, err
	}
	u, err := c.h.store.GetUser(c.ctx, name)
	if err != nil {
		return nil, err
	}
	return struct{ UserName, PolicyName, PolicyDocument string }{u.UserName, p.Name, encodeDocument(p.Document)}, nil
}

func listUserPolicies(c *call, name string) (any, error) {
	names, err := c.h.store.ListUserPolicies(c.ctx, name)
	if err != nil {
		return nil, err
	}
	return namePage(c, names)
}

func deleteUserPolicy(c *call, name string) (any, error) {
	return nil, c.h.store.DeleteUserPolicy(c.ctx, name, c.str("PolicyName"))
}

func putGroupPolicy(c *call, name string) (any, error) {
	return nil, c.h.store.PutGroupPolicy(c.ctx, name, c.str("PolicyName"), c.document("PolicyDocument"))
}

func getGroupPolicy(c *call, name string) (any, error) {
	p, err := c.h.store.GetGroupPolicy(c.ctx, name, c.str("PolicyName"))
	if err != nil {
		return nil, err
	}
	g, _, err := c.h.store.GetGroup(c.ctx, name)
	if err != nil {
		return nil, err
	}
	return struct{ GroupName, PolicyName, PolicyDocument string }{g.GroupName, p.Name, encodeDocument(p.Document)}, nil
}

func listGroupPolicies(c *call, name string) (any, error) {
	names, err := c.h.store.ListGroupPolicies(c.ctx, name)
	if err != nil {
		return nil, err
	}
	return namePage(c, names)
}

func deleteGroupPolicy(c *call, name string) (any, error) {
	return nil, c.h.store.DeleteGroupPolicy(c.ctx, name, c.str("PolicyName"))
}

// Managed policies.

func createPolicy(c *call) (any, error) {
	name, path, tags := c.str("PolicyName"), c.str("Path"), c.tags("Tags")
	if err := c.authorize([]string{iam.PolicyARN(c.account(), normPath(path), name)}, requestTags(tags)); err != nil {
		return nil, err
	}
	p, err := c.h.store.CreatePolicy(c.ctx, name, path, c.document("PolicyDocument"), c.str("Description"), tags)
	if err != nil {
		return nil, err
	}
	return struct{ Policy policyXML }{toPolicy(p, true)}, nil
}

func getPolicy(c *call, arn string) (any, error) {
	p, err := c.h.store.GetPolicy(c.ctx, arn)
	if err != nil {
		return nil, err
	}
	return struct{ Policy policyXML }{toPolicy(p, true)}, nil
}

func listPolicies(c *call) (any, error) {
	if err := c.authorize([]string{"*"}, nil); err != nil {
		return nil, err
	}
	only, err := c.boolean("OnlyAttached")
	if err != nil {
		return nil, err
	}
	var pols []iam.ManagedPolicy
	switch scope := c.str("Scope"); scope {
	case "", "All", "Local":
		if pols, err = c.h.store.ListPolicies(c.ctx, c.str("PathPrefix"), only); err != nil {
			return nil, err
		}
	case "AWS": // Capstan has no AWS managed policies
	default:
		return nil, invalid("scope", scope, "Member must satisfy enum value set: [All, AWS, Local]")
	}
	l, pg, err := page(c, pols, func(p iam.ManagedPolicy) policyXML { return toPolicy(p, false) })
	if err != nil {
		return nil, err
	}
	return struct {
		Policies list[policyXML]
		paging
	}{l, pg}, nil
}

func deletePolicy(c *call, arn string) (any, error) { return nil, c.h.store.DeletePolicy(c.ctx, arn) }

func getPolicyVersion(c *call, arn string) (any, error) {
	v, err := c.h.store.GetPolicyVersion(c.ctx, arn, c.str("VersionId"))
	if err != nil {
		return nil, err
	}
	return struct{ PolicyVersion versionXML }{toVersion(v, true)}, nil
}

func createPolicyVersion(c *call, arn string) (any, error) {
	def, err := c.boolean("SetAsDefault")
	if err != nil {
		return nil, err
	}
	v, err := c.h.store.CreatePolicyVersion(c.ctx, arn, c.document("PolicyDocument"), def)
	if err != nil {
		return nil, err
	}
	return struct{ PolicyVersion versionXML }{toVersion(v, false)}, nil
}

func listPolicyVersions(c *call, arn string) (any, error) {
	vs, err := c.h.store.ListPolicyVersions(c.ctx, arn)
	if err != nil {
		return nil, err
	}
	l, pg, err := page(c, vs, func(v iam.PolicyVersion) versionXML { return toVersion(v, false) })
	if err != nil {
		return nil, err
	}
	return struct {
		Versions list[versionXML]
		paging
	}{l, pg}, nil
}

func deletePolicyVersion(c *call, arn string) (any, error) {
	return nil, c.h.store.DeletePolicyVersion(c.ctx, arn, c.str("VersionId"))
}

func setDefaultPolicyVersion(c *call, arn string) (any, error) {
	return nil, c.h.store.SetDefaultPolicyVersion(c.ctx, arn, c.str("VersionId"))
}

// Attachments.

func attachUserPolicy(c *call) (any, error) {
	return attachment(c, c.authorizeUser, c.h.store.AttachUserPolicy)
}
func detachUserPolicy(c *call) (any, error) {
	return attachment(c, c.authorizeUser, c.h.store.DetachUserPolicy)
}
func attachGroupPolicy(c *call) (any, error) {
	return attachment(c, c.authorizeGroup, c.h.store.AttachGroupPolicy)
}
func detachGroupPolicy(c *call) (any, error) {
	return attachment(c, c.authorizeGroup, c.h.store.DetachGroupPolicy)
}

// attachment attaches or detaches (change) the policy PolicyArn, checked
// on the user or group with the policy in iam:PolicyARN, as IAM does.
func attachment(c *call, authorize func(extra map[string][]string) (string, error), change func(ctx context.Context, name, arn string) error) (any, error) {
	arn := c.str("PolicyArn")
	var conds map[string][]string
	if arn != "" {
		conds = map[string][]string{"iam:PolicyARN": {arn}}
	}
	name, err := authorize(conds)
	if err != nil {
		return nil, err
	}
	return nil, change(c.ctx, name, arn)
}

func listAttachedUserPolicies(c *call, name string) (any, error) {
	ps, err := c.h.store.ListAttachedUserPolicies(c.ctx, name, c.str("PathPrefix"))
	if err != nil {
		return nil, err
	}
	return attachedPage(c, ps)
}

func listAttachedGroupPolicies(c *call, name string) (any, error) {
	ps, err := c.h.store.ListAttachedGroupPolicies(c.ctx, name, c.str("PathPrefix"))
	if err != nil {
		return nil, err
	}
	return attachedPage(c, ps)
}

func namePage(c *call, names []string) (any, error) {
	l, pg, err := page(c, names, func(n string) string { return n })
	if err != nil {
		return nil, err
	}
	return struct {
		PolicyNames list[string]
		paging
	}{l, pg}, nil
}

func attachedPage(c *call, ps []iam.AttachedPolicy) (any, error) {
	l, pg, err := page(c, ps, func(p iam.AttachedPolicy) attachedXML { return attachedXML{p.PolicyName, p.PolicyArn} })
	if err != nil {
		return nil, err
	}
	return struct {
		AttachedPolicies list[attachedXML]
		paging
	}{l, pg}, nil
}

// simulatePrincipalPolicy simulates a user's own policies; the inputs
// that bring in other policies are refused rather than ignored.
func simulatePrincipalPolicy(c *call) (any, error) {
	src := c.str("PolicySourceArn")
	res := src
	if res == "" {
		res = "*"
	}
	if err := c.authorize([]string{res}, nil); err != nil {
		return nil, err
	}
	for _, p := range []string{"PolicyInputList", "PermissionsBoundaryPolicyInputList"} {
		if len(c.list(p)) > 0 {
			return nil, invalidInput("%s: simulating policies other than the principal's own is not supported.", p)
		}
	}
	for _, p := range []string{"ResourcePolicy", "CallerArn"} {
		if c.str(p) != "" {
			return nil, invalidInput("%s: simulating resource-based policies is not supported.", p)
		}
	}
	if src == "" {
		return nil, invalid("policySourceArn", "", "Member must not be null")
	}
	prefix := "arn:aws:iam::" + c.account() + ":user/"
	if !strings.HasPrefix(src, prefix) {
		return nil, invalidInput("PolicySourceArn %s is not the ARN of a user of account %s: only users are simulated.", src, c.account())
	}
	name := src[strings.LastIndexByte(src, '/')+1:]
	if u, err := c.h.store.GetUser(c.ctx, name); err != nil {
		return nil, err
	} else if !strings.EqualFold(u.Arn, src) {
		return nil, invalidInput("PolicySourceArn %s names no user; the user %s is %s.", src, u.UserName, u.Arn)
	}
	context, err := contextEntries(c)
	if err != nil {
		return nil, err
	}
	results, err := c.h.authz.Simulate(c.ctx, name, c.list("ActionNames"), c.list("ResourceArns"), context)
	if err != nil {
		return nil, err
	}
	l, pg, err := page(c, results, toEval)
	if err != nil {
		return nil, err
	}
	return struct {
		EvaluationResults list[evalXML]
		paging
	}{l, pg}, nil
}

func toEval(r iam.SimResult) evalXML {
	e := evalXML{EvalActionName: r.Action, EvalResourceName: r.Resource, EvalDecision: r.Decision.String()}
	for _, s := range r.Statements {
		st := statementXML{SourcePolicyId: s.Policy, SourcePolicyType: s.SourceType}
		if s.Start.Line > 0 {
			st.StartPosition = &positionXML{s.Start.Line, s.Start.Column}
			st.EndPosition = &positionXML{s.End.Line, s.End.Column}
		}
		e.MatchedStatements.Member = append(e.MatchedStatements.Member, st)
	}
	return e
}

// contextEntries reads ContextEntries.member.N.{ContextKeyName,
// ContextKeyValues.member.M, ContextKeyType}.
func contextEntries(c *call) (map[string][]string, error) {
	out := map[string][]string{}
	for i := 1; ; i++ {
		base := "ContextEntries.member." + strconv.Itoa(i) + "."
		name := c.str(base + "ContextKeyName")
		if name == "" {
			if c.form.Has(base+"ContextKeyType") || c.form.Has(base+"ContextKeyValues.member.1") {
				return nil, invalid("contextEntries."+strconv.Itoa(i)+".member.contextKeyName", "", "Member must not be null")
			}
			return out, nil
		}
		if len(name) < 5 || len(name) > 256 {
			return nil, invalid("contextEntries."+strconv.Itoa(i)+".member.contextKeyName", name, "Member must have length from 5 to 256")
		}
		out[name] = append(out[name], c.list(base+"ContextKeyValues")...)
	}
}

// STS.

// getCallerIdentity needs no permission, as on AWS: anyone may ask who
// they are.
func getCallerIdentity(c *call) (any, error) {
	acct := c.account()
	type identity struct{ UserId, Account, Arn string }
	switch c.p.Role {
	case auth.RoleAdmin:
		return identity{acct, acct, iam.RootARN(acct)}, nil
	case auth.RoleUser:
		u, err := c.h.store.GetUser(c.ctx, c.p.UserName)
		if err != nil {
			return nil, err
		}
		return identity{u.UserID, acct, u.Arn}, nil
	}
	session := c.p.InstanceID
	if session == "" {
		session = c.p.AccessKeyID
	}
	return identity{AgentRoleID + ":" + session, acct, iam.AgentARN(acct, c.p.InstanceID, c.p.AccessKeyID)}, nil
}

// AgentRoleID is the unique ID of the role agents are sessions of, the
// first half of an agent's UserId.
const AgentRoleID = "AROACAPSTANAGENTROLE0"
