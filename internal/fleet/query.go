package fleet

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The cluster query language, as far as Capstan evaluates it: expressions
// over an instance's attributes (attribute:NAME), compared with ==, !=,
// >, >=, <, <=, =~ and !~ (a regular expression matching the whole value),
// tested with exists and !exists, or with in / not_in [a, b]; terms join
// with and/&&, or/||, negate with not/!, and group with parentheses.
// ECS's task:group and instance-level subjects (agentVersion, ...) are not
// evaluated here and are refused at parse time.

// queryExpr is one compiled expression.
type queryExpr func(attrs map[string]string) bool

type queryParser struct {
	toks []string
	pos  int
}

var queryToken = regexp.MustCompile(`\s*(&&|\|\||==|!=|>=|<=|=~|!~|[()\[\],<>!]|[^\s()\[\],<>!=~&|]+)`)

// lexQuery splits an expression into tokens; a word runs to the next
// blank, bracket, comma or operator character.
func lexQuery(expr string) ([]string, error) {
	var toks []string
	rest := expr
	for strings.TrimSpace(rest) != "" {
		loc := queryToken.FindStringSubmatchIndex(rest)
		if loc == nil || loc[0] != 0 {
			return nil, fmt.Errorf("unexpected %q", Clip(strings.TrimSpace(rest)))
		}
		toks = append(toks, rest[loc[2]:loc[3]])
		rest = rest[loc[1]:]
	}
	return toks, nil
}

// parseQuery compiles expr; an empty expression is an error.
func parseQuery(expr string) (queryExpr, error) {
	toks, err := lexQuery(expr)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("the expression is empty")
	}
	if len(expr) > 2000 {
		return nil, fmt.Errorf("the expression is longer than 2000 characters")
	}
	p := &queryParser{toks: toks}
	e, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.toks) {
		return nil, fmt.Errorf("unexpected %q", p.toks[p.pos])
	}
	return e, nil
}

func (p *queryParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *queryParser) next() string {
	t := p.peek()
	if t != "" {
		p.pos++
	}
	return t
}

func (p *queryParser) or() (queryExpr, error) {
	l, err := p.and()
	if err != nil {
		return nil, err
	}
	for t := p.peek(); t == "||" || strings.EqualFold(t, "or"); t = p.peek() {
		p.next()
		r, err := p.and()
		if err != nil {
			return nil, err
		}
		a := l
		l = func(m map[string]string) bool { return a(m) || r(m) }
	}
	return l, nil
}

func (p *queryParser) and() (queryExpr, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	for t := p.peek(); t == "&&" || strings.EqualFold(t, "and"); t = p.peek() {
		p.next()
		r, err := p.unary()
		if err != nil {
			return nil, err
		}
		a := l
		l = func(m map[string]string) bool { return a(m) && r(m) }
	}
	return l, nil
}

func (p *queryParser) unary() (queryExpr, error) {
	switch t := p.peek(); {
	case t == "!" || strings.EqualFold(t, "not"):
		p.next()
		e, err := p.unary()
		if err != nil {
			return nil, err
		}
		return func(m map[string]string) bool { return !e(m) }, nil
	case t == "(":
		p.next()
		e, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.next() != ")" {
			return nil, fmt.Errorf("missing )")
		}
		return e, nil
	}
	return p.term()
}

// term is SUBJECT OPERATOR [VALUE].
func (p *queryParser) term() (queryExpr, error) {
	subj := p.next()
	switch {
	case subj == "":
		return nil, fmt.Errorf("the expression ends where a term is expected")
	case !strings.HasPrefix(subj, "attribute:"):
		return nil, fmt.Errorf("unsupported subject %q: Capstan evaluates attribute:NAME terms", Clip(subj))
	}
	name := strings.TrimPrefix(subj, "attribute:")
	if !attributeNameRE.MatchString(name) {
		return nil, fmt.Errorf("attribute name %q must be 1-128 letters, numbers, and _ . / -", Clip(name))
	}
	op := p.next()
	if op == "!" && p.peek() == "exists" { // "!exists" lexes as two tokens
		op = "!" + p.next()
	}
	switch op {
	case "exists":
		return func(m map[string]string) bool { _, ok := m[name]; return ok }, nil
	case "!exists":
		return func(m map[string]string) bool { _, ok := m[name]; return !ok }, nil
	case "in", "not_in":
		set, err := p.list()
		if err != nil {
			return nil, err
		}
		want := op == "in"
		return func(m map[string]string) bool {
			v, ok := m[name]
			if !ok {
				return !want
			}
			for _, s := range set {
				if s == v {
					return want
				}
			}
			return !want
		}, nil
	case "==", "!=", ">", ">=", "<", "<=":
		if p.peek() == "=" || p.peek() == ">" || p.peek() == "<" {
			return nil, fmt.Errorf("unexpected %q", p.peek())
		}
		val := p.value()
		if val == "" {
			return nil, fmt.Errorf("%s %s needs a value", subj, op)
		}
		return compareTerm(name, op, val), nil
	case "=~", "!~":
		val := p.value()
		if val == "" {
			return nil, fmt.Errorf("%s %s needs a regular expression", subj, op)
		}
		re, err := regexp.Compile("^(?:" + val + ")$")
		if err != nil {
			return nil, fmt.Errorf("regular expression %q does not compile", Clip(val))
		}
		want := op == "=~"
		return func(m map[string]string) bool {
			v, ok := m[name]
			return ok && re.MatchString(v) == want || !ok && !want
		}, nil
	case "":
		return nil, fmt.Errorf("%s needs an operator", subj)
	}
	return nil, fmt.Errorf("unsupported operator %q after %s", Clip(op), subj)
}

// value reads one value; a regular expression may hold characters the
// lexer splits on, so it takes the tokens up to the next and/or/).
func (p *queryParser) value() string {
	var b strings.Builder
	for p.pos < len(p.toks) {
		t := p.peek()
		if t == "&&" || t == "||" || t == ")" || strings.EqualFold(t, "and") || strings.EqualFold(t, "or") {
			break
		}
		b.WriteString(p.next())
	}
	return b.String()
}

// list reads [a, b, ...].
func (p *queryParser) list() ([]string, error) {
	if p.next() != "[" {
		return nil, fmt.Errorf("in and not_in take a list such as [a, b]")
	}
	var out []string
	for {
		t := p.next()
		switch t {
		case "":
			return nil, fmt.Errorf("missing ]")
		case "]":
			if len(out) == 0 {
				return nil, fmt.Errorf("the list is empty")
			}
			return out, nil
		case ",":
			continue
		}
		out = append(out, t)
	}
}

// compareTerm compares numerically when both sides are numbers, else as
// strings; a missing attribute only satisfies !=.
func compareTerm(name, op, val string) queryExpr {
	want, wantNum := strconv.ParseFloat(val, 64)
	return func(m map[string]string) bool {
		v, ok := m[name]
		if !ok {
			return op == "!="
		}
		c := strings.Compare(v, val)
		if got, err := strconv.ParseFloat(v, 64); err == nil && wantNum == nil {
			switch {
			case got < want:
				c = -1
			case got > want:
				c = 1
			default:
				c = 0
			}
		}
		switch op {
		case "==":
			return c == 0
		case "!=":
			return c != 0
		case ">":
			return c > 0
		case ">=":
			return c >= 0
		case "<":
			return c < 0
		}
		return c <= 0
	}
}

var attributeNameRE = regexp.MustCompile(`^[A-Za-z0-9_./-]{1,128}$`)
