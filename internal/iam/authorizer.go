package iam

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/iam/policy"
)

// CodeAccessDenied is the error code of a refused call, as ECS names it;
// IAM's Query API calls it AccessDenied.
const CodeAccessDenied = "AccessDeniedException"

// Authorizer decides whether a principal may perform an action on
// resources: the root may do anything, an agent no policy-governed action
// (what agents may call is decided by their own allow-list before this),
// a user what its policies allow.
type Authorizer struct {
	store *Store
	// Now is the clock behind aws:CurrentTime; time.Now when nil.
	Now func() time.Time
}

// NewAuthorizer returns an authorizer over the identities in s.
func NewAuthorizer(s *Store) *Authorizer { return &Authorizer{store: s} }

func (a *Authorizer) now() time.Time {
	if a.Now != nil {
		return a.Now().UTC()
	}
	return time.Now().UTC()
}

// AccessDenied is the refusal of action on resource to the principal
// principalARN, worded as AWS words it: explicit says a Deny statement
// matched, otherwise no statement allowed it.
func AccessDenied(principalARN, action, resource string, explicit bool) *fault.Error {
	msg := "User: " + principalARN + " is not authorized to perform: " + action + " on resource: " + resource
	if explicit {
		msg += " with an explicit deny in an identity-based policy"
	} else {
		msg += " because no identity-based policy allows the " + action + " action"
	}
	return &fault.Error{Kind: fault.NotAuthorized, Code: CodeAccessDenied, Message: msg}
}

// PrincipalARN is p's ARN, made from what p carries when it does not say.
func (a *Authorizer) PrincipalARN(p auth.Principal) string {
	if p.ARN != "" {
		return p.ARN
	}
	switch p.Role {
	case auth.RoleAdmin:
		return RootARN(a.store.account)
	case auth.RoleUser:
		return UserARN(a.store.account, "/", p.UserName)
	}
	return AgentARN(a.store.account, p.InstanceID, p.AccessKeyID)
}

// Check returns nil when p may perform action on every one of resources
// ("*" when none are given) under conditions, the request's condition
// keys; otherwise an AccessDenied naming the first resource refused.
// Each resource is evaluated on its own against all of a user's policies,
// with the global keys aws:username, aws:userid, aws:PrincipalArn,
// aws:PrincipalAccount, aws:PrincipalType and aws:CurrentTime added
// (aws:SourceIp comes from the caller, in conditions).
func (a *Authorizer) Check(ctx context.Context, p auth.Principal, action string, resources []string, conditions map[string][]string) error {
	if len(resources) == 0 {
		resources = []string{"*"}
	}
	switch p.Role {
	case auth.RoleAdmin:
		return nil
	case auth.RoleUser:
	default:
		return AccessDenied(a.PrincipalARN(p), action, resources[0], false)
	}
	u, srcs, err := a.store.sources(ctx, p.UserName)
	if isNoSuch(err) {
		// Deleted since the request was authenticated: nothing applies.
		return AccessDenied(a.PrincipalARN(p), action, resources[0], false)
	}
	if err != nil {
		return err
	}
	named := make([]policy.Named, len(srcs))
	for i, s := range srcs {
		named[i] = s.Named
	}
	keys := a.context(u, conditions)
	for _, r := range resources {
		res := policy.Evaluate(named, policy.Request{Action: action, Resource: r, Context: keys})
		switch res.Decision {
		case policy.Allow:
			continue
		case policy.ExplicitDeny:
			return AccessDenied(u.Arn, action, r, true)
		default:
			return AccessDenied(u.Arn, action, r, false)
		}
	}
	return nil
}

// context is the request's condition keys plus the global keys of user u,
// which the caller cannot override.
func (a *Authorizer) context(u *userRecord, conditions map[string][]string) map[string][]string {
	keys := make(map[string][]string, len(conditions)+len(globalKeys))
	for k, v := range conditions {
		if !isGlobalKey(k) {
			keys[k] = v
		}
	}
	now := a.now()
	keys["aws:username"] = []string{u.UserName}
	keys["aws:userid"] = []string{u.UserID}
	keys["aws:PrincipalArn"] = []string{u.Arn}
	keys["aws:PrincipalAccount"] = []string{a.store.account}
	keys["aws:PrincipalType"] = []string{"User"}
	keys["aws:CurrentTime"] = []string{now.Format(time.RFC3339)}
	keys["aws:EpochTime"] = []string{strconv.FormatInt(now.Unix(), 10)}
	return keys
}

// globalKeys are the keys context sets for the principal.
var globalKeys = []string{"aws:username", "aws:userid", "aws:PrincipalArn", "aws:PrincipalAccount", "aws:PrincipalType",
	"aws:CurrentTime", "aws:EpochTime"}

func isGlobalKey(k string) bool {
	for _, g := range globalKeys {
		if strings.EqualFold(g, k) {
			return true
		}
	}
	return false
}

// SimResult is the decision on one action and resource, with the
// statements that made it (the Deny statements of an explicit deny, the
// Allow statements of an allow, none for an implicit deny).
type SimResult struct {
	Action     string
	Resource   string
	Decision   policy.Decision
	Statements []SimStatement
}

// SimStatement is one statement that decided a simulation: which policy
// (Match.Policy is the name Policies gives it), of which type (SourceUser,
// SourceGroup, SourceUserManaged), and where in its document.
type SimStatement struct {
	policy.Match
	SourceType string
	Start, End Position
}

// Simulate decides each action on each resource ("*" when none) for a
// user, as SimulatePrincipalPolicy does. The user's global keys are
// supplied as Check supplies them; context adds keys and overrides those.
func (a *Authorizer) Simulate(ctx context.Context, userName string, actions, resources []string, context map[string][]string) ([]SimResult, error) {
	if err := CheckUserName("userName", userName); err != nil {
		return nil, err
	}
	if len(actions) == 0 {
		return nil, validation("actionNames", "", true, "Member must not be null")
	}
	u, srcs, err := a.store.sources(ctx, userName)
	if err != nil {
		return nil, err
	}
	if len(resources) == 0 {
		resources = []string{"*"}
	}
	named := make([]policy.Named, len(srcs))
	byName := make(map[string]source, len(srcs))
	for i, s := range srcs {
		named[i] = s.Named
		byName[s.Name] = s
	}
	keys := a.context(u, nil)
	for k, v := range context {
		for g := range keys {
			if strings.EqualFold(g, k) {
				delete(keys, g)
			}
		}
		keys[k] = v
	}
	spans := map[string][][2]Position{}
	var out []SimResult
	for _, act := range actions {
		for _, r := range resources {
			res := policy.Evaluate(named, policy.Request{Action: act, Resource: r, Context: keys})
			sr := SimResult{Action: act, Resource: r, Decision: res.Decision}
			for _, m := range res.Matches {
				if res.Decision == policy.ImplicitDeny || res.Decision == policy.Allow && m.Effect != "Allow" ||
					res.Decision == policy.ExplicitDeny && m.Effect != "Deny" {
					continue
				}
				src := byName[m.Policy]
				st := SimStatement{Match: m, SourceType: src.Type}
				sp, ok := spans[m.Policy]
				if !ok {
					sp, _ = statementSpans(src.Text)
					spans[m.Policy] = sp
				}
				if m.Statement >= 0 && m.Statement < len(sp) {
					st.Start, st.End = sp[m.Statement][0], sp[m.Statement][1]
				}
				sr.Statements = append(sr.Statements, st)
			}
			out = append(out, sr)
		}
	}
	return out, nil
}
