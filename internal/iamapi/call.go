package iamapi

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/iam"
)

// call is one request being served: its caller, its parameters, and what
// it answers.
type call struct {
	h      *Handler
	ctx    context.Context
	p      auth.Principal
	form   url.Values
	op     string
	rec    *api.Record
	result any
}

func (c *call) str(name string) string { return c.form.Get(name) }

// list reads a Query list: Name.member.1, Name.member.2, ...
func (c *call) list(name string) []string {
	var out []string
	for i := 1; ; i++ {
		k := fmt.Sprintf("%s.member.%d", name, i)
		if !c.form.Has(k) {
			return out
		}
		out = append(out, c.form.Get(k))
	}
}

// tags reads a list of Key/Value pairs.
func (c *call) tags(name string) []iam.Tag {
	var out []iam.Tag
	for i := 1; ; i++ {
		k := fmt.Sprintf("%s.member.%d.", name, i)
		if !c.form.Has(k+"Key") && !c.form.Has(k+"Value") {
			return out
		}
		out = append(out, iam.Tag{Key: c.form.Get(k + "Key"), Value: c.form.Get(k + "Value")})
	}
}

// boolean reads an optional true/false.
func (c *call) boolean(name string) (bool, error) {
	switch v := c.form.Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, invalid(name, v, "Member must be true or false")
	}
}

// document reads a policy document. It arrives form-encoded; a document
// that is itself percent-encoded (as IAM returns them, and as some tools
// send them back) is decoded once more.
func (c *call) document(name string) string {
	d := c.form.Get(name)
	if t := strings.TrimSpace(d); strings.HasPrefix(t, "%7B") || strings.HasPrefix(t, "%7b") {
		if u, err := url.PathUnescape(t); err == nil {
			return u
		}
	}
	return d
}

// invalid is a ValidationError on a request parameter, in IAM's wording;
// the member is named as the model does (lower camel case).
func invalid(param, value, constraint string) error {
	return &fault.Error{Kind: fault.InvalidParameter, Code: iam.CodeValidationError,
		Message: fmt.Sprintf("1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: %s", value, lowerFirst(param), constraint)}
}

// requiredParam refuses a request without the parameter name.
func requiredParam(c *call, name string) error {
	if c.str(name) == "" {
		return &fault.Error{Kind: fault.InvalidParameter, Code: iam.CodeValidationError,
			Message: fmt.Sprintf("1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", lowerFirst(name))}
	}
	return nil
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

func invalidInput(format string, args ...any) error {
	return &fault.Error{Kind: fault.InvalidParameter, Code: iam.CodeInvalidInput, Message: fmt.Sprintf(format, args...)}
}

// authorize checks that the caller may perform this call's IAM action on
// resources, with the condition keys conds plus aws:SourceIp, and notes
// what was checked for the audit trail.
func (c *call) authorize(resources []string, conds map[string][]string) error {
	action := "iam:" + c.op
	c.rec.Checked = api.Checked{Action: action, Resources: resources}
	if conds == nil {
		conds = map[string][]string{}
	}
	if c.rec.SourceIP != "" {
		conds["aws:SourceIp"] = []string{c.rec.SourceIP}
	}
	return c.h.authz.Check(c.ctx, c.p, action, resources, conds)
}

// account is the account ID of every ARN.
func (c *call) account() string { return c.h.store.Account() }

// userName is the UserName parameter or, without one, the caller's own
// name (empty for the root and agents).
func (c *call) userName() string {
	if n := c.str("UserName"); n != "" {
		return n
	}
	return c.p.UserName
}

// userResource is the ARN and resource tags of the user name: the stored
// user's when it exists (its path is part of its ARN), otherwise the ARN
// it would have at "/". Without a name it is the caller's ARN.
func (c *call) userResource(name string) (string, map[string][]string) {
	conds := map[string][]string{}
	if name == "" {
		return c.h.authz.PrincipalARN(c.p), conds
	}
	u, err := c.h.store.GetUser(c.ctx, name)
	if err != nil {
		return iam.UserARN(c.account(), "/", name), conds
	}
	for _, t := range u.Tags {
		conds["aws:ResourceTag/"+t.Key] = []string{t.Value}
		conds["iam:ResourceTag/"+t.Key] = []string{t.Value}
	}
	return u.Arn, conds
}

// groupResource is the ARN of the group name, at "/" when there is none.
func (c *call) groupResource(name string) string {
	g, _, err := c.h.store.GetGroup(c.ctx, name)
	if err != nil {
		return iam.GroupARN(c.account(), "/", name)
	}
	return g.Arn
}

// authorizeUser authorizes this call on a user (the caller without a
// name) and returns the user's name, which is empty only for the root
// and agents acting on themselves.
func (c *call) authorizeUser(extra map[string][]string) (string, error) {
	name := c.userName()
	arn, conds := c.userResource(name)
	for k, v := range extra {
		conds[k] = v
	}
	if err := c.authorize([]string{arn}, conds); err != nil {
		return "", err
	}
	return name, nil
}

// page cuts one page out of items by the MaxItems and Marker parameters
// (markers are opaque offsets), converted by f.
func page[T, X any](c *call, items []T, f func(T) X) (list[X], paging, error) {
	max := 100
	if v := c.str("MaxItems"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return list[X]{}, paging{}, invalid("maxItems", v, "Member must be a whole number from 1 to 1000")
		}
		max = n
	}
	start := 0
	if m := c.str("Marker"); m != "" {
		b, err := base64.RawURLEncoding.DecodeString(m)
		n, err2 := strconv.Atoi(string(b))
		if err != nil || err2 != nil || n < 0 {
			return list[X]{}, paging{}, invalidInput("Marker %q is not one this API returned.", m)
		}
		start = min(n, len(items))
	}
	end := min(start+max, len(items))
	pg := paging{}
	if end < len(items) {
		pg = paging{IsTruncated: true, Marker: base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end)))}
	}
	out := make([]X, 0, end-start)
	for _, v := range items[start:end] {
		out = append(out, f(v))
	}
	return members(out), pg, nil
}
