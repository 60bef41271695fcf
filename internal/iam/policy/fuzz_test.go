package policy

import (
	"errors"
	"reflect"
	"testing"
)

// fuzzRequests are asked of every document the fuzzer finds valid, before
// and after a round trip through MarshalJSON.
var fuzzRequests = []Request{
	{Action: "ecs:UpdateDaemon", Resource: "*"},
	{Action: "ecs:ListClusters", Resource: "arn:aws:ecs:us-east-1:123456789012:cluster/prod",
		Context: map[string][]string{"aws:username": {"alice"}, "k": {"a", "10"}, "aws:CurrentTime": {"2024-01-01T00:00:00Z"}, "b": {"true"}, "aws:SourceIp": {"127.0.0.1"}}},
	{Action: "iam:GetUser", Resource: "arn:aws:iam::1:user/a:b*c", Context: map[string][]string{"K": {}, "n": {"5"}, "AWS:USERNAME": {"*"}, "aws:sourceip": {"2001:db8::1"}}},
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"ecs:*","Resource":"*"}}`,
		`{"Statement":[{"Sid":"A1","Effect":"Deny","NotAction":["ecs:*Daemon*","iam:Get?ser"],"NotResource":"arn:aws:ecs:*:*:cluster/dev"}]}`,
		`{"Version":"2012-10-17","Id":"x","Statement":[{"Effect":"Allow","Action":"*","Resource":"arn:aws:iam::1:user/${aws:username, 'a''b'}${*}",
			"Condition":{"ForAnyValue:StringLike":{"k":["a*","${aws:username}"]},"NumericLessThanIfExists":{"n":[1,"2.5"]},
			"DateGreaterThan":{"aws:CurrentTime":"2020-01-01"},"Bool":{"b":true},"Null":{"z":"true"},"ForAllValues:ArnNotLike":{"r":"arn:*:*:*:*:*"}}}]}`,
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ecs:*","Resource":"*","Condition":{"IpAddress":{"aws:SourceIp":["127.0.0.1/32","2001:db8::/32"]}}},
			{"Effect":"Deny","Action":"*","Resource":"*","Condition":{"NotIpAddressIfExists":{"aws:SourceIp":["10.0.0.0/8","::1"]},"ForAllValues:IpAddress":{"k":"0.0.0.0/0"}}}]}`,
		`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Principal":"*"}}`,
		`{"Statement":{"Effect":"Allow","Action":"*","Resource":"*","Condition":{"StringEqual":{"k":"v"}}}}`,
		`[1, {"a": null}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse(b)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Rule == "" {
				t.Fatalf("error %v (%T) is not an *Error with a rule", err, err)
			}
			return
		}
		out, err := d.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if !reflect.DeepEqual(again, d) {
			t.Fatalf("re-parse changed the document:\n%+v\n%+v", d, again)
		}
		for _, req := range fuzzRequests {
			r1 := Evaluate([]Named{{"p", d}}, req)
			r2 := Evaluate([]Named{{"p", again}}, req)
			if !reflect.DeepEqual(r1, r2) {
				t.Fatalf("%+v: %+v before the round trip, %+v after", req, r1, r2)
			}
		}
	})
}
