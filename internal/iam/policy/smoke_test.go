package policy

import "testing"

func TestSmoke(t *testing.T) {
	d, err := Parse([]byte(`{"Version":"2012-10-17","Statement":[
		{"Sid":"A","Effect":"Allow","Action":"ecs:*","Resource":"*"},
		{"Sid":"D","Effect":"Deny","Action":"ecs:Delete*","Resource":"arn:aws:ecs:*:*:cluster/prod",
		 "Condition":{"StringNotEquals":{"aws:username":"root"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	pols := []Named{{Name: "p", Doc: d}}
	for _, c := range []struct {
		action, resource string
		want             Decision
	}{
		{"ecs:ListClusters", "*", Allow},
		{"ecs:DeleteCluster", "arn:aws:ecs:us-east-1:1:cluster/prod", ExplicitDeny},
		{"s3:GetObject", "*", ImplicitDeny},
	} {
		got := Evaluate(pols, Request{Action: c.action, Resource: c.resource, Context: map[string][]string{"aws:UserName": {"alice"}}})
		if got.Decision != c.want {
			t.Errorf("%s %s: got %v, want %v", c.action, c.resource, got.Decision, c.want)
		}
	}
}
