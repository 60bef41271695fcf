package policy

import (
	"math/big"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// kind is an operator's comparison, without negation or qualifiers.
type kind uint8

const (
	kString kind = iota + 1
	kStringIgnoreCase
	kStringLike
	kArn // ArnEquals and ArnLike compare alike
	kNumEq
	kNumLt
	kNumLe
	kNumGt
	kNumGe
	kDateEq
	kDateLt
	kDateLe
	kDateGt
	kDateGe
	kBool
	kNull
	kIP // IpAddress: the request's address within a policy CIDR
)

// set is the ForAnyValue:/ForAllValues: qualifier.
type set uint8

const (
	setNone set = iota
	setAny
	setAll
)

type operator struct {
	kind     kind
	negated  bool // the Not form: true exactly when the positive form is false
	ifExists bool
	set      set
}

var bases = map[string]operator{
	"StringEquals":              {kind: kString},
	"StringNotEquals":           {kind: kString, negated: true},
	"StringEqualsIgnoreCase":    {kind: kStringIgnoreCase},
	"StringNotEqualsIgnoreCase": {kind: kStringIgnoreCase, negated: true},
	"StringLike":                {kind: kStringLike},
	"StringNotLike":             {kind: kStringLike, negated: true},
	"ArnEquals":                 {kind: kArn},
	"ArnNotEquals":              {kind: kArn, negated: true},
	"ArnLike":                   {kind: kArn},
	"ArnNotLike":                {kind: kArn, negated: true},
	"NumericEquals":             {kind: kNumEq},
	"NumericNotEquals":          {kind: kNumEq, negated: true},
	"NumericLessThan":           {kind: kNumLt},
	"NumericLessThanEquals":     {kind: kNumLe},
	"NumericGreaterThan":        {kind: kNumGt},
	"NumericGreaterThanEquals":  {kind: kNumGe},
	"DateEquals":                {kind: kDateEq},
	"DateNotEquals":             {kind: kDateEq, negated: true},
	"DateLessThan":              {kind: kDateLt},
	"DateLessThanEquals":        {kind: kDateLe},
	"DateGreaterThan":           {kind: kDateGt},
	"DateGreaterThanEquals":     {kind: kDateGe},
	"Bool":                      {kind: kBool},
	"Null":                      {kind: kNull},
	"IpAddress":                 {kind: kIP},
	"NotIpAddress":              {kind: kIP, negated: true},
}

// parseOperator reads "[ForAnyValue:|ForAllValues:]Base[IfExists]". Names
// are case-sensitive, as IAM's are. A non-empty rule says what is wrong.
func parseOperator(name string) (operator, string) {
	rest, q := name, setNone
	if r, ok := strings.CutPrefix(rest, "ForAnyValue:"); ok {
		rest, q = r, setAny
	} else if r, ok := strings.CutPrefix(rest, "ForAllValues:"); ok {
		rest, q = r, setAll
	}
	op, ok := bases[rest]
	if !ok {
		r, cut := strings.CutSuffix(rest, "IfExists")
		if op, ok = bases[r]; !ok || !cut {
			return operator{}, "unknown condition operator"
		}
		if op.kind == kNull {
			return operator{}, "Null has no IfExists form"
		}
		op.ifExists = true
	}
	if op.kind == kNull && q != setNone {
		return operator{}, "Null takes no ForAnyValue:/ForAllValues: qualifier"
	}
	op.set = q
	return op, ""
}

// checkValue says what is wrong with a policy value for op, or "".
func (op operator) checkValue(v, version string) string {
	switch op.kind {
	case kString, kStringIgnoreCase, kStringLike, kArn:
		if version == Version2012 {
			_, rule := scanVars(v)
			return rule
		}
	case kNumEq, kNumLt, kNumLe, kNumGt, kNumGe:
		if _, ok := parseNumber(v); !ok {
			return "not a number"
		}
	case kDateEq, kDateLt, kDateLe, kDateGt, kDateGe:
		if _, ok := parseDate(v); !ok {
			return "not a date (RFC 3339, YYYY-MM-DD, or seconds since the epoch)"
		}
	case kBool, kNull:
		if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
			return `must be true or false`
		}
	case kIP:
		if _, ok := parseCIDR(v); !ok {
			return "not an IP address or CIDR block (e.g. 203.0.113.0/24, 2001:db8::/32)"
		}
	}
	return ""
}

// usesVars says whether policy variables are substituted in op's values.
func (op operator) usesVars() bool {
	return op.kind == kString || op.kind == kStringIgnoreCase || op.kind == kStringLike || op.kind == kArn
}

// parseNumber reads a decimal number (integer or fraction, optional
// exponent) exactly, so large account-sized integers compare correctly.
func parseNumber(s string) (*big.Rat, bool) {
	if !isDecimal(s) {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

// isDecimal accepts [+-]digits[.digits][e[+-]digits] and refuses the hex,
// underscore, "Inf" and "NaN" forms strconv and big accept.
func isDecimal(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	n := digits()
	if i < len(s) && s[i] == '.' {
		i++
		n += digits()
	}
	if n == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if e := digits(); e == 0 || e > 4 { // bounds big.Rat's work
			return false
		}
	}
	return i == len(s)
}

// parseDate reads RFC 3339 (with or without fractional seconds), a bare
// date (midnight UTC), or whole seconds since the Unix epoch.
func parseDate(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	if s[0] >= '0' && s[0] <= '9' && !strings.ContainsAny(s, "-:T") {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > 253402300799 { // 9999-12-31T23:59:59Z
			return time.Time{}, false
		}
		return time.Unix(n, 0).UTC(), true
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// parseCIDR reads a policy's IpAddress value: a CIDR block, IPv4 or IPv6,
// or one address, which stands for itself alone (/32 or /128). Bits past
// the prefix length are ignored, as IAM ignores them.
func parseCIDR(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 { // ::ffff:a.b.c.d/n is an IPv4 block
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), true
}

// inCIDR reports whether request address v lies in policy block p. An
// IPv4 address written as IPv6 (::ffff:a.b.c.d) counts as the IPv4 one,
// and a zone is dropped; a value that is no address is in no block.
func inCIDR(p, v string) bool {
	a, err := netip.ParseAddr(v)
	if err != nil {
		return false
	}
	pr, ok := parseCIDR(p)
	return ok && pr.Contains(a.WithZone("").Unmap())
}
