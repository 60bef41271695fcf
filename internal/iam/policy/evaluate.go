package policy

import (
	"strconv"
	"strings"
	"unicode"
)

// Evaluate decides req against policies with IAM's logic: an explicit Deny
// in any statement that applies wins; otherwise any Allow that applies
// allows; otherwise the request is implicitly denied. Every statement is
// looked at, so Matches lists all that applied. Evaluate only reads the
// documents, so they may be shared between goroutines.
func Evaluate(policies []Named, req Request) Result {
	var res Result
	ctx := lookup{raw: req.Context}
	for _, pol := range policies {
		if pol.Doc == nil {
			continue
		}
		vars := pol.Doc.Version == Version2012
		for i := range pol.Doc.Statements {
			s := &pol.Doc.Statements[i]
			if s.Effect != "Allow" && s.Effect != "Deny" || !s.applies(&req, &ctx, vars) {
				continue
			}
			res.Matches = append(res.Matches, Match{Policy: pol.Name, Statement: i, Sid: s.Sid, Effect: s.Effect})
			switch {
			case s.Effect == "Deny":
				res.Decision = ExplicitDeny
			case res.Decision == ImplicitDeny:
				res.Decision = Allow
			}
		}
	}
	return res
}

func (s *Statement) applies(req *Request, ctx *lookup, vars bool) bool {
	if (s.Action == nil) == (s.NotAction == nil) || (s.Resource == nil) == (s.NotResource == nil) {
		return s.Effect == "Deny" // malformed by hand: fail closed
	}
	if s.Action != nil {
		if !anyAction(s.Action, req.Action) {
			return false
		}
	} else if anyAction(s.NotAction, req.Action) {
		return false
	}
	if s.Resource != nil {
		if !anyResource(s.Resource, req.Resource, ctx, vars) {
			return false
		}
	} else if anyResource(s.NotResource, req.Resource, ctx, vars) {
		return false
	}
	for i := range s.Conditions {
		if !s.Conditions[i].holds(ctx, vars, s.Effect == "Deny") {
			return false
		}
	}
	return true
}

func anyAction(patterns []string, action string) bool {
	for _, p := range patterns {
		if glob(p, action, true, false) {
			return true
		}
	}
	return false
}

func anyResource(patterns []string, resource string, ctx *lookup, vars bool) bool {
	for _, p := range patterns {
		esc := false
		if vars && strings.Contains(p, "${") {
			var ok bool
			if p, ok = expand(p, ctx); !ok {
				continue
			}
			esc = true
		}
		if arnMatch(p, resource, esc) {
			return true
		}
	}
	return false
}

// lookup finds request context keys without regard to case, with the
// Unicode simple folding strings.EqualFold uses.
type lookup struct {
	raw    map[string][]string
	pairs  [scanMax]pair       // small contexts, scanned: cheaper than folding keys
	n      int                 // pairs in use
	folded map[string][]string // large contexts: by foldKey
	ready  bool
}

type pair struct {
	key   string
	vals  []string
	ascii bool
}

const scanMax = 16

func (l *lookup) get(key string) []string {
	if !l.ready {
		l.ready = true
		if len(l.raw) <= scanMax {
			for k, v := range l.raw {
				l.pairs[l.n] = pair{k, v, isASCII(k)}
				l.n++
			}
		} else {
			l.folded = make(map[string][]string, len(l.raw))
			for k, v := range l.raw {
				fk := foldKey(k)
				l.folded[fk] = append(l.folded[fk][:len(l.folded[fk]):len(l.folded[fk])], v...)
			}
		}
	}
	if l.folded != nil {
		return l.folded[foldKey(key)]
	}
	ascii := isASCII(key)
	var out []string
	n := 0
	for _, p := range l.pairs[:l.n] {
		// ASCII strings of different lengths never fold together.
		if ascii && p.ascii && len(p.key) != len(key) || !strings.EqualFold(p.key, key) {
			continue
		}
		if n == 0 {
			out = p.vals
		} else { // keys differing only in case are one key
			out = append(out[:len(out):len(out)], p.vals...)
		}
		n++
	}
	return out
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// foldKey maps every rune to the least rune of its case-folding orbit, so
// foldKey(a) == foldKey(b) exactly when strings.EqualFold(a, b).
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// holds evaluates one condition. A condition that does not parse (possible
// only in a Document built by hand) fails closed: it holds in a Deny
// statement and not in an Allow one.
func (c *Condition) holds(ctx *lookup, vars, deny bool) bool {
	op, rule := parseOperator(c.Operator)
	if rule != "" {
		return deny
	}
	vals := ctx.get(c.Key)
	missing := len(vals) == 0
	if op.kind == kNull {
		for _, p := range c.Values {
			if strings.EqualFold(p, "true") == missing {
				return true
			}
		}
		return false
	}
	if missing && op.ifExists {
		return true
	}
	// matches reports whether one request value satisfies the operator's
	// positive form against any of the policy's values.
	matches := func(v string) bool {
		for _, p := range c.Values {
			if compare(op, p, v, ctx, vars) {
				return true
			}
		}
		return false
	}
	switch op.set {
	case setAny: // some request value satisfies the operator; none when missing
		for _, v := range vals {
			if matches(v) != op.negated {
				return true
			}
		}
		return false
	case setAll: // every request value does; vacuously so when missing
		for _, v := range vals {
			if matches(v) == op.negated {
				return false
			}
		}
		return true
	}
	// No qualifier: the positive form holds when any request value matches
	// any policy value, and the Not form exactly when that is false, so a
	// missing key makes StringNotEquals and its kin true.
	for _, v := range vals {
		if matches(v) {
			return !op.negated
		}
	}
	return op.negated
}

// compare applies op's positive comparison to request value v and policy
// value p.
func compare(op operator, p, v string, ctx *lookup, vars bool) bool {
	esc := false
	if vars && op.usesVars() && strings.Contains(p, "${") {
		var ok bool
		if p, ok = expand(p, ctx); !ok {
			return false
		}
		esc = true
		if op.kind == kString || op.kind == kStringIgnoreCase {
			p = unquote(p)
		}
	}
	switch op.kind {
	case kString:
		return v == p
	case kStringIgnoreCase:
		return strings.EqualFold(v, p)
	case kStringLike:
		return glob(p, v, false, esc)
	case kArn:
		return arnMatch(p, v, esc)
	case kNumEq, kNumLt, kNumLe, kNumGt, kNumGe:
		c, ok := compareNumbers(v, p)
		return ok && order(op.kind-kNumEq, c)
	case kDateEq, kDateLt, kDateLe, kDateGt, kDateGe:
		tv, ok1 := parseDate(v)
		tp, ok2 := parseDate(p)
		return ok1 && ok2 && order(op.kind-kDateEq, tv.Compare(tp))
	case kBool:
		return strings.EqualFold(v, p)
	case kIP:
		return inCIDR(p, v)
	}
	return false
}

// order reads a comparison result c (request value against policy value)
// for the relation at offset rel from the Equals form: =, <, <=, >, >=.
func order(rel kind, c int) bool {
	switch rel {
	case 0:
		return c == 0
	case 1:
		return c < 0
	case 2:
		return c <= 0
	case 3:
		return c > 0
	}
	return c >= 0
}

// compareNumbers compares a with b, in int64 when both fit and exactly
// otherwise.
func compareNumbers(a, b string) (int, bool) {
	if x, err := strconv.ParseInt(a, 10, 64); err == nil {
		if y, err := strconv.ParseInt(b, 10, 64); err == nil {
			switch {
			case x < y:
				return -1, true
			case x > y:
				return 1, true
			}
			return 0, true
		}
	}
	x, ok1 := parseNumber(a)
	y, ok2 := parseNumber(b)
	if !ok1 || !ok2 {
		return 0, false
	}
	return x.Cmp(y), true
}

// unquote undoes expand's quoting for operators without wildcards.
func unquote(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+1 < len(p) {
			i++
		}
		b.WriteByte(p[i])
	}
	return b.String()
}
