// Package policy is the IAM policy language: it parses and validates
// identity-based policy documents (the JSON grammar AWS IAM documents) and
// decides one request against a set of them with IAM's evaluation logic —
// an explicit Deny wins, otherwise any Allow allows, otherwise the request is
// implicitly denied. It knows nothing of users, groups or storage; callers
// gather the policies that apply to a principal and ask.
package policy

import "fmt"

// Size limits. IAM counts characters other than whitespace; callers enforce
// the limit for the kind of policy they store (see Size). Parse itself only
// refuses documents larger than MaxRawSize bytes, as written.
const (
	MaxManagedSize    = 6144  // a managed policy
	MaxUserInlineSize = 2048  // all of one user's inline policies together
	MaxRawSize        = 10240 // anything Parse will read
)

// The policy language versions. A document without Version is 2008-10-17,
// which has no policy variables.
const (
	Version2012 = "2012-10-17"
	Version2008 = "2008-10-17"
)

// Document is a parsed, validated policy document. Build it with Parse (or
// UnmarshalJSON). A Document assembled by hand is not validated; Evaluate
// fails closed on what it cannot read (a statement without exactly one of
// Action/NotAction and of Resource/NotResource, or a condition that does not
// parse, applies if it is a Deny and not if it is an Allow).
type Document struct {
	Version    string // Version2012 or Version2008 (the default when absent)
	ID         string // the optional "Id" element
	Statements []Statement
}

// Statement is one statement of a document. Exactly one of Action and
// NotAction is set, and exactly one of Resource and NotResource.
type Statement struct {
	Sid         string
	Effect      string // "Allow" or "Deny"
	Action      []string
	NotAction   []string
	Resource    []string
	NotResource []string
	Conditions  []Condition // in document order; all must hold
}

// Condition is one key under one condition operator, e.g. Operator
// "ForAnyValue:StringLike", Key "aws:TagKeys", Values ["env", "team*"].
// Numbers and booleans keep their JSON text ("12", "true").
type Condition struct {
	Operator string
	Key      string
	Values   []string
}

// Error names where a document is malformed and the rule it breaks, e.g.
// Path "Statement[1].Condition.StringEqual", Rule "unknown condition
// operator". Statements are numbered from 0, also when "Statement" is a
// single object. Path is empty for faults of the document as a whole.
type Error struct {
	Path, Rule string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Rule
	}
	return e.Path + ": " + e.Rule
}

// Request is one authorization question.
type Request struct {
	Action   string              // "ecs:UpdateDaemon"
	Resource string              // an ARN, or "*"
	Context  map[string][]string // condition keys (matched case-insensitively) to their values
}

// Decision is the outcome of an evaluation.
type Decision int

const (
	ImplicitDeny Decision = iota
	Allow
	ExplicitDeny
)

// String names d as IAM's policy simulator does.
func (d Decision) String() string {
	switch d {
	case ImplicitDeny:
		return "implicitDeny"
	case Allow:
		return "allowed"
	case ExplicitDeny:
		return "explicitDeny"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Named is a policy with the name callers know it by (e.g.
// "user/alice/inline/apps" or an ARN).
type Named struct {
	Name string
	Doc  *Document
}

// Match is a statement that applied to a request. Statement is its index in
// the document, from 0.
type Match struct {
	Policy    string
	Statement int
	Sid       string
	Effect    string
}

// Result is a decision and the statements that led to it: every Deny and
// every Allow that applied, in the order of policies and statements.
type Result struct {
	Decision Decision
	Matches  []Match
}
