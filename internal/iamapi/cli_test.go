package iamapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/testenv"
)

// The AWS CLI is the client these tests hold the server to: what it sends
// and what it makes of the answers is what users get.

type awsCLI struct {
	t   *testing.T
	url string
	env []string
}

func needAWS(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("aws")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the AWS CLI is required in CI: %v", err)
		}
		t.Skipf("aws not on PATH: %v", err)
	}
	return path
}

func newCLI(t *testing.T, srv *testenv.Server) *awsCLI {
	needAWS(t)
	return &awsCLI{t: t, url: srv.URL, env: srv.Env()}
}

// as returns the CLI signing with another credential.
func (a *awsCLI) as(keyID, secret string) *awsCLI {
	env := []string{"AWS_ACCESS_KEY_ID=" + keyID, "AWS_SECRET_ACCESS_KEY=" + secret}
	for _, e := range a.env {
		if !strings.HasPrefix(e, "AWS_ACCESS_KEY_ID=") && !strings.HasPrefix(e, "AWS_SECRET_ACCESS_KEY=") {
			env = append(env, e)
		}
	}
	return &awsCLI{t: a.t, url: a.url, env: env}
}

func (a *awsCLI) run(args ...string) (string, string, error) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, needAWS(a.t), append(args, "--endpoint-url", a.url, "--output", "json")...)
	cmd.Env = a.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// ok runs a command that must succeed and decodes its JSON output.
func (a *awsCLI) ok(args ...string) map[string]any {
	a.t.Helper()
	out, stderr, err := a.run(args...)
	if err != nil {
		a.t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	m := map[string]any{}
	if strings.TrimSpace(out) != "" {
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			a.t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return m
}

// fails runs a command that must fail with the error code and every one
// of wants in its message.
func (a *awsCLI) fails(code string, wants []string, args ...string) string {
	a.t.Helper()
	_, stderr, err := a.run(args...)
	if err == nil {
		a.t.Fatalf("aws %s succeeded, want %s", strings.Join(args, " "), code)
	}
	if !strings.Contains(stderr, "("+code+")") {
		a.t.Fatalf("aws %s: want (%s), got\n%s", strings.Join(args, " "), code, stderr)
	}
	for _, w := range wants {
		if !strings.Contains(stderr, w) {
			a.t.Fatalf("aws %s: want %q in\n%s", strings.Join(args, " "), w, stderr)
		}
	}
	return stderr
}

// at walks decoded JSON: at(m, "User", "Arn"), at(m, "Users", 0).
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: no object at %q in %v", path, k, v)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no element %d in %v", path, k, v)
			}
			v = l[k]
		}
	}
	return v
}

func str(t *testing.T, v any, path ...any) string {
	t.Helper()
	s, _ := at(t, v, path...).(string)
	return s
}

const (
	acct     = "123456789012"
	aliceARN = "arn:aws:iam::123456789012:user/teams/alice"
)

func TestIdentitiesWithTheAWSCLI(t *testing.T) {
	srv := testenv.StartServer(t, "")
	root := newCLI(t, srv)

	id := root.ok("sts", "get-caller-identity")
	if str(t, id, "Arn") != "arn:aws:iam::"+acct+":root" || str(t, id, "Account") != acct || str(t, id, "UserId") != acct {
		t.Fatalf("root identity %v", id)
	}

	// An agent is a session of the capstan-agent role, and may do no IAM action.
	root.ok("ecs", "create-cluster", "--cluster-name", "default")
	cred, err := srv.Service.CreateAgentCredential(context.Background(), &ops.CreateAgentCredentialRequest{Cluster: "default"})
	if err != nil {
		t.Fatal(err)
	}
	agent := root.as(cred.AccessKeyID, cred.SecretAccessKey)
	agentARN := "arn:aws:sts::" + acct + ":assumed-role/capstan-agent/" + cred.AccessKeyID
	if id := agent.ok("sts", "get-caller-identity"); str(t, id, "Arn") != agentARN || str(t, id, "UserId") != "AROACAPSTANAGENTROLE0:"+cred.AccessKeyID {
		t.Fatalf("agent identity %v", id)
	}
	agent.fails("AccessDenied", []string{"User: " + agentARN + " is not authorized to perform: iam:ListUsers on resource: * because"}, "iam", "list-users")

	u := root.ok("iam", "create-user", "--user-name", "alice", "--path", "/teams/", "--tags", "Key=team,Value=apps")
	if str(t, u, "User", "Arn") != aliceARN || !strings.HasPrefix(str(t, u, "User", "UserId"), "AIDA") || str(t, u, "User", "Tags", 0, "Value") != "apps" {
		t.Fatalf("create-user %v", u)
	}
	root.fails("EntityAlreadyExists", []string{"ALICE"}, "iam", "create-user", "--user-name", "ALICE")
	root.fails("ValidationError", []string{"userName", "regular expression"}, "iam", "create-user", "--user-name", "bad name")
	root.fails("NoSuchEntity", []string{"nobody"}, "iam", "get-user", "--user-name", "nobody")
	root.ok("iam", "create-user", "--user-name", "bob")
	users := root.ok("iam", "list-users")
	if str(t, users, "Users", 0, "UserName") != "alice" || str(t, users, "Users", 1, "UserName") != "bob" {
		t.Fatalf("list-users %v", users)
	}
	root.ok("iam", "tag-user", "--user-name", "alice", "--tags", "Key=env,Value=dev")
	root.ok("iam", "untag-user", "--user-name", "alice", "--tag-keys", "team")
	if tags := root.ok("iam", "list-user-tags", "--user-name", "alice"); str(t, tags, "Tags", 0, "Key") != "env" || len(at(t, tags, "Tags").([]any)) != 1 {
		t.Fatalf("list-user-tags %v", tags)
	}

	// Groups and inline policies.
	g := root.ok("iam", "create-group", "--group-name", "apps")
	if str(t, g, "Group", "Arn") != "arn:aws:iam::"+acct+":group/apps" {
		t.Fatalf("create-group %v", g)
	}
	root.ok("iam", "add-user-to-group", "--group-name", "apps", "--user-name", "alice")
	if gg := root.ok("iam", "get-group", "--group-name", "apps"); str(t, gg, "Users", 0, "UserName") != "alice" {
		t.Fatalf("get-group %v", gg)
	}
	if gs := root.ok("iam", "list-groups-for-user", "--user-name", "alice"); str(t, gs, "Groups", 0, "GroupName") != "apps" {
		t.Fatalf("list-groups-for-user %v", gs)
	}
	root.fails("MalformedPolicyDocument", []string{"Statement[1]", "Effect"}, "iam", "put-group-policy", "--group-name", "apps", "--policy-name", "bad",
		"--policy-document", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ecs:*","Resource":"*"},{"Effect":"Maybe","Action":"ecs:*","Resource":"*"}]}`)
	if ps := root.ok("iam", "list-group-policies", "--group-name", "apps"); len(at(t, ps, "PolicyNames").([]any)) != 0 {
		t.Fatalf("a malformed policy was kept: %v", ps)
	}
	ecsDoc := `{"Version": "2012-10-17", "Statement": [{"Sid": "Apps", "Effect": "Allow", "Action": ["ecs:*Service*", "ecs:List*"], "Resource": "*"},` +
		` {"Sid": "NoDaemons", "Effect": "Deny", "Action": "ecs:*Daemon*", "Resource": "*"}]}`
	root.ok("iam", "put-group-policy", "--group-name", "apps", "--policy-name", "ecs", "--policy-document", ecsDoc)
	gp := root.ok("iam", "get-group-policy", "--group-name", "apps", "--policy-name", "ecs")
	if str(t, gp, "PolicyDocument", "Statement", 1, "Sid") != "NoDaemons" {
		t.Fatalf("get-group-policy: the CLI decodes the document: %v", gp)
	}
	root.fails("NoSuchEntity", []string{"nope"}, "iam", "get-group-policy", "--group-name", "apps", "--policy-name", "nope")

	// The user's own key, and what it may do.
	k := root.ok("iam", "create-access-key", "--user-name", "alice")
	keyID, secret := str(t, k, "AccessKey", "AccessKeyId"), str(t, k, "AccessKey", "SecretAccessKey")
	if len(keyID) != 20 || !strings.HasPrefix(keyID, "AKIA") || len(secret) != 40 || str(t, k, "AccessKey", "Status") != "Active" {
		t.Fatalf("create-access-key %v", k)
	}
	alice := root.as(keyID, secret)
	if me := alice.ok("sts", "get-caller-identity"); str(t, me, "Arn") != aliceARN || str(t, me, "UserId") != str(t, u, "User", "UserId") {
		t.Fatalf("alice's identity %v", me)
	}
	alice.fails("AccessDenied", []string{"User: " + aliceARN + " is not authorized to perform: iam:CreateUser on resource: arn:aws:iam::" + acct +
		":user/mallory because no identity-based policy allows the iam:CreateUser action"}, "iam", "create-user", "--user-name", "mallory")
	alice.fails("AccessDenied", []string{"iam:GetUser on resource: " + aliceARN}, "iam", "get-user")
	// A managed policy lets her read herself.
	self := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["iam:GetUser","iam:ListAccessKeys"],"Resource":"arn:aws:iam::*:user/*/${aws:username}"}]}`
	p := root.ok("iam", "create-policy", "--policy-name", "self", "--policy-document", self, "--description", "read yourself")
	policyARN := str(t, p, "Policy", "Arn")
	if policyARN != "arn:aws:iam::"+acct+":policy/self" || str(t, p, "Policy", "DefaultVersionId") != "v1" {
		t.Fatalf("create-policy %v", p)
	}
	root.fails("EntityAlreadyExists", nil, "iam", "create-policy", "--policy-name", "self", "--policy-document", self)
	root.ok("iam", "attach-user-policy", "--user-name", "alice", "--policy-arn", policyARN)
	root.fails("NoSuchEntity", []string{"policy/absent"}, "iam", "attach-user-policy", "--user-name", "alice", "--policy-arn", "arn:aws:iam::"+acct+":policy/absent")
	if ap := root.ok("iam", "list-attached-user-policies", "--user-name", "alice"); str(t, ap, "AttachedPolicies", 0, "PolicyArn") != policyARN {
		t.Fatalf("list-attached-user-policies %v", ap)
	}
	if gp := root.ok("iam", "get-policy", "--policy-arn", policyARN); at(t, gp, "Policy", "AttachmentCount") != float64(1) {
		t.Fatalf("get-policy %v", gp)
	}
	if me := alice.ok("iam", "get-user"); str(t, me, "User", "UserName") != "alice" {
		t.Fatalf("alice get-user %v", me)
	}
	alice.fails("AccessDenied", []string{"iam:GetUser on resource: arn:aws:iam::" + acct + ":user/bob because"}, "iam", "get-user", "--user-name", "bob")
	if keys := alice.ok("iam", "list-access-keys"); str(t, keys, "AccessKeyMetadata", 0, "AccessKeyId") != keyID {
		t.Fatalf("alice list-access-keys %v", keys)
	}
	v1 := root.ok("iam", "get-policy-version", "--policy-arn", policyARN, "--version-id", "v1")
	if str(t, v1, "PolicyVersion", "Document", "Statement", 0, "Resource") != "arn:aws:iam::*:user/*/${aws:username}" {
		t.Fatalf("get-policy-version %v", v1)
	}
	root.ok("iam", "create-policy-version", "--policy-arn", policyARN, "--set-as-default", "--policy-document",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:ListAccessKeys","Resource":"*"}]}`)
	if vs := root.ok("iam", "list-policy-versions", "--policy-arn", policyARN); str(t, vs, "Versions", 0, "VersionId") != "v2" || at(t, vs, "Versions", 0, "IsDefaultVersion") != true {
		t.Fatalf("list-policy-versions %v", vs)
	}
	alice.fails("AccessDenied", []string{"iam:GetUser"}, "iam", "get-user") // v2 is what applies now

	// The simulator says which statements decide.
	sim := root.ok("iam", "simulate-principal-policy", "--policy-source-arn", aliceARN, "--action-names", "ecs:UpdateDaemon", "ecs:CreateService", "iam:CreateUser")
	for i, want := range []string{"explicitDeny", "allowed", "implicitDeny"} {
		if got := str(t, sim, "EvaluationResults", i, "EvalDecision"); got != want {
			t.Fatalf("simulate %d: %s, want %s: %v", i, got, want, sim)
		}
	}
	if str(t, sim, "EvaluationResults", 0, "MatchedStatements", 0, "SourcePolicyId") != "group/apps/inline/ecs" ||
		str(t, sim, "EvaluationResults", 0, "MatchedStatements", 0, "SourcePolicyType") != "group" {
		t.Fatalf("simulate: matched statements %v", sim)
	}

	// An Inactive key authenticates nothing.
	root.ok("iam", "update-access-key", "--user-name", "alice", "--access-key-id", keyID, "--status", "Inactive")
	alice.fails("InvalidClientTokenId", nil, "sts", "get-caller-identity")
	alice.fails("InvalidClientTokenId", nil, "iam", "list-access-keys")
	root.ok("iam", "update-access-key", "--user-name", "alice", "--access-key-id", keyID, "--status", "Active")
	if me := alice.ok("sts", "get-caller-identity"); str(t, me, "Arn") != aliceARN {
		t.Fatalf("reactivated %v", me)
	}

	// Deleting what is in use is refused; undone in order it goes.
	root.fails("DeleteConflict", nil, "iam", "delete-user", "--user-name", "alice")
	root.fails("DeleteConflict", nil, "iam", "delete-policy", "--policy-arn", policyARN)
	root.fails("DeleteConflict", nil, "iam", "delete-group", "--group-name", "apps")
	root.ok("iam", "detach-user-policy", "--user-name", "alice", "--policy-arn", policyARN)
	root.ok("iam", "delete-policy-version", "--policy-arn", policyARN, "--version-id", "v1")
	root.ok("iam", "delete-policy", "--policy-arn", policyARN)
	root.ok("iam", "delete-access-key", "--user-name", "alice", "--access-key-id", keyID)
	root.ok("iam", "remove-user-from-group", "--group-name", "apps", "--user-name", "alice")
	root.ok("iam", "delete-group-policy", "--group-name", "apps", "--policy-name", "ecs")
	root.ok("iam", "delete-group", "--group-name", "apps")
	root.ok("iam", "delete-user", "--user-name", "alice")
	root.fails("NoSuchEntity", nil, "iam", "get-user", "--user-name", "alice")
	if ps := root.ok("iam", "list-policies", "--scope", "Local"); len(at(t, ps, "Policies").([]any)) != 0 {
		t.Fatalf("list-policies %v", ps)
	}

	// ECS is served beside IAM as before.
	if cl := root.ok("ecs", "list-clusters"); at(t, cl, "clusterArns") == nil {
		t.Fatalf("ecs list-clusters %v", cl)
	}
}
