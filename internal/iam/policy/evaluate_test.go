package policy

import (
	"reflect"
	"testing"
)

func mustParse(t testing.TB, doc string) *Document {
	t.Helper()
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, doc)
	}
	return d
}

func TestActions(t *testing.T) {
	for _, c := range []struct {
		pattern, action string
		want            bool
	}{
		{"*", "ecs:ListClusters", true},
		{"ecs:*", "ecs:ListClusters", true},
		{"ecs:*", "ECS:listclusters", true}, // case-insensitive
		{"ECS:LISTCLUSTERS", "ecs:ListClusters", true},
		{"ecs:*Daemon*", "ecs:UpdateDaemon", true},
		{"ecs:*Daemon*", "ecs:DescribeDaemons", true},
		{"ecs:*Daemon*", "ecs:UpdateService", false},
		{"ecs:List?lusters", "ecs:ListClusters", true},
		{"ecs:List?lusters", "ecs:Listlusters", false},
		{"ecs:Describe*", "ec2:DescribeInstances", false},
		{"ecs:Describe*", "ecs-x:DescribeY", false},
		{"ecs:ListClusters", "ecs:ListClustersX", false},
		{"ecs:*", "ec2:RunInstances", false},
	} {
		d := mustParse(t, `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"`+c.pattern+`","Resource":"*"}}`)
		got := Evaluate([]Named{{"p", d}}, Request{Action: c.action, Resource: "*"}).Decision == Allow
		if got != c.want {
			t.Errorf("%s vs %s: got %v, want %v", c.pattern, c.action, got, c.want)
		}
	}
}

func TestResources(t *testing.T) {
	const cluster = "arn:aws:ecs:us-east-1:123456789012:cluster/prod"
	for _, c := range []struct {
		pattern, resource string
		want              bool
	}{
		{"*", cluster, true},
		{"*", "*", true},
		{cluster, cluster, true},
		{"arn:aws:ecs:us-east-1:123456789012:cluster/*", cluster, true},
		{"arn:aws:ecs:*:*:*", cluster, true},
		{"arn:aws:ecs:us-*:123456789012:cluster/pro?", cluster, true},
		{"arn:aws:ecs:us-east-1:123456789012:cluster/Prod", cluster, false}, // case-sensitive
		{"arn:aws:ecs:eu-*:123456789012:cluster/*", cluster, false},
		{"arn:aws:ecs:*:*:cluster/*", "*", false}, // an unscoped request needs "*"
		{"arn:aws:ecs:*:*:*", "arn:aws:ecs:us-east-1:1:task/c:t", true},
		// A wildcard stops at its field's colon: the region's * may not
		// swallow the account, so the account field "service/a" is compared
		// with "123".
		{"arn:aws:ecs:*:service/a:b", "arn:aws:ecs:us-east-1:123:service/a:b", false},
		{"arn:aws:ecs:*:*:service/a:*", "arn:aws:ecs:us-east-1:123:service/a:b", true},
		{"arn:aws:s3:::bucket/*", "arn:aws:s3:::bucket/a/b", true},
		{"arn:aws:ecs:*:*:cluster/*", "cluster/prod", false},
	} {
		d := mustParse(t, `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"ecs:*","Resource":"`+c.pattern+`"}}`)
		got := Evaluate([]Named{{"p", d}}, Request{Action: "ecs:DeleteCluster", Resource: c.resource}).Decision == Allow
		if got != c.want {
			t.Errorf("%s vs %s: got %v, want %v", c.pattern, c.resource, got, c.want)
		}
	}
}

func TestResourceVariables(t *testing.T) {
	d := mustParse(t, `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"iam:*",
		"Resource":"arn:aws:iam::123:user/${aws:username}"}}`)
	old := mustParse(t, `{"Statement":{"Effect":"Allow","Action":"iam:*","Resource":"arn:aws:iam::123:user/${aws:username}"}}`)
	for _, c := range []struct {
		doc      *Document
		user     []string
		resource string
		want     bool
	}{
		{d, []string{"alice"}, "arn:aws:iam::123:user/alice", true},
		{d, []string{"alice"}, "arn:aws:iam::123:user/bob", false},
		{d, nil, "arn:aws:iam::123:user/", false},
		{d, []string{"*"}, "arn:aws:iam::123:user/bob", false}, // a value is never a wildcard
		{d, []string{"*"}, "arn:aws:iam::123:user/*", true},
		{old, []string{"alice"}, "arn:aws:iam::123:user/alice", false}, // 2008-10-17: literal
		{old, []string{"alice"}, "arn:aws:iam::123:user/${aws:username}", true},
	} {
		ctx := map[string][]string{}
		if c.user != nil {
			ctx["aws:username"] = c.user
		}
		got := Evaluate([]Named{{"p", c.doc}}, Request{Action: "iam:GetUser", Resource: c.resource, Context: ctx}).Decision == Allow
		if got != c.want {
			t.Errorf("%s %v %s: got %v, want %v", c.doc.Version, c.user, c.resource, got, c.want)
		}
	}
}

func TestNotActionNotResource(t *testing.T) {
	const prod = "arn:aws:ecs:us-east-1:1:cluster/prod"
	const dev = "arn:aws:ecs:us-east-1:1:cluster/dev"
	allowAllButDelete := mustParse(t, `{"Version":"2012-10-17","Statement":{"Effect":"Allow","NotAction":["ecs:Delete*","iam:*"],"Resource":"*"}}`)
	denyOutsideDev := mustParse(t, `{"Version":"2012-10-17","Statement":[
		{"Effect":"Allow","Action":"ecs:*","Resource":"*"},
		{"Effect":"Deny","Action":"ecs:*","NotResource":"arn:aws:ecs:*:*:cluster/dev"}]}`)
	for _, c := range []struct {
		doc              *Document
		action, resource string
		want             Decision
	}{
		{allowAllButDelete, "ecs:ListClusters", "*", Allow},
		{allowAllButDelete, "ec2:RunInstances", "*", Allow},
		{allowAllButDelete, "ecs:DeleteCluster", prod, ImplicitDeny},
		{allowAllButDelete, "IAM:CreateUser", "*", ImplicitDeny},
		{denyOutsideDev, "ecs:UpdateService", dev, Allow},
		{denyOutsideDev, "ecs:UpdateService", prod, ExplicitDeny},
		{denyOutsideDev, "ecs:ListClusters", "*", ExplicitDeny},
		{denyOutsideDev, "s3:GetObject", dev, ImplicitDeny},
	} {
		if got := Evaluate([]Named{{"p", c.doc}}, Request{Action: c.action, Resource: c.resource}).Decision; got != c.want {
			t.Errorf("%s %s: got %v, want %v", c.action, c.resource, got, c.want)
		}
	}
}

func TestDecisionOrder(t *testing.T) {
	allow := mustParse(t, `{"Version":"2012-10-17","Statement":[
		{"Sid":"Read","Effect":"Allow","Action":"ecs:Describe*","Resource":"*"},
		{"Sid":"All","Effect":"Allow","Action":"ecs:*","Resource":"*"}]}`)
	deny := mustParse(t, `{"Version":"2012-10-17","Statement":{"Sid":"NoDaemons","Effect":"Deny","Action":"ecs:*Daemon*","Resource":"*"}}`)
	nothing := mustParse(t, `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"s3:*","Resource":"*"}}`)
	for _, c := range []struct {
		name     string
		policies []Named
		action   string
		want     Result
	}{
		{"no policies", nil, "ecs:ListClusters", Result{Decision: ImplicitDeny}},
		{"nil document", []Named{{"x", nil}}, "ecs:ListClusters", Result{Decision: ImplicitDeny}},
		{"no statement applies", []Named{{"s3", nothing}}, "ecs:ListClusters", Result{Decision: ImplicitDeny}},
		{"allow", []Named{{"a", allow}, {"d", deny}}, "ecs:ListClusters", Result{Allow, []Match{{"a", 1, "All", "Allow"}}}},
		{"every allow is listed", []Named{{"a", allow}}, "ecs:DescribeClusters",
			Result{Allow, []Match{{"a", 0, "Read", "Allow"}, {"a", 1, "All", "Allow"}}}},
		{"deny wins after allows", []Named{{"a", allow}, {"d", deny}}, "ecs:DescribeDaemon",
			Result{ExplicitDeny, []Match{{"a", 0, "Read", "Allow"}, {"a", 1, "All", "Allow"}, {"d", 0, "NoDaemons", "Deny"}}}},
		{"deny wins before allows", []Named{{"d", deny}, {"a", allow}}, "ecs:UpdateDaemon",
			Result{ExplicitDeny, []Match{{"d", 0, "NoDaemons", "Deny"}, {"a", 1, "All", "Allow"}}}},
		{"deny alone", []Named{{"d", deny}}, "ecs:UpdateDaemon", Result{ExplicitDeny, []Match{{"d", 0, "NoDaemons", "Deny"}}}},
	} {
		got := Evaluate(c.policies, Request{Action: c.action, Resource: "*"})
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestDecisionString(t *testing.T) {
	for d, want := range map[Decision]string{ImplicitDeny: "implicitDeny", Allow: "allowed", ExplicitDeny: "explicitDeny", 7: "Decision(7)"} {
		if d.String() != want {
			t.Errorf("%d: %q, want %q", int(d), d.String(), want)
		}
	}
}

// A hand-built condition that does not parse fails closed.
func TestHandBuiltFailsClosed(t *testing.T) {
	bad := []Condition{{Operator: "StringEqualz", Key: "k", Values: []string{"v"}}}
	d := &Document{Version: Version2012, Statements: []Statement{
		{Effect: "Allow", Action: []string{"*"}, Resource: []string{"*"}, Conditions: bad},
	}}
	if got := Evaluate([]Named{{"p", d}}, Request{Action: "ecs:X", Resource: "*"}).Decision; got != ImplicitDeny {
		t.Errorf("Allow with a bad condition: %v", got)
	}
	d.Statements[0].Effect = "Deny"
	if got := Evaluate([]Named{{"p", d}}, Request{Action: "ecs:X", Resource: "*"}).Decision; got != ExplicitDeny {
		t.Errorf("Deny with a bad condition: %v", got)
	}
}

// A hand-built statement without exactly one of each element pair fails
// closed too.
func TestHandBuiltStatementFailsClosed(t *testing.T) {
	for _, s := range []Statement{
		{Resource: []string{"*"}},
		{Action: []string{"ecs:X"}, NotAction: []string{"ecs:Y"}, Resource: []string{"*"}},
		{Action: []string{"ecs:X"}},
	} {
		for effect, want := range map[string]Decision{"Allow": ImplicitDeny, "Deny": ExplicitDeny, "Maybe": ImplicitDeny} {
			s.Effect = effect
			d := &Document{Statements: []Statement{s}}
			if got := Evaluate([]Named{{"p", d}}, Request{Action: "ecs:Z", Resource: "*"}).Decision; got != want {
				t.Errorf("%+v: got %v, want %v", s, got, want)
			}
		}
	}
}
