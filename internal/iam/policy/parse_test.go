package policy

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	d := mustParse(t, `{
		"Version": "2012-10-17",
		"Id": "apps",
		"Statement": [
			{"Sid": "Read1", "Effect": "Allow", "Action": ["ecs:Describe*", "ecs:List*"], "Resource": "*"},
			{"Effect": "Deny", "NotAction": "ecs:*", "NotResource": ["arn:aws:ecs:*:*:cluster/dev"],
			 "Condition": {"ForAnyValue:StringLike": {"aws:TagKeys": ["env", "team*"]}, "NumericLessThan": {"n": 5, "m": "1.5"}, "Bool": {"b": true}}}
		]}`)
	want := &Document{Version: "2012-10-17", ID: "apps", Statements: []Statement{
		{Sid: "Read1", Effect: "Allow", Action: []string{"ecs:Describe*", "ecs:List*"}, Resource: []string{"*"}},
		{Effect: "Deny", NotAction: []string{"ecs:*"}, NotResource: []string{"arn:aws:ecs:*:*:cluster/dev"}, Conditions: []Condition{
			{"ForAnyValue:StringLike", "aws:TagKeys", []string{"env", "team*"}},
			{"NumericLessThan", "n", []string{"5"}},
			{"NumericLessThan", "m", []string{"1.5"}},
			{"Bool", "b", []string{"true"}},
		}},
	}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("got  %+v\nwant %+v", d, want)
	}
	b, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if again := mustParse(t, string(b)); !reflect.DeepEqual(again, d) {
		t.Errorf("re-parse of %s:\ngot  %+v\nwant %+v", b, again, d)
	}

	// Version may be absent (2008-10-17); Statement may be one object.
	d = mustParse(t, `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*"}}`)
	if d.Version != Version2008 || len(d.Statements) != 1 {
		t.Errorf("got %+v", d)
	}
}

func TestParseErrors(t *testing.T) {
	stmt := func(body string) string {
		return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"},{` + body + `}]}`
	}
	ok := `"Effect":"Allow","Action":"*","Resource":"*"`
	cond := func(c string) string { return stmt(ok + `,"Condition":` + c) }
	for _, c := range []struct {
		doc, path, rule string
	}{
		{``, "", "invalid JSON"},
		{`{"Statement":`, "", "invalid JSON"},
		{`[]`, "", "must be a JSON object"},
		{`{"Statement":{` + ok + `}} x`, "", "invalid JSON: data after"},
		{`{"Statement":{` + ok + `},"Statement":{` + ok + `}}`, "Statement", "duplicate member"},
		{`{"Version":"2012-10-17"}`, "Statement", "is required"},
		{`{"Version":"2012-10-18","Statement":{` + ok + `}}`, "Version", `must be "2012-10-17" or "2008-10-17"`},
		{`{"Version":2012,"Statement":{` + ok + `}}`, "Version", "must be"},
		{`{"Id":1,"Statement":{` + ok + `}}`, "Id", "must be a string"},
		{`{"Statment":{` + ok + `}}`, "Statment", "unknown member"},
		{`{"Statement":[]}`, "Statement", "must not be empty"},
		{`{"Statement":"x"}`, "Statement", "must be an object or a list"},
		{`{"Statement":["x"]}`, "Statement[0]", "must be an object"},
		{`{"Statement":{"Action":"*","Resource":"*"}}`, "Statement[0].Effect", "is required"},
		{stmt(`"Effect":"allow","Action":"*","Resource":"*"`), "Statement[1].Effect", `must be "Allow" or "Deny"`},
		{stmt(ok + `,"Sid":"a-b"`), "Statement[1].Sid", "letters A-Z, a-z and digits 0-9"},
		{stmt(ok + `,"Sid":7`), "Statement[1].Sid", "must be a string"},
		{`{"Statement":[{"Sid":"S",` + ok + `},{"Sid":"S",` + ok + `}]}`, "Statement[1].Sid", "already the Sid of Statement[0]"},
		{stmt(ok + `,"Principal":"*"`), "Statement[1].Principal", "not allowed in an identity-based policy"},
		{stmt(ok + `,"NotPrincipal":{"AWS":"*"}`), "Statement[1].NotPrincipal", "not allowed in an identity-based policy"},
		{stmt(ok + `,"Actions":"*"`), "Statement[1].Actions", "unknown member"},
		{stmt(ok + `,"Effect":"Deny"`), "Statement[1].Effect", "duplicate member"},
		{stmt(`"Effect":"Allow","Resource":"*"`), "Statement[1]", "needs Action or NotAction"},
		{stmt(`"Effect":"Allow","Action":"*"`), "Statement[1]", "needs Resource or NotResource"},
		{stmt(ok + `,"NotAction":"ecs:*"`), "Statement[1].NotAction", "not allowed together with Action"},
		{stmt(ok + `,"NotResource":"*"`), "Statement[1].NotResource", "not allowed together with Resource"},
		{stmt(`"Effect":"Allow","Action":[],"Resource":"*"`), "Statement[1].Action", "must not be empty"},
		{stmt(`"Effect":"Allow","Action":"*","Resource":[]`), "Statement[1].Resource", "must not be empty"},
		{stmt(`"Effect":"Allow","Action":["ecs:*","ecs"],"Resource":"*"`), "Statement[1].Action[1]", `"service:Action"`},
		{stmt(`"Effect":"Allow","Action":"ecs:List Clusters","Resource":"*"`), "Statement[1].Action", `"service:Action"`},
		{stmt(`"Effect":"Allow","Action":"ecs:","Resource":"*"`), "Statement[1].Action", `"service:Action"`},
		{stmt(`"Effect":"Allow","Action":"*:List*","Resource":"*"`), "Statement[1].Action", `"service:Action"`},
		{stmt(`"Effect":"Allow","NotAction":[1],"Resource":"*"`), "Statement[1].NotAction[0]", "must be a string, not a number"},
		{stmt(`"Effect":"Allow","Action":"*","Resource":"cluster/prod"`), "Statement[1].Resource", "must be \"*\" or an ARN"},
		{stmt(`"Effect":"Allow","Action":"*","Resource":"arn:aws:ecs:*"`), "Statement[1].Resource", "an ARN"},
		{stmt(`"Effect":"Allow","Action":"*","NotResource":["*","arn:aws:ecs:r:1:"]`), "Statement[1].NotResource[1]", "an ARN"},
		{stmt(`"Effect":"Allow","Action":"*","Resource":"arn:aws:iam::${aws:PrincipalAccount}:user/x"`), "Statement[1].Resource", "only in the resource part"},
		{stmt(`"Effect":"Allow","Action":"*","Resource":"arn:aws:iam::1:user/${aws:username"`), "Statement[1].Resource", "malformed policy variable"},
		{cond(`[]`), "Statement[1].Condition", "must be an object"},
		{cond(`{}`), "Statement[1].Condition", "must not be empty"},
		{cond(`{"StringEqual":{"k":"v"}}`), "Statement[1].Condition.StringEqual", "unknown condition operator"},
		{cond(`{"stringequals":{"k":"v"}}`), "Statement[1].Condition.stringequals", "unknown condition operator"},
		{cond(`{"ForSomeValues:StringEquals":{"k":"v"}}`), "Statement[1].Condition.ForSomeValues:StringEquals", "unknown condition operator"},
		{cond(`{"IfExists":{"k":"v"}}`), "Statement[1].Condition.IfExists", "unknown condition operator"},
		{cond(`{"StringEqualsIfExistsIfExists":{"k":"v"}}`), "Statement[1].Condition.StringEqualsIfExistsIfExists", "unknown condition operator"},
		{cond(`{"IPAddress":{"aws:SourceIp":"10.0.0.0/8"}}`), "Statement[1].Condition.IPAddress", "unknown condition operator"},
		{cond(`{"IpAddress":{"aws:SourceIp":"10.0.0.0/33"}}`), "Statement[1].Condition.IpAddress.aws:SourceIp", "not an IP address or CIDR block"},
		{cond(`{"IpAddress":{"aws:SourceIp":["10.0.0.0/8","10.0.0"]}}`), "Statement[1].Condition.IpAddress.aws:SourceIp[1]", "not an IP address"},
		{cond(`{"NotIpAddress":{"aws:SourceIp":"2001:db8::/129"}}`), "Statement[1].Condition.NotIpAddress.aws:SourceIp", "not an IP address"},
		{cond(`{"IpAddressIfExists":{"aws:SourceIp":"fe80::1%eth0"}}`), "Statement[1].Condition.IpAddressIfExists.aws:SourceIp", "not an IP address"},
		{cond(`{"IpAddress":{"aws:SourceIp":"${aws:SourceIp}"}}`), "Statement[1].Condition.IpAddress.aws:SourceIp", "not an IP address"},
		{cond(`{"IpAddress":{"aws:SourceIp":"*"}}`), "Statement[1].Condition.IpAddress.aws:SourceIp", "not an IP address"},
		{cond(`{"IpAddress":{"aws:SourceIp":10}}`), "Statement[1].Condition.IpAddress.aws:SourceIp", "not an IP address"},
		{cond(`{"IpAddress":{"aws:SourceIp":"010.0.0.1"}}`), "Statement[1].Condition.IpAddress.aws:SourceIp", "not an IP address"},
		{cond(`{"NullIfExists":{"k":"true"}}`), "Statement[1].Condition.NullIfExists", "Null has no IfExists form"},
		{cond(`{"ForAllValues:Null":{"k":"true"}}`), "Statement[1].Condition.ForAllValues:Null", "no ForAnyValue:/ForAllValues:"},
		{cond(`{"StringEquals":"v"}`), "Statement[1].Condition.StringEquals", "must be an object of condition keys"},
		{cond(`{"StringEquals":{}}`), "Statement[1].Condition.StringEquals", "must not be empty"},
		{cond(`{"StringEquals":{"":"v"}}`), "Statement[1].Condition.StringEquals.", "condition key must not be empty"},
		{cond(`{"StringEquals":{"aws:UserName":"a","AWS:username":"b"}}`), "Statement[1].Condition.StringEquals.AWS:username", "duplicate condition key"},
		{cond(`{"StringEquals":{"k":[]}}`), "Statement[1].Condition.StringEquals.k", "must not be empty"},
		{cond(`{"StringEquals":{"k":null}}`), "Statement[1].Condition.StringEquals.k", "must be a string, number or boolean, not null"},
		{cond(`{"StringEquals":{"k":["a",{}]}}`), "Statement[1].Condition.StringEquals.k[1]", "not an object"},
		{cond(`{"StringEquals":{"k":["a",["b"]]}}`), "Statement[1].Condition.StringEquals.k[1]", "not a list"},
		{cond(`{"NumericLessThan":{"k":"ten"}}`), "Statement[1].Condition.NumericLessThan.k", "not a number"},
		{cond(`{"NumericLessThan":{"k":["1","0x10"]}}`), "Statement[1].Condition.NumericLessThan.k[1]", "not a number"},
		{cond(`{"NumericLessThan":{"k":"Inf"}}`), "Statement[1].Condition.NumericLessThan.k", "not a number"},
		{cond(`{"NumericEquals":{"k":true}}`), "Statement[1].Condition.NumericEquals.k", "not a number"},
		{cond(`{"DateLessThan":{"k":"tomorrow"}}`), "Statement[1].Condition.DateLessThan.k", "not a date"},
		{cond(`{"DateLessThan":{"k":"2024-13-01"}}`), "Statement[1].Condition.DateLessThan.k", "not a date"},
		{cond(`{"Bool":{"k":"yes"}}`), "Statement[1].Condition.Bool.k", "must be true or false"},
		{cond(`{"Null":{"k":1}}`), "Statement[1].Condition.Null.k", "must be true or false"},
		{cond(`{"StringLike":{"k":"${oops"}}`), "Statement[1].Condition.StringLike.k", "malformed policy variable"},
		{cond(`{"StringLike":{"k":"${a, b}"}}`), "Statement[1].Condition.StringLike.k", "malformed policy variable"},
		{cond(`{"StringLike":{"k":"${}"}}`), "Statement[1].Condition.StringLike.k", "malformed policy variable"},
		{cond(`{"StringLike":{"k":"v"},"StringLike":{"k":"w"}}`), "Statement[1].Condition.StringLike", "duplicate member"},
		{strings.Repeat(" ", MaxRawSize+1), "", "more than 10240"},
	} {
		_, err := Parse([]byte(c.doc))
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("%s: got %v (%T), want *Error", c.doc, err, err)
			continue
		}
		if pe.Path != c.path || !strings.Contains(pe.Rule, c.rule) {
			t.Errorf("%.200s:\n got  %q\n want path %q, rule containing %q", c.doc, pe.Error(), c.path, c.rule)
		}
	}
}

func TestParseAccepts(t *testing.T) {
	for _, doc := range []string{
		`{"Version":"2008-10-17","Statement":{"Effect":"Allow","Action":"*","Resource":"*"}}`,
		`{"Statement":{"Sid":"","Effect":"Allow","Action":"*","Resource":"*"}}`,
		// 2008-10-17 has no variables: "${" is plain text there.
		`{"Statement":{"Effect":"Allow","Action":"*","Resource":"arn:aws:iam::1:user/${oops","Condition":{"StringEquals":{"k":"${"}}}}`,
		`{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"*","Resource":"arn:aws:iam::1:user/${aws:username}/${ aws:userid , 'x' }"}}`,
		`{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{
			"NumericLessThan":{"k":["-1.5","+2",".5","1e3","10"]},
			"DateGreaterThan":{"d":["2024-01-01","2024-01-01T00:00:00Z","2024-01-01T00:00:00.123+02:00",1704067200]},
			"ForAllValues:StringNotEqualsIgnoreCaseIfExists":{"t":"x"},
			"Null":{"n":false}}}}`,
		`{"Version":"2012-10-17","Statement":{"Effect":"Deny","Action":"*","Resource":"*","Condition":{
			"NotIpAddress":{"aws:SourceIp":["203.0.113.0/24","203.0.113.9","2001:DB8::/32","::1","::ffff:10.0.0.0/104","10.1.2.3/8"]},
			"ForAnyValue:IpAddressIfExists":{"ips":"0.0.0.0/0"}}}}`,
	} {
		if _, err := Parse([]byte(doc)); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestSize(t *testing.T) {
	if got := Size([]byte("{ \"a\" :\n\t\"é\" }")); got != 9 {
		t.Errorf("Size = %d, want 9", got)
	}
	if (&Error{Rule: "r"}).Error() != "r" || (&Error{Path: "p", Rule: "r"}).Error() != "p: r" {
		t.Error("Error() format")
	}
}

func TestParseLimits(t *testing.T) {
	deep := `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEquals":{"k":` +
		strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}}}}`
	if _, err := Parse([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Errorf("deep nesting: %v", err)
	}
	// A single-object Statement's JSON-level errors are named like a list's.
	_, err := Parse([]byte(`{"Statement":{"Effect":"Allow","Effect":"Deny"}}`))
	if err == nil || err.Error() != "Statement[0].Effect: duplicate member" {
		t.Errorf("got %v", err)
	}
	for _, v := range []string{"99999999999999", "1e99999", "2024-01-01T25:00:00Z"} {
		doc := `{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"DateEquals":{"k":"` + v + `"}}}}`
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("date %s accepted", v)
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	type stored struct {
		Name string
		Doc  Document
		Opt  *Document
	}
	in := `{"Name":"apps","Doc":{"Statement":{"Effect":"Allow","Action":"ecs:*","Resource":"*"}},"Opt":null}`
	var s stored
	if err := json.Unmarshal([]byte(in), &s); err != nil {
		t.Fatal(err)
	}
	if s.Doc.Version != Version2008 || s.Doc.Statements[0].Action[0] != "ecs:*" || s.Opt != nil {
		t.Fatalf("got %+v", s)
	}
	out, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back stored
	if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("round trip of %s: %+v, %v", out, back, err)
	}
	err = json.Unmarshal([]byte(`{"Doc":{"Statement":[]}}`), &s)
	var pe *Error
	if !errors.As(err, &pe) || pe.Path != "Statement" {
		t.Errorf("invalid document in a larger value: %v", err)
	}
}
