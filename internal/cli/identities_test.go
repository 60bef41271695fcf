package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIdentities(t *testing.T) {
	h := newHarness(t)

	out := h.ok("whoami")
	if !hasLine(out, "ARN:", "arn:aws:iam::123456789012:root") || !hasLine(out, "Account:", "123456789012") {
		t.Fatalf("whoami as root:\n%s", out)
	}

	out = h.ok("user", "create", "alice", "--path", "/teams/", "--tag", "team=apps")
	if !hasLine(out, "alice", "/teams/") {
		t.Fatalf("user create:\n%s", out)
	}
	h.fails(1, "EntityAlreadyExists", "user", "create", "alice")
	h.fails(1, "ValidationError: 1 validation error detected: Value 'a b' at 'userName'", "user", "create", "a b")
	h.ok("group", "create", "apps")
	h.ok("user", "add-to-group", "alice", "apps")
	doc := `{"Version":"2012-10-17","Statement":[
  {"Sid":"Services","Effect":"Allow","Action":["ecs:*Service*","ecs:List*"],"Resource":"*"},
  {"Sid":"NoDaemons","Effect":"Deny","Action":"ecs:*Daemon*","Resource":"*"}
]}`
	path := filepath.Join(t.TempDir(), "apps.json")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	h.ok("group", "put-policy", "apps", "ecs", "--document", path)
	h.fails(1, "MalformedPolicyDocument", "group", "put-policy", "apps", "bad", "--document", `{"Statement":[{"Effect":"Allow"}]}`)
	h.fails(2, "--document is required", "group", "put-policy", "apps", "bad")

	out = h.ok("policy", "create", "self", "--description", "read yourself", "--document",
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:GetUser","Resource":"*"}]}`)
	if !hasLine(out, "self", "v1", "0", "arn:aws:iam::123456789012:policy/self") {
		t.Fatalf("policy create:\n%s", out)
	}
	h.ok("user", "attach-policy", "alice", "self") // by name
	out = h.ok("policy", "show", "self")
	if !hasLine(out, "Attachments:", "1") || !strings.Contains(out, `"Action": "iam:GetUser"`) {
		t.Fatalf("policy show:\n%s", out)
	}
	if m := h.okJSON("policy", "show", "arn:aws:iam::123456789012:policy/self"); get(t, m, "Document", "Statement", 0, "Action") != "iam:GetUser" {
		t.Fatalf("policy show -o json: %v", m)
	}

	out = h.ok("policy", "simulate", "--user", "alice", "--action", "ecs:UpdateDaemon", "--action", "ecs:CreateService", "--action", "iam:CreateUser",
		"--resource", "arn:aws:ecs:us-east-1:123456789012:cluster/prod")
	for _, want := range [][]string{
		{"ecs:UpdateDaemon", "arn:aws:ecs:us-east-1:123456789012:cluster/prod", "explicitDeny", "Deny", "NoDaemons", "(group/apps/inline/ecs,", "line", "3)"},
		{"ecs:CreateService", "arn:aws:ecs:us-east-1:123456789012:cluster/prod", "allowed", "Allow", "Services", "(group/apps/inline/ecs,", "line", "2)"},
		{"iam:CreateUser", "arn:aws:ecs:us-east-1:123456789012:cluster/prod", "implicitDeny", "no", "statement", "allows", "it"},
	} {
		if !hasLine(out, want...) {
			t.Fatalf("simulate: no line %q in\n%s", strings.Join(want, " "), out)
		}
	}

	out = h.ok("user", "create-key", "alice")
	var keyID, secret string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "AWS_ACCESS_KEY_ID="); ok {
			keyID = v
		}
		if v, ok := strings.CutPrefix(line, "AWS_SECRET_ACCESS_KEY="); ok {
			secret = v
		}
	}
	if len(keyID) != 20 || len(secret) != 40 {
		t.Fatalf("create-key:\n%s", out)
	}
	env := map[string]string{"CAPSTAN_ENDPOINT": h.env["CAPSTAN_ENDPOINT"], "HOME": h.env["HOME"], "AWS_ACCESS_KEY_ID": keyID, "AWS_SECRET_ACCESS_KEY": secret}
	r := h.runEnv(env, "whoami")
	if r.code != 0 || !hasLine(r.stdout, "ARN:", "arn:aws:iam::123456789012:user/teams/alice") {
		t.Fatalf("whoami as alice: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = h.runEnv(env, "user", "show")
	if r.code != 1 || !strings.Contains(r.stderr, "AccessDenied: User: arn:aws:iam::123456789012:user/teams/alice is not authorized to perform: iam:ListGroupsForUser") {
		t.Fatalf("user show as alice (GetUser allowed, the rest not): %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = h.runEnv(env, "user", "create", "mallory")
	if r.code != 1 || !strings.Contains(r.stderr, "because no identity-based policy allows the iam:CreateUser action") {
		t.Fatalf("user create as alice: %d\n%s", r.code, r.stderr)
	}

	out = h.ok("user", "show", "alice")
	for _, want := range [][]string{{"Groups:", "apps"}, {"Attached", "policies:", "arn:aws:iam::123456789012:policy/self"}, {"Access", "keys:", keyID, "(Active)"}, {"Tags:", "team=apps"}} {
		if !hasLine(out, want...) {
			t.Fatalf("user show: no %q in\n%s", strings.Join(want, " "), out)
		}
	}
	h.ok("user", "deactivate-key", "alice", keyID)
	if r := h.runEnv(env, "whoami"); r.code != 1 || !strings.Contains(r.stderr, "InvalidClientTokenId") {
		t.Fatalf("whoami with an Inactive key: %d\n%s", r.code, r.stderr)
	}
	out = h.ok("user", "list-keys", "alice")
	if !hasLine(out, keyID, "Inactive") {
		t.Fatalf("list-keys:\n%s", out)
	}

	out = h.ok("group", "show", "apps")
	if !hasLine(out, "Members:", "alice") || !hasLine(out, "Inline", "policies:", "ecs") {
		t.Fatalf("group show:\n%s", out)
	}
	if !hasLine(h.ok("user", "list"), "alice", "/teams/") || !hasLine(h.ok("group", "list"), "apps", "/") || !hasLine(h.ok("policy", "list"), "self", "v1", "1") {
		t.Fatal("lists")
	}

	// Taken apart again, in the order IAM requires.
	h.fails(1, "DeleteConflict", "user", "delete", "alice")
	h.fails(1, "DeleteConflict", "policy", "delete", "self")
	h.ok("user", "detach-policy", "alice", "self")
	h.ok("policy", "delete", "self")
	h.ok("user", "delete-key", "alice", keyID)
	h.ok("user", "remove-from-group", "alice", "apps")
	h.ok("group", "delete-policy", "apps", "ecs")
	h.ok("group", "delete", "apps")
	h.ok("user", "delete", "alice")
	h.fails(1, "NoSuchEntity", "user", "show", "alice")
}
