package policy

import (
	"fmt"
	"testing"
)

// holds reports whether a single condition holds, by asking whether an
// Allow statement carrying only that condition allows.
func holds(t *testing.T, version, op, key, values string, ctx map[string][]string) bool {
	t.Helper()
	doc := fmt.Sprintf(`{"Version":%q,"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{%q:{%q:%s}}}}`,
		version, op, key, values)
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse(%s): %v", doc, err)
	}
	return Evaluate([]Named{{Name: "p", Doc: d}}, Request{Action: "ecs:ListClusters", Resource: "*", Context: ctx}).Decision == Allow
}

func TestConditionOperators(t *testing.T) {
	ctx := func(vals ...string) map[string][]string { return map[string][]string{"k": vals} }
	missing := map[string][]string{"other": {"x"}}
	empty := map[string][]string{"k": {}}
	const arn = "arn:aws:ecs:us-east-1:123456789012:cluster/prod"
	for _, c := range []struct {
		op, values string
		ctx        map[string][]string
		want       bool
	}{
		// Strings.
		{"StringEquals", `"a"`, ctx("a"), true},
		{"StringEquals", `"a"`, ctx("A"), false},
		{"StringEquals", `"a"`, missing, false},
		{"StringEquals", `"a"`, empty, false},
		{"StringEquals", `["x","a"]`, ctx("a"), true}, // values OR
		{"StringEquals", `"a"`, ctx("b", "a"), true},  // any request value
		{"StringEquals", `"a*"`, ctx("ab"), false},    // no wildcards
		{"StringNotEquals", `"a"`, ctx("a"), false},
		{"StringNotEquals", `"a"`, ctx("b"), true},
		{"StringNotEquals", `"a"`, missing, true}, // negated: missing key holds
		{"StringNotEquals", `"a"`, empty, true},
		{"StringNotEquals", `["a","b"]`, ctx("b"), false}, // values NOR
		{"StringNotEquals", `["a","b"]`, ctx("c"), true},
		{"StringNotEquals", `"a"`, ctx("a", "c"), false},
		{"StringEqualsIgnoreCase", `"AbC"`, ctx("aBc"), true},
		{"StringEqualsIgnoreCase", `"abc"`, ctx("abd"), false},
		{"StringEqualsIgnoreCase", `"abc"`, missing, false},
		{"StringNotEqualsIgnoreCase", `"abc"`, ctx("ABC"), false},
		{"StringNotEqualsIgnoreCase", `"abc"`, ctx("abd"), true},
		{"StringNotEqualsIgnoreCase", `"abc"`, missing, true},
		{"StringLike", `"a*c"`, ctx("abbbc"), true},
		{"StringLike", `"a*c"`, ctx("ac"), true},
		{"StringLike", `"a?c"`, ctx("abc"), true},
		{"StringLike", `"a?c"`, ctx("abbc"), false},
		{"StringLike", `"a?c"`, ctx("aéc"), true}, // ? is one character, not one byte
		{"StringLike", `"a*"`, ctx("A"), false},   // case-sensitive
		{"StringLike", `"*"`, ctx(""), true},
		{"StringLike", `"a/*/z"`, ctx("a/b:c/z"), true}, // * crosses anything in strings
		{"StringLike", `"a*"`, missing, false},
		{"StringNotLike", `"a*"`, ctx("ba"), true},
		{"StringNotLike", `"a*"`, ctx("ab"), false},
		{"StringNotLike", `"a*"`, missing, true},
		{"StringNotLike", `["a*","b*"]`, ctx("bz"), false},

		// ARNs: each field separately; the resource part may hold colons.
		{"ArnEquals", `"` + arn + `"`, ctx(arn), true},
		{"ArnEquals", `"arn:aws:ecs:*:123456789012:cluster/*"`, ctx(arn), true},
		{"ArnEquals", `"arn:aws:ecs:*:123456789012:cluster/*"`, ctx("arn:aws:ecs:us-east-1:999:cluster/prod"), false},
		{"ArnLike", `"arn:aws:ecs:us-east-?:*:cluster/p*"`, ctx(arn), true},
		{"ArnLike", `"arn:aws:ecs:*:cluster/prod"`, ctx("arn:aws:ecs:us-east-1:cluster/prod"), false}, // a 5-field value is no ARN
		{"ArnLike", `"arn:aws:ecs:*:123456789012:*"`, ctx("arn:aws:ecs:eu-west-1:123456789012:task/a:b"), true},
		{"ArnLike", `"arn:aws:ecs:*:*:cluster/*"`, ctx("arn:aws:ECS:us-east-1:1:cluster/x"), false}, // case-sensitive
		{"ArnLike", `"arn:aws:ecs:*:*:*"`, ctx("not-an-arn"), false},
		{"ArnLike", `"*"`, ctx("anything"), true},
		{"ArnLike", `"arn:*"`, ctx(arn), false}, // * stays inside its field
		{"ArnLike", `"arn:aws:ecs:*:*:*"`, missing, false},
		{"ArnNotEquals", `"` + arn + `"`, ctx(arn), false},
		{"ArnNotEquals", `"` + arn + `"`, ctx(arn + "2"), true},
		{"ArnNotEquals", `"` + arn + `"`, missing, true},
		{"ArnNotLike", `"arn:aws:ecs:*:*:cluster/*"`, ctx(arn), false},
		{"ArnNotLike", `"arn:aws:ecs:*:*:service/*"`, ctx(arn), true},
		{"ArnNotLike", `"arn:aws:ecs:*:*:service/*"`, missing, true},

		// Numbers, exactly, from strings or JSON numbers.
		{"NumericEquals", `"10"`, ctx("10"), true},
		{"NumericEquals", `10`, ctx("10.0"), true},
		{"NumericEquals", `1e1`, ctx("10"), true},
		{"NumericEquals", `"10"`, ctx("11"), false},
		{"NumericEquals", `"10"`, ctx("ten"), false},
		{"NumericEquals", `"10"`, missing, false},
		{"NumericEquals", `"123456789012345678901"`, ctx("123456789012345678902"), false},
		{"NumericNotEquals", `"10"`, ctx("11"), true},
		{"NumericNotEquals", `"10"`, ctx("10"), false},
		{"NumericNotEquals", `["10","11"]`, ctx("11"), false},
		{"NumericNotEquals", `"10"`, missing, true},
		{"NumericLessThan", `"10"`, ctx("9.5"), true},
		{"NumericLessThan", `"10"`, ctx("10"), false},
		{"NumericLessThan", `"-1"`, ctx("-2"), true},
		{"NumericLessThan", `"123456789012345678902"`, ctx("123456789012345678901"), true},
		{"NumericLessThan", `"10"`, missing, false},
		{"NumericLessThanEquals", `"10"`, ctx("10"), true},
		{"NumericLessThanEquals", `"10"`, ctx("10.01"), false},
		{"NumericGreaterThan", `"10"`, ctx("11"), true},
		{"NumericGreaterThan", `"10"`, ctx("10"), false},
		{"NumericGreaterThanEquals", `"10"`, ctx("10"), true},
		{"NumericGreaterThanEquals", `"10"`, ctx("9"), false},
		{"NumericGreaterThanEquals", `"10"`, missing, false},

		// Dates: RFC 3339 (any offset), bare dates, epoch seconds.
		{"DateEquals", `"2024-01-01T00:00:00Z"`, ctx("1704067200"), true},
		{"DateEquals", `"2024-01-01T01:00:00+01:00"`, ctx("2024-01-01T00:00:00Z"), true},
		{"DateEquals", `"2024-01-01"`, ctx("2024-01-01T00:00:00.000Z"), true},
		{"DateEquals", `1704067200`, ctx("2024-01-01T00:00:01Z"), false},
		{"DateEquals", `"2024-01-01"`, ctx("yesterday"), false},
		{"DateEquals", `"2024-01-01"`, missing, false},
		{"DateNotEquals", `"2024-01-01"`, ctx("2024-01-02"), true},
		{"DateNotEquals", `"2024-01-01"`, ctx("2024-01-01T00:00:00Z"), false},
		{"DateNotEquals", `"2024-01-01"`, missing, true},
		{"DateLessThan", `"2024-01-01T00:00:00Z"`, ctx("2023-12-31T23:59:59Z"), true},
		{"DateLessThan", `"2024-01-01T00:00:00Z"`, ctx("2024-01-01T00:00:00Z"), false},
		{"DateLessThanEquals", `"2024-01-01T00:00:00Z"`, ctx("2024-01-01T00:00:00Z"), true},
		{"DateLessThanEquals", `"2024-01-01T00:00:00Z"`, ctx("2024-01-01T00:00:00.5Z"), false},
		{"DateGreaterThan", `"2024-01-01T00:00:00Z"`, ctx("2024-01-01T00:00:01Z"), true},
		{"DateGreaterThan", `"2024-01-01T00:00:00Z"`, ctx("1704067200"), false},
		{"DateGreaterThanEquals", `"2024-01-01T00:00:00Z"`, ctx("1704067200"), true},
		{"DateGreaterThanEquals", `"2024-01-01T00:00:00Z"`, missing, false},

		// Bool.
		{"Bool", `"true"`, ctx("true"), true},
		{"Bool", `true`, ctx("TRUE"), true},
		{"Bool", `"true"`, ctx("false"), false},
		{"Bool", `false`, ctx("false"), true},
		{"Bool", `"true"`, ctx("yes"), false},
		{"Bool", `"true"`, missing, false},

		// Null tests presence only.
		{"Null", `"true"`, missing, true},
		{"Null", `"true"`, empty, true},
		{"Null", `true`, ctx("x"), false},
		{"Null", `"false"`, ctx("x"), true},
		{"Null", `false`, missing, false},

		// IfExists: a missing key holds; a present one is checked.
		{"StringEqualsIfExists", `"a"`, missing, true},
		{"StringEqualsIfExists", `"a"`, empty, true},
		{"StringEqualsIfExists", `"a"`, ctx("a"), true},
		{"StringEqualsIfExists", `"a"`, ctx("b"), false},
		{"StringNotEqualsIfExists", `"a"`, ctx("a"), false},
		{"StringNotEqualsIfExists", `"a"`, missing, true},
		{"StringLikeIfExists", `"a*"`, ctx("b"), false},
		{"StringEqualsIgnoreCaseIfExists", `"a"`, ctx("A"), true},
		{"ArnLikeIfExists", `"arn:aws:ecs:*:*:cluster/*"`, missing, true},
		{"ArnNotLikeIfExists", `"arn:aws:ecs:*:*:cluster/*"`, ctx(arn), false},
		{"NumericLessThanIfExists", `"10"`, missing, true},
		{"NumericLessThanIfExists", `"10"`, ctx("11"), false},
		{"DateGreaterThanIfExists", `"2024-01-01"`, missing, true},
		{"DateGreaterThanIfExists", `"2024-01-01"`, ctx("2023-01-01"), false},
		{"BoolIfExists", `"true"`, missing, true},
		{"BoolIfExists", `"true"`, ctx("false"), false},

		// ForAnyValue: some request value satisfies the operator.
		{"ForAnyValue:StringEquals", `["a","b"]`, ctx("c", "a"), true},
		{"ForAnyValue:StringEquals", `["a","b"]`, ctx("c", "d"), false},
		{"ForAnyValue:StringEquals", `["a","b"]`, missing, false},
		{"ForAnyValue:StringEquals", `["a","b"]`, empty, false},
		{"ForAnyValue:StringLike", `"team*"`, ctx("env", "team-x"), true},
		{"ForAnyValue:StringNotEquals", `"a"`, ctx("a", "b"), true},
		{"ForAnyValue:StringNotEquals", `"a"`, ctx("a"), false},
		{"ForAnyValue:StringNotEquals", `"a"`, missing, false},
		{"ForAnyValue:StringEqualsIfExists", `"a"`, missing, true},
		{"ForAnyValue:NumericGreaterThan", `"5"`, ctx("1", "6"), true},

		// ForAllValues: every request value does; vacuously true when missing.
		{"ForAllValues:StringEquals", `["a","b"]`, ctx("a", "b"), true},
		{"ForAllValues:StringEquals", `["a","b"]`, ctx("a"), true},
		{"ForAllValues:StringEquals", `["a","b"]`, ctx("a", "c"), false},
		{"ForAllValues:StringEquals", `["a","b"]`, missing, true},
		{"ForAllValues:StringEquals", `["a","b"]`, empty, true},
		{"ForAllValues:StringNotLike", `"key1*"`, ctx("key1:legal"), false},
		{"ForAllValues:StringNotLike", `"key1*"`, ctx("key2:audit"), true},
		{"ForAllValues:StringNotLike", `"key1*"`, ctx("key1:a", "key2:b"), false},
		{"ForAllValues:StringNotLike", `"key1*"`, missing, true},
		{"ForAllValues:StringEqualsIgnoreCase", `["a"]`, ctx("A", "a"), true},
		{"ForAllValues:ArnLike", `"arn:aws:ecs:*:*:cluster/*"`, ctx(arn, "arn:aws:ecs:x:1:service/s"), false},
		{"ForAllValues:StringEqualsIfExists", `"a"`, ctx("b"), false},

		// IP addresses: CIDR blocks or single addresses, IPv4 and IPv6.
		{"IpAddress", `"203.0.113.0/24"`, ctx("203.0.113.7"), true},
		{"IpAddress", `"203.0.113.0/24"`, ctx("203.0.114.7"), false},
		{"IpAddress", `"203.0.113.9"`, ctx("203.0.113.9"), true}, // no prefix: that address alone
		{"IpAddress", `"203.0.113.9"`, ctx("203.0.113.8"), false},
		{"IpAddress", `"203.0.113.9/32"`, ctx("203.0.113.9"), true},
		{"IpAddress", `"203.0.113.77/24"`, ctx("203.0.113.1"), true}, // host bits ignored
		{"IpAddress", `"0.0.0.0/0"`, ctx("198.51.100.1"), true},
		{"IpAddress", `"0.0.0.0/0"`, ctx("2001:db8::1"), false}, // families never mix
		{"IpAddress", `"::/0"`, ctx("127.0.0.1"), false},
		{"IpAddress", `["10.0.0.0/8","127.0.0.0/8"]`, ctx("127.0.0.1"), true}, // values OR
		{"IpAddress", `"2001:DB8:1234:5678::/64"`, ctx("2001:db8:1234:5678:abcd::1"), true},
		{"IpAddress", `"2001:db8:1234:5678::/64"`, ctx("2001:db8:1234:5679::1"), false},
		{"IpAddress", `"2001:4860:4860::8888/32"`, ctx("2001:4860:ffff::1"), true},
		{"IpAddress", `"::1"`, ctx("::1"), true},
		{"IpAddress", `"::1"`, ctx("::2"), false},                     // an IPv6 address alone is /128
		{"IpAddress", `"127.0.0.0/8"`, ctx("::ffff:127.0.0.1"), true}, // IPv4 written as IPv6
		{"IpAddress", `"::ffff:127.0.0.0/104"`, ctx("127.0.0.1"), true},
		{"IpAddress", `"fe80::/10"`, ctx("fe80::1%eth0"), true}, // zone dropped
		{"IpAddress", `"127.0.0.0/8"`, ctx("localhost"), false},
		{"IpAddress", `"127.0.0.0/8"`, ctx("127.0.0.1:80"), false},
		{"IpAddress", `"127.0.0.0/8"`, ctx(""), false},
		{"IpAddress", `"127.0.0.0/8"`, missing, false},
		{"IpAddress", `"127.0.0.0/8"`, ctx("10.0.0.1", "127.0.0.1"), true}, // any request value
		{"NotIpAddress", `"127.0.0.0/8"`, ctx("127.0.0.1"), false},
		{"NotIpAddress", `"127.0.0.0/8"`, ctx("192.0.2.1"), true},
		{"NotIpAddress", `["10.0.0.0/8","192.0.2.0/24"]`, ctx("192.0.2.1"), false}, // values NOR
		{"NotIpAddress", `"127.0.0.0/8"`, ctx("::1"), true},
		{"NotIpAddress", `"127.0.0.0/8"`, ctx("garbage"), true},
		{"NotIpAddress", `"127.0.0.0/8"`, missing, true},
		{"IpAddressIfExists", `"127.0.0.0/8"`, missing, true},
		{"IpAddressIfExists", `"127.0.0.0/8"`, ctx("192.0.2.1"), false},
		{"IpAddressIfExists", `"127.0.0.0/8"`, ctx("127.0.0.2"), true},
		{"NotIpAddressIfExists", `"127.0.0.0/8"`, missing, true},
		{"NotIpAddressIfExists", `"127.0.0.0/8"`, ctx("127.0.0.2"), false},
		{"ForAnyValue:IpAddress", `"10.0.0.0/8"`, ctx("192.0.2.1", "10.1.2.3"), true},
		{"ForAnyValue:IpAddress", `"10.0.0.0/8"`, missing, false},
		{"ForAnyValue:NotIpAddress", `"10.0.0.0/8"`, ctx("10.0.0.1", "192.0.2.1"), true},
		{"ForAnyValue:NotIpAddress", `"10.0.0.0/8"`, ctx("10.0.0.1"), false},
		{"ForAllValues:IpAddress", `"10.0.0.0/8"`, ctx("10.0.0.1", "10.9.9.9"), true},
		{"ForAllValues:IpAddress", `"10.0.0.0/8"`, ctx("10.0.0.1", "192.0.2.1"), false},
		{"ForAllValues:IpAddress", `"10.0.0.0/8"`, missing, true},
		{"ForAllValues:NotIpAddress", `"10.0.0.0/8"`, ctx("192.0.2.1", "10.0.0.1"), false},
		{"ForAllValues:NotIpAddressIfExists", `"10.0.0.0/8"`, ctx("192.0.2.1"), true},
	} {
		name := fmt.Sprintf("%s %s %v", c.op, c.values, c.ctx)
		t.Run(name, func(t *testing.T) {
			if got := holds(t, Version2012, c.op, "k", c.values, c.ctx); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestConditionKeysIgnoreCase(t *testing.T) {
	if !holds(t, Version2012, "StringEquals", "AWS:UserName", `"alice"`, map[string][]string{"aws:username": {"alice"}}) {
		t.Error("policy key AWS:UserName did not find context key aws:username")
	}
	// Keys differing only in case are one key: their values join.
	ctx := map[string][]string{"aws:TagKeys": {"a"}, "AWS:TAGKEYS": {"b"}}
	if !holds(t, Version2012, "ForAllValues:StringEquals", "aws:tagkeys", `["a","b"]`, ctx) ||
		holds(t, Version2012, "ForAllValues:StringEquals", "aws:tagkeys", `["a"]`, ctx) {
		t.Error("case variants of one key were not joined")
	}
	// A large context takes the map path; the answer must not change.
	big := map[string][]string{"Aws:UserName": {"alice"}}
	for i := range 40 {
		big[fmt.Sprintf("key%d", i)] = []string{"v"}
	}
	if !holds(t, Version2012, "StringEquals", "aws:USERNAME", `"alice"`, big) {
		t.Error("large context: key not found without regard to case")
	}
	if !holds(t, Version2012, "StringEquals", "\u212a", `"v"`, map[string][]string{"k": {"v"}}) { // Kelvin sign folds to k
		t.Error("Unicode folding: Kelvin sign did not find k")
	}
}

func TestConditionsCombine(t *testing.T) {
	d := mustParse(t, `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{
		"StringEquals":{"a":"1","b":"2"},
		"Bool":{"c":"true"}}}}`)
	for _, c := range []struct {
		ctx  map[string][]string
		want Decision
	}{
		{map[string][]string{"a": {"1"}, "b": {"2"}, "c": {"true"}}, Allow},
		{map[string][]string{"a": {"1"}, "b": {"2"}, "c": {"false"}}, ImplicitDeny}, // operators AND
		{map[string][]string{"a": {"1"}, "b": {"3"}, "c": {"true"}}, ImplicitDeny},  // keys AND
		{map[string][]string{"a": {"1"}, "c": {"true"}}, ImplicitDeny},
		{nil, ImplicitDeny},
	} {
		if got := Evaluate([]Named{{"p", d}}, Request{Action: "ecs:X", Resource: "*", Context: c.ctx}).Decision; got != c.want {
			t.Errorf("%v: got %v, want %v", c.ctx, got, c.want)
		}
	}
}

func TestPolicyVariables(t *testing.T) {
	alice := map[string][]string{"aws:username": {"alice"}}
	star := map[string][]string{"aws:username": {"*"}}
	two := map[string][]string{"aws:username": {"a", "b"}}
	for _, c := range []struct {
		version, op, values string
		ctx                 map[string][]string
		value               string
		want                bool
	}{
		{Version2012, "StringEquals", `"${aws:username}"`, alice, "alice", true},
		{Version2012, "StringEquals", `"${AWS:UserName}"`, alice, "alice", true},
		{Version2012, "StringEquals", `"${aws:username}"`, alice, "bob", false},
		{Version2012, "StringEquals", `"${aws:username}"`, nil, "", false},                   // unresolved: matches nothing
		{Version2012, "StringEquals", `"${aws:username}"`, two, "a", false},                  // multi-valued: unresolved
		{Version2012, "StringEquals", `"${aws:username, 'nobody'}"`, nil, "nobody", true},    // default
		{Version2012, "StringEquals", `"${aws:username,'it''s'}"`, nil, "it's", true},        // '' is a quote
		{Version2012, "StringEquals", `"${aws:username, 'nobody'}"`, alice, "alice", true},   // value beats default
		{Version2012, "StringEquals", `"a${*}b${?}c${$}"`, nil, "a*b?c$", true},              // literal specials
		{Version2012, "StringLike", `"home/${aws:username}/*"`, alice, "home/alice/x", true}, // wildcards stay
		{Version2012, "StringLike", `"home/${aws:username}/*"`, star, "home/bob/x", false},   // values are literal
		{Version2012, "StringLike", `"home/${aws:username}/*"`, star, "home/*/x", true},      //
		{Version2012, "StringLike", `"a\\${*}"`, nil, `a\*`, true},                           // a policy backslash is literal
		{Version2012, "StringNotEquals", `"${aws:username}"`, alice, "alice", false},         //
		{Version2008, "StringEquals", `"${aws:username}"`, alice, "${aws:username}", true},   // 2008: no variables
		{Version2012, "NumericEquals", `"5"`, map[string][]string{"n": {"5"}}, "5", true},    // untouched
		{Version2012, "ArnLike", `"arn:aws:iam::1:user/${aws:username}"`, alice, "arn:aws:iam::1:user/alice", true},
	} {
		t.Run(c.version+" "+c.op+" "+c.values+" "+c.value, func(t *testing.T) {
			ctx := map[string][]string{"k": {c.value}}
			for k, v := range c.ctx {
				ctx[k] = v
			}
			if got := holds(t, c.version, c.op, "k", c.values, ctx); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}
