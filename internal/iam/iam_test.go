package iam

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/iam/policy"
	"github.com/capstanhq/capstan/internal/store"
)

const account = "123456789012"

func newStore(t *testing.T) *Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	s := NewStore(st, account)
	s.Now = func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) }
	return s
}

// wantCode fails unless err is a classified error with code.
func wantCode(t *testing.T, err error, code string, contains ...string) {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Code != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	for _, c := range contains {
		if !strings.Contains(fe.Message, c) {
			t.Fatalf("%s %q does not contain %q", code, fe.Message, c)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const allowAll = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`

func TestUsersAndKeys(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	u, err := s.CreateUser(ctx, "Alice", "/teams/apps/", []Tag{{"team", "apps"}})
	must(t, err)
	if u.Arn != "arn:aws:iam::123456789012:user/teams/apps/Alice" || !strings.HasPrefix(u.UserID, "AIDA") || len(u.UserID) != 21 {
		t.Fatalf("user %+v", u)
	}
	_, err = s.CreateUser(ctx, "alice", "", nil)
	wantCode(t, err, CodeEntityAlreadyExists, "alice")
	got, err := s.GetUser(ctx, "ALICE")
	must(t, err)
	if got.UserName != "Alice" {
		t.Fatalf("names are found regardless of case: %+v", got)
	}
	_, err = s.GetUser(ctx, "bob")
	wantCode(t, err, CodeNoSuchEntity, "bob")

	must(t, s.TagUser(ctx, "alice", []Tag{{"TEAM", "platform"}, {"env", "prod"}}))
	must(t, s.UntagUser(ctx, "alice", []string{"Env", "absent"}))
	got, _ = s.GetUser(ctx, "alice")
	if !slices.Equal(got.Tags, []Tag{{"TEAM", "platform"}}) {
		t.Fatalf("tags %+v", got.Tags)
	}

	k1, err := s.CreateAccessKey(ctx, "alice")
	must(t, err)
	if len(k1.AccessKeyID) != 20 || !strings.HasPrefix(k1.AccessKeyID, "AKIA") || len(k1.SecretAccessKey) != 40 || k1.Status != StatusActive {
		t.Fatalf("key %+v", k1)
	}
	_, err = s.CreateAccessKey(ctx, "alice")
	must(t, err)
	_, err = s.CreateAccessKey(ctx, "alice")
	wantCode(t, err, CodeLimitExceeded, "AccessKeysPerUser: 2")

	cred, ok, err := s.Credential(ctx, k1.AccessKeyID)
	must(t, err)
	if !ok || cred.Role != auth.RoleUser || cred.UserName != "Alice" || cred.ARN != u.Arn || cred.SecretAccessKey != k1.SecretAccessKey {
		t.Fatalf("credential %+v ok=%v", cred, ok)
	}
	must(t, s.UpdateAccessKey(ctx, "alice", k1.AccessKeyID, StatusInactive))
	if _, ok, _ := s.Credential(ctx, k1.AccessKeyID); ok {
		t.Fatal("an Inactive key authenticates")
	}
	keys, err := s.ListAccessKeys(ctx, "alice")
	must(t, err)
	if len(keys) != 2 || keys[0].Status != StatusInactive || keys[0].SecretAccessKey != "" {
		t.Fatalf("keys %+v", keys)
	}
	err = s.UpdateAccessKey(ctx, "alice", k1.AccessKeyID, "Expired")
	wantCode(t, err, CodeValidationError, "at 'status'")

	_, err = s.CreateUser(ctx, "bob", "", nil)
	must(t, err)
	err = s.DeleteAccessKey(ctx, "bob", k1.AccessKeyID)
	wantCode(t, err, CodeNoSuchEntity, k1.AccessKeyID)

	err = s.DeleteUser(ctx, "alice")
	wantCode(t, err, CodeDeleteConflict, "access keys")
	for _, k := range keys {
		must(t, s.DeleteAccessKey(ctx, "alice", k.AccessKeyID))
	}
	if _, ok, _ := s.Credential(ctx, keys[1].AccessKeyID); ok {
		t.Fatal("a deleted key authenticates")
	}
	must(t, s.DeleteUser(ctx, "alice"))
	users, err := s.ListUsers(ctx, "")
	must(t, err)
	if len(users) != 1 || users[0].UserName != "bob" {
		t.Fatalf("users %+v", users)
	}
}

func TestGroupsAndPolicies(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	_, err := s.CreateUser(ctx, "alice", "", nil)
	must(t, err)
	g, err := s.CreateGroup(ctx, "apps", "")
	must(t, err)
	if g.Arn != "arn:aws:iam::123456789012:group/apps" || !strings.HasPrefix(g.GroupID, "AGPA") {
		t.Fatalf("group %+v", g)
	}
	_, err = s.CreateGroup(ctx, "APPS", "")
	wantCode(t, err, CodeEntityAlreadyExists)
	must(t, s.AddUserToGroup(ctx, "apps", "alice"))
	must(t, s.AddUserToGroup(ctx, "apps", "Alice")) // again: no change
	_, members, err := s.GetGroup(ctx, "apps")
	must(t, err)
	if len(members) != 1 || members[0].UserName != "alice" {
		t.Fatalf("members %+v", members)
	}
	wantCode(t, s.DeleteGroup(ctx, "apps"), CodeDeleteConflict, "remove users")
	wantCode(t, s.AddUserToGroup(ctx, "nope", "alice"), CodeNoSuchEntity, "group with name nope")

	// A malformed document names the statement and the member.
	bad := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"},{"Effect":"Permit","Action":"*","Resource":"*"}]}`
	err = s.PutGroupPolicy(ctx, "apps", "p", bad)
	wantCode(t, err, CodeMalformedPolicyDocument, "Statement[1]", "Effect")
	if names, _ := s.ListGroupPolicies(ctx, "apps"); len(names) != 0 {
		t.Fatalf("a malformed policy was kept: %v", names)
	}

	must(t, s.PutGroupPolicy(ctx, "apps", "ecs", `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"ecs:*","Resource":"*"}}`))
	must(t, s.PutUserPolicy(ctx, "alice", "deny-daemons", `{"Version":"2012-10-17","Statement":[{"Sid":"NoDaemons","Effect":"Deny","Action":"ecs:*Daemon*","Resource":"*"}]}`))
	err = s.PutUserPolicy(ctx, "alice", "big", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ecs:*","Resource":"arn:aws:ecs:::`+strings.Repeat("x", 2048)+`"}]}`)
	wantCode(t, err, CodeLimitExceeded, "2048")

	p, err := s.CreatePolicy(ctx, "readers", "", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ecs:Describe*","ecs:List*"],"Resource":"*"}]}`, "read", nil)
	must(t, err)
	if p.Arn != "arn:aws:iam::123456789012:policy/readers" || p.DefaultVersionID != "v1" {
		t.Fatalf("policy %+v", p)
	}
	_, err = s.CreatePolicy(ctx, "Readers", "/other/", allowAll, "", nil)
	wantCode(t, err, CodeEntityAlreadyExists)
	must(t, s.AttachGroupPolicy(ctx, "apps", p.Arn))
	must(t, s.AttachUserPolicy(ctx, "alice", p.Arn))
	wantCode(t, s.AttachUserPolicy(ctx, "alice", "arn:aws:iam::123456789012:policy/nope"), CodeNoSuchEntity, "does not exist or is not attachable")
	wantCode(t, s.AttachUserPolicy(ctx, "alice", "arn:aws:iam::aws:policy/AdministratorAccess"), CodeNoSuchEntity)
	wantCode(t, s.AttachUserPolicy(ctx, "alice", "not-an-arn-at-all-really"), CodeInvalidInput)
	got, _ := s.GetPolicy(ctx, p.Arn)
	if got.AttachmentCount != 2 {
		t.Fatalf("attachment count %d", got.AttachmentCount)
	}
	wantCode(t, s.DeletePolicy(ctx, p.Arn), CodeDeleteConflict, "attached")

	pols, err := s.Policies(ctx, "alice")
	must(t, err)
	var names []string
	for _, n := range pols {
		names = append(names, n.Name)
	}
	want := []string{"user/alice/inline/deny-daemons", p.Arn, "group/apps/inline/ecs"}
	if !slices.Equal(names, want) {
		t.Fatalf("policies %v, want %v", names, want)
	}

	// Versions: at most five; the default applies.
	for i := 2; i <= 5; i++ {
		_, err := s.CreatePolicyVersion(ctx, p.Arn, allowAll, false)
		must(t, err)
	}
	_, err = s.CreatePolicyVersion(ctx, p.Arn, allowAll, false)
	wantCode(t, err, CodeLimitExceeded, "5 versions")
	wantCode(t, s.DeletePolicyVersion(ctx, p.Arn, "v1"), CodeDeleteConflict, "default")
	must(t, s.DeletePolicyVersion(ctx, p.Arn, "v2"))
	v, err := s.CreatePolicyVersion(ctx, p.Arn, allowAll, true)
	must(t, err)
	if v.VersionID != "v6" || !v.IsDefaultVersion {
		t.Fatalf("version numbers are not reused: %+v", v)
	}
	vs, _ := s.ListPolicyVersions(ctx, p.Arn)
	if len(vs) != 5 || vs[0].VersionID != "v6" || !vs[0].IsDefaultVersion || vs[len(vs)-1].IsDefaultVersion {
		t.Fatalf("versions %+v", vs)
	}

	must(t, s.DetachUserPolicy(ctx, "alice", p.Arn))
	wantCode(t, s.DetachUserPolicy(ctx, "alice", p.Arn), CodeNoSuchEntity)
	must(t, s.DetachGroupPolicy(ctx, "apps", p.Arn))
	wantCode(t, s.DeletePolicy(ctx, p.Arn), CodeDeleteConflict, "versions")
	for _, v := range vs[1:] {
		must(t, s.DeletePolicyVersion(ctx, p.Arn, v.VersionID))
	}
	must(t, s.DeletePolicy(ctx, p.Arn))

	wantCode(t, s.DeleteUser(ctx, "alice"), CodeDeleteConflict, "policies")
	must(t, s.DeleteUserPolicy(ctx, "alice", "DENY-daemons"))
	wantCode(t, s.DeleteUser(ctx, "alice"), CodeDeleteConflict, "group")
	must(t, s.RemoveUserFromGroup(ctx, "apps", "alice"))
	wantCode(t, s.RemoveUserFromGroup(ctx, "apps", "alice"), CodeNoSuchEntity)
	must(t, s.DeleteUser(ctx, "alice"))
	must(t, s.DeleteGroupPolicy(ctx, "apps", "ecs"))
	must(t, s.DeleteGroup(ctx, "apps"))
}

func TestAuthorizerWording(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := NewAuthorizer(s)
	_, err := s.CreateUser(ctx, "alice", "", nil)
	must(t, err)
	_, err = s.CreateUser(ctx, "carol", "/ops/", nil)
	must(t, err)
	must(t, s.PutUserPolicy(ctx, "alice", "apps", `{"Version":"2012-10-17","Statement":[
		{"Sid":"Services","Effect":"Allow","Action":["ecs:*Service*","ecs:Describe*"],"Resource":"*"},
		{"Sid":"NotProd","Effect":"Deny","Action":"ecs:*","Resource":"arn:aws:ecs:us-east-1:123456789012:*/prod*"},
		{"Sid":"OwnTeam","Effect":"Allow","Action":"ecs:TagResource","Resource":"*","Condition":{"StringEquals":{"ecs:ResourceTag/owner":"${aws:username}"}}},
		{"Sid":"FromLoopback","Effect":"Allow","Action":"ecs:ListClusters","Resource":"*","Condition":{"StringLike":{"aws:SourceIp":"127.*"}}}]}`))
	const (
		dev      = "arn:aws:ecs:us-east-1:123456789012:cluster/dev"
		prod     = "arn:aws:ecs:us-east-1:123456789012:cluster/prod"
		daemon   = "arn:aws:ecs:us-east-1:123456789012:daemon/dev/agent"
		aliceArn = "arn:aws:iam::123456789012:user/alice"
	)
	alice := auth.Principal{Role: auth.RoleUser, UserName: "alice", ARN: aliceArn, AccessKeyID: "AKIAALICE"}
	carol := auth.Principal{Role: auth.RoleUser, UserName: "carol", ARN: "arn:aws:iam::123456789012:user/ops/carol"}
	root := auth.Principal{Role: auth.RoleAdmin, AccessKeyID: "ROOT"}
	agent := auth.Principal{Role: auth.RoleAgent, AccessKeyID: "CSAGKEY", InstanceID: "i-0abc"}
	cases := []struct {
		name      string
		p         auth.Principal
		action    string
		resources []string
		cond      map[string][]string
		want      string // "" allowed
	}{
		{"root anything", root, "iam:DeleteUser", []string{"arn:aws:iam::123456789012:user/alice"}, nil, ""},
		{"allowed", alice, "ecs:UpdateService", []string{dev}, nil, ""},
		{"no resources is *", alice, "ecs:DescribeClusters", nil, nil, ""},
		{"implicit", alice, "ecs:UpdateDaemon", []string{daemon},
			nil, "User: " + aliceArn + " is not authorized to perform: ecs:UpdateDaemon on resource: " + daemon + " because no identity-based policy allows the ecs:UpdateDaemon action"},
		{"explicit", alice, "ecs:UpdateService", []string{prod},
			nil, "User: " + aliceArn + " is not authorized to perform: ecs:UpdateService on resource: " + prod + " with an explicit deny in an identity-based policy"},
		{"every resource is checked", alice, "ecs:DescribeClusters", []string{dev, prod}, nil, "on resource: " + prod + " with an explicit deny"},
		{"policy variable", alice, "ecs:TagResource", []string{dev}, map[string][]string{"ecs:ResourceTag/owner": {"alice"}}, ""},
		{"policy variable other", alice, "ecs:TagResource", []string{dev}, map[string][]string{"ecs:ResourceTag/owner": {"bob"}}, "no identity-based policy allows the ecs:TagResource action"},
		{"caller cannot set globals", alice, "ecs:TagResource", []string{dev}, map[string][]string{"ecs:ResourceTag/owner": {"bob"}, "AWS:username": {"bob"}}, "no identity-based policy allows"},
		{"source ip", alice, "ecs:ListClusters", nil, map[string][]string{"aws:SourceIp": {"127.0.0.1"}}, ""},
		{"source ip elsewhere", alice, "ecs:ListClusters", nil, map[string][]string{"aws:SourceIp": {"192.0.2.1"}}, "on resource: * because"},
		{"user without policies", carol, "iam:GetUser", []string{carol.ARN}, nil, "User: arn:aws:iam::123456789012:user/ops/carol is not authorized to perform: iam:GetUser on resource: arn:aws:iam::123456789012:user/ops/carol because"},
		{"unknown user", auth.Principal{Role: auth.RoleUser, UserName: "gone"}, "ecs:ListClusters", nil, nil, "User: arn:aws:iam::123456789012:user/gone is not authorized"},
		{"agent", agent, "iam:CreateUser", []string{"arn:aws:iam::123456789012:user/x"}, nil,
			"User: arn:aws:sts::123456789012:assumed-role/capstan-agent/i-0abc is not authorized to perform: iam:CreateUser on resource: arn:aws:iam::123456789012:user/x because no identity-based policy allows the iam:CreateUser action"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := a.Check(ctx, c.p, c.action, c.resources, c.cond)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			fe := fault.As(err)
			if fe == nil || fe.Kind != fault.NotAuthorized || fe.Code != "AccessDeniedException" || !strings.Contains(fe.Message, c.want) {
				t.Fatalf("got %v\nwant AccessDeniedException containing %q", err, c.want)
			}
		})
	}
}

func TestSimulate(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := NewAuthorizer(s)
	_, err := s.CreateUser(ctx, "alice", "", nil)
	must(t, err)
	_, err = s.CreateGroup(ctx, "apps", "")
	must(t, err)
	must(t, s.AddUserToGroup(ctx, "apps", "alice"))
	must(t, s.PutGroupPolicy(ctx, "apps", "services", "{\n  \"Version\": \"2012-10-17\",\n  \"Statement\": [\n    {\"Sid\": \"All\", \"Effect\": \"Allow\", \"Action\": \"ecs:*\", \"Resource\": \"*\"},\n    {\n      \"Sid\": \"NoDaemons\",\n      \"Effect\": \"Deny\",\n      \"Action\": \"ecs:*Daemon*\",\n      \"Resource\": \"*\"\n    }\n  ]\n}"))
	res, err := a.Simulate(ctx, "alice", []string{"ecs:UpdateDaemon", "ecs:CreateService", "iam:CreateUser"}, nil, nil)
	must(t, err)
	if len(res) != 3 {
		t.Fatalf("results %+v", res)
	}
	d := res[0]
	if d.Decision != policy.ExplicitDeny || d.Resource != "*" || len(d.Statements) != 1 {
		t.Fatalf("UpdateDaemon %+v", d)
	}
	st := d.Statements[0]
	if st.Policy != "group/apps/inline/services" || st.SourceType != SourceGroup || st.Sid != "NoDaemons" || st.Statement != 1 ||
		st.Start != (Position{5, 5}) || st.End != (Position{10, 5}) {
		t.Fatalf("deny statement %+v", st)
	}
	if c := res[1]; c.Decision != policy.Allow || len(c.Statements) != 1 || c.Statements[0].Sid != "All" || c.Statements[0].Start != (Position{4, 5}) {
		t.Fatalf("CreateService %+v", c)
	}
	if c := res[2]; c.Decision != policy.ImplicitDeny || len(c.Statements) != 0 {
		t.Fatalf("CreateUser %+v", c)
	}
	_, err = a.Simulate(ctx, "nobody", []string{"ecs:ListClusters"}, nil, nil)
	wantCode(t, err, CodeNoSuchEntity)
}

func TestStatementSpans(t *testing.T) {
	single := `{"Statement":{"Effect":"Allow"},"Version":"2012-10-17"}`
	sp, ok := statementSpans(single)
	if !ok || len(sp) != 1 || sp[0][0] != (Position{1, 14}) || sp[0][1] != (Position{1, 31}) {
		t.Fatalf("single: %v %v", sp, ok)
	}
	if _, ok := statementSpans(`[1]`); ok {
		t.Fatal("not an object")
	}
}

func TestCredentialIgnoresOtherKeys(t *testing.T) {
	s := newStore(t)
	for _, id := range []string{"CSAKADMIN", "AKIA", "AKIA-not-a-key!!!!!!", ""} {
		if _, ok, err := s.Credential(context.Background(), id); ok || err != nil {
			t.Fatalf("%q: ok=%v err=%v", id, ok, err)
		}
	}
	if !errors.Is(storeErr(store.ErrConflict), store.ErrConflict) && codeOf(storeErr(store.ErrConflict)) != CodeConcurrentModification {
		t.Fatal("a lasting conflict is ConcurrentModification")
	}
}
