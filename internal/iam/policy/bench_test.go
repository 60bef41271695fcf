package policy

import "testing"

// A user's policy of ten statements with wildcards and conditions, asked
// about a request that none of the denies stop, so every statement is
// examined.
const benchPolicy = `{"Version":"2012-10-17","Statement":[
	{"Sid":"Read","Effect":"Allow","Action":["ecs:Describe*","ecs:List*"],"Resource":"*"},
	{"Sid":"Services","Effect":"Allow","Action":"ecs:*Service*","Resource":"arn:aws:ecs:*:123456789012:service/*"},
	{"Sid":"Daemons","Effect":"Allow","Action":["ecs:*Daemon*"],"Resource":"arn:aws:ecs:us-*:123456789012:daemon/apps-*",
	 "Condition":{"StringEquals":{"aws:RequestTag/Team":"apps"},"Bool":{"aws:SecureTransport":"true"}}},
	{"Sid":"Own","Effect":"Allow","Action":"ecs:*","Resource":"arn:aws:ecs:*:123456789012:cluster/${aws:username}-*"},
	{"Sid":"Tags","Effect":"Allow","Action":"ecs:TagResource","Resource":"*",
	 "Condition":{"ForAllValues:StringLike":{"aws:TagKeys":["env","team*"]}}},
	{"Sid":"Hours","Effect":"Deny","Action":"ecs:Delete*","Resource":"*",
	 "Condition":{"DateGreaterThan":{"aws:CurrentTime":"2030-01-01T00:00:00Z"}}},
	{"Sid":"MFA","Effect":"Deny","NotAction":["ecs:Describe*","ecs:List*","iam:*MFA*"],"Resource":"*",
	 "Condition":{"BoolIfExists":{"aws:MultiFactorAuthPresent":"false"}}},
	{"Sid":"Prod","Effect":"Deny","Action":"ecs:*","Resource":"arn:aws:ecs:*:*:cluster/prod*",
	 "Condition":{"StringNotEquals":{"aws:PrincipalTag/Role":"admin"}}},
	{"Sid":"Size","Effect":"Deny","Action":"ecs:UpdateDaemon","Resource":"*",
	 "Condition":{"NumericGreaterThan":{"ecs:DesiredCount":"100"}}},
	{"Sid":"Region","Effect":"Deny","Action":"*","Resource":"*",
	 "Condition":{"StringNotLikeIfExists":{"aws:RequestedRegion":["us-*","eu-west-1"]}}}
]}`

func BenchmarkEvaluate(b *testing.B) {
	d := mustParse(b, benchPolicy)
	policies := []Named{{Name: "user/alice/inline/apps", Doc: d}}
	req := Request{
		Action:   "ecs:UpdateDaemon",
		Resource: "arn:aws:ecs:us-east-1:123456789012:daemon/apps-logs",
		Context: map[string][]string{
			"aws:username":               {"alice"},
			"aws:RequestTag/Team":        {"apps"},
			"aws:SecureTransport":        {"true"},
			"aws:CurrentTime":            {"2026-05-01T12:00:00Z"},
			"aws:MultiFactorAuthPresent": {"true"},
			"aws:PrincipalTag/Role":      {"dev"},
			"ecs:DesiredCount":           {"3"},
			"aws:RequestedRegion":        {"us-east-1"},
		},
	}
	if r := Evaluate(policies, req); r.Decision != Allow {
		b.Fatalf("benchmark request: %+v", r)
	}
	b.ReportAllocs()
	for b.Loop() {
		Evaluate(policies, req)
	}
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse([]byte(benchPolicy)); err != nil {
			b.Fatal(err)
		}
	}
}
