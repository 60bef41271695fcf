package policy

import (
	"fmt"
	"strings"
	"unicode"
)

// Parse validates and parses a JSON policy document. Errors are *Error.
func Parse(b []byte) (*Document, error) {
	if len(b) > MaxRawSize {
		return nil, &Error{Rule: fmt.Sprintf("document is %d bytes, more than %d", len(b), MaxRawSize)}
	}
	root, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	if root.kind != 'o' {
		return nil, &Error{Rule: "document must be a JSON object, not " + root.kindName()}
	}
	d := &Document{Version: Version2008}
	var stmts *node
	for i, k := range root.keys {
		v := root.vals[i]
		switch k {
		case "Version":
			if v.kind != 's' || (v.text != Version2012 && v.text != Version2008) {
				return nil, &Error{Path: k, Rule: `must be "2012-10-17" or "2008-10-17"`}
			}
			d.Version = v.text
		case "Id":
			if v.kind != 's' {
				return nil, &Error{Path: k, Rule: "must be a string"}
			}
			d.ID = v.text
		case "Statement":
			stmts = v
		default:
			return nil, &Error{Path: k, Rule: "unknown member"}
		}
	}
	if stmts == nil {
		return nil, &Error{Path: "Statement", Rule: "is required"}
	}
	list := []*node{stmts}
	switch stmts.kind {
	case 'o':
	case 'a':
		if len(stmts.items) == 0 {
			return nil, &Error{Path: "Statement", Rule: "must not be empty"}
		}
		list = stmts.items
	default:
		return nil, &Error{Path: "Statement", Rule: "must be an object or a list, not " + stmts.kindName()}
	}
	sids := map[string]int{}
	for i, sn := range list {
		p := fmt.Sprintf("Statement[%d]", i)
		s, err := parseStatement(sn, p, d.Version)
		if err != nil {
			return nil, err
		}
		if s.Sid != "" {
			if j, dup := sids[s.Sid]; dup {
				return nil, &Error{Path: p + ".Sid", Rule: fmt.Sprintf("%q is already the Sid of Statement[%d]", s.Sid, j)}
			}
			sids[s.Sid] = i
		}
		d.Statements = append(d.Statements, s)
	}
	return d, nil
}

func parseStatement(n *node, path, version string) (Statement, error) {
	var s Statement
	if n.kind != 'o' {
		return s, &Error{Path: path, Rule: "must be an object, not " + n.kindName()}
	}
	var err error
	effect := false
	for i, k := range n.keys {
		v := n.vals[i]
		p := path + "." + k
		switch k {
		case "Sid":
			if v.kind != 's' {
				return s, &Error{Path: p, Rule: "must be a string"}
			}
			for _, c := range v.text {
				if !isAlnum(c) {
					return s, &Error{Path: p, Rule: "may hold only letters A-Z, a-z and digits 0-9"}
				}
			}
			s.Sid = v.text
		case "Effect":
			if v.kind != 's' || (v.text != "Allow" && v.text != "Deny") {
				return s, &Error{Path: p, Rule: `must be "Allow" or "Deny"`}
			}
			s.Effect, effect = v.text, true
		case "Action":
			s.Action, err = parseStrings(v, p, checkAction)
		case "NotAction":
			s.NotAction, err = parseStrings(v, p, checkAction)
		case "Resource":
			s.Resource, err = parseStrings(v, p, resourceChecker(version))
		case "NotResource":
			s.NotResource, err = parseStrings(v, p, resourceChecker(version))
		case "Condition":
			s.Conditions, err = parseConditions(v, p, version)
		case "Principal", "NotPrincipal":
			return s, &Error{Path: p, Rule: "not allowed in an identity-based policy"}
		default:
			return s, &Error{Path: p, Rule: "unknown member"}
		}
		if err != nil {
			return s, err
		}
	}
	switch {
	case !effect:
		return s, &Error{Path: path + ".Effect", Rule: "is required"}
	case s.Action != nil && s.NotAction != nil:
		return s, &Error{Path: path + ".NotAction", Rule: "not allowed together with Action"}
	case s.Action == nil && s.NotAction == nil:
		return s, &Error{Path: path, Rule: "needs Action or NotAction"}
	case s.Resource != nil && s.NotResource != nil:
		return s, &Error{Path: path + ".NotResource", Rule: "not allowed together with Resource"}
	case s.Resource == nil && s.NotResource == nil:
		return s, &Error{Path: path, Rule: "needs Resource or NotResource"}
	}
	return s, nil
}

func isAlnum(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// parseStrings reads a string or a non-empty list of strings, checking each.
func parseStrings(n *node, path string, check func(string) string) ([]string, error) {
	one := func(n *node, p string) (string, error) {
		if n.kind != 's' {
			return "", &Error{Path: p, Rule: "must be a string, not " + n.kindName()}
		}
		if rule := check(n.text); rule != "" {
			return "", &Error{Path: p, Rule: rule}
		}
		return n.text, nil
	}
	if n.kind != 'a' {
		s, err := one(n, path)
		if err != nil {
			return nil, err
		}
		return []string{s}, nil
	}
	if len(n.items) == 0 {
		return nil, &Error{Path: path, Rule: "must not be empty"}
	}
	out := make([]string, len(n.items))
	for i, it := range n.items {
		s, err := one(it, fmt.Sprintf("%s[%d]", path, i))
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// checkAction accepts "*" and "service:Action", where Action may hold the
// wildcards * and ?.
func checkAction(a string) string {
	if a == "*" {
		return ""
	}
	const rule = `must be "*" or "service:Action" (letters, digits, * and ? in the action)`
	svc, act, ok := strings.Cut(a, ":")
	if !ok || svc == "" || act == "" {
		return rule
	}
	for _, c := range svc {
		if !isAlnum(c) && c != '-' {
			return rule
		}
	}
	for _, c := range act {
		if !isAlnum(c) && c != '*' && c != '?' {
			return rule
		}
	}
	return ""
}

func resourceChecker(version string) func(string) string {
	return func(r string) string {
		if r == "*" {
			return ""
		}
		const rule = `must be "*" or an ARN (arn:partition:service:region:account:resource)`
		f := strings.SplitN(r, ":", 6)
		if len(f) < 6 || f[0] != "arn" || f[1] == "" || f[2] == "" || f[5] == "" {
			return rule
		}
		if version == Version2012 {
			if strings.Contains(strings.Join(f[:5], ":"), "${") {
				return "policy variables are allowed only in the resource part of an ARN"
			}
			if _, err := scanVars(r); err != "" {
				return err
			}
		}
		return ""
	}
}

// A document's condition block: operator → key → value(s).
func parseConditions(n *node, path, version string) ([]Condition, error) {
	if n.kind != 'o' {
		return nil, &Error{Path: path, Rule: "must be an object, not " + n.kindName()}
	}
	if len(n.keys) == 0 {
		return nil, &Error{Path: path, Rule: "must not be empty"}
	}
	var out []Condition
	for i, opName := range n.keys {
		p := path + "." + opName
		op, rule := parseOperator(opName)
		if rule != "" {
			return nil, &Error{Path: p, Rule: rule}
		}
		keys := n.vals[i]
		if keys.kind != 'o' {
			return nil, &Error{Path: p, Rule: "must be an object of condition keys, not " + keys.kindName()}
		}
		if len(keys.keys) == 0 {
			return nil, &Error{Path: p, Rule: "must not be empty"}
		}
		for j, key := range keys.keys {
			kp := p + "." + key
			if key == "" {
				return nil, &Error{Path: kp, Rule: "condition key must not be empty"}
			}
			for _, prev := range keys.keys[:j] {
				if strings.EqualFold(prev, key) {
					return nil, &Error{Path: kp, Rule: "duplicate condition key (keys are case-insensitive)"}
				}
			}
			vals, err := parseValues(keys.vals[j], kp, op, version)
			if err != nil {
				return nil, err
			}
			out = append(out, Condition{Operator: opName, Key: key, Values: vals})
		}
	}
	return out, nil
}

// parseValues reads a condition's value: a string, number or boolean, or a
// non-empty list of them, each valid for the operator.
func parseValues(n *node, path string, op operator, version string) ([]string, error) {
	items, list := []*node{n}, false
	if n.kind == 'a' {
		if len(n.items) == 0 {
			return nil, &Error{Path: path, Rule: "must not be empty"}
		}
		items, list = n.items, true
	}
	out := make([]string, len(items))
	for i, it := range items {
		p := path
		if list {
			p = fmt.Sprintf("%s[%d]", path, i)
		}
		if it.kind != 's' && it.kind != 'n' && it.kind != 'b' {
			return nil, &Error{Path: p, Rule: "must be a string, number or boolean, not " + it.kindName()}
		}
		if rule := op.checkValue(it.text, version); rule != "" {
			return nil, &Error{Path: p, Rule: rule}
		}
		out[i] = it.text
	}
	return out, nil
}

// Size is a document's size as IAM counts it against MaxManagedSize and
// MaxUserInlineSize: its characters other than whitespace.
func Size(b []byte) int {
	n := 0
	for _, r := range string(b) {
		if !unicode.IsSpace(r) {
			n++
		}
	}
	return n
}
