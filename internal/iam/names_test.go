package iam

import (
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/fault"
)

func TestNames(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		name  string
		check func(field, v string) error
		value string
		want  string // "" for valid; else a part of the message
	}{
		{"user ok", CheckUserName, "alice", ""},
		{"user all chars", CheckUserName, "a_b+c=d,e.f@g-h9", ""},
		{"user 64", CheckUserName, long(64), ""},
		{"user 65", CheckUserName, long(65), "at 'userName' failed to satisfy constraint: Member must have length less than or equal to 64"},
		{"user empty", CheckUserName, "", "Value null at 'userName' failed to satisfy constraint: Member must not be null"},
		{"user space", CheckUserName, "a b", `Value 'a b' at 'userName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\w+=,.@-]+`},
		{"user slash", CheckUserName, "a/b", "regular expression pattern"},
		{"user non-ascii", CheckUserName, "josé", "regular expression pattern"},
		{"group 128", CheckGroupName, long(128), ""},
		{"group 129", CheckGroupName, long(129), "less than or equal to 128"},
		{"group colon", CheckGroupName, "a:b", "at 'groupName'"},
		{"policy 128", CheckPolicyName, long(128), ""},
		{"policy star", CheckPolicyName, "a*", "at 'policyName'"},
		{"path none", CheckPath, "", ""},
		{"path root", CheckPath, "/", ""},
		{"path nested", CheckPath, "/teams/apps/", ""},
		{"path no trailing slash", CheckPath, "/teams", "at 'path' failed to satisfy constraint: Member must satisfy regular expression pattern"},
		{"path no leading slash", CheckPath, "teams/", "at 'path'"},
		{"path space", CheckPath, "/a b/", "at 'path'"},
		{"path too long", CheckPath, "/" + long(511) + "/", "less than or equal to 512"},
		{"policy path ok", CheckPolicyPath, "/teams/", ""},
		{"policy path tilde", CheckPolicyPath, "/te~ams/", "at 'path'"},
		{"prefix ok", CheckPathPrefix, "/teams", ""},
		{"prefix bad", CheckPathPrefix, "teams", "at 'pathPrefix'"},
		{"version ok", CheckVersionID, "v12", ""},
		{"version zero", CheckVersionID, "v0", "at 'versionId'"},
		{"key ok", CheckAccessKeyID, "AKIAABCDEFGHIJKLMNOP", ""},
		{"key short", CheckAccessKeyID, "AKIA123", "greater than or equal to 16"},
		{"key dash", CheckAccessKeyID, "AKIA-BCDEFGHIJKLMNOP", "at 'accessKeyId'"},
		{"document ok", CheckPolicyDocument, `{"Version":"2012-10-17"}`, ""},
		{"document latin1", CheckPolicyDocument, `{"Sid":"café"}`, ""},
		{"document beyond latin1", CheckPolicyDocument, `{"Sid":"☃"}`, "at 'policyDocument'"},
		{"document empty", CheckPolicyDocument, "", "Value null at 'policyDocument'"},
		{"description", CheckDescription, long(1001), "at 'description'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.check(fieldOf(c.name), c.value)
			if c.want == "" {
				if err != nil {
					t.Fatalf("%q: %v", c.value, err)
				}
				return
			}
			fe := fault.As(err)
			if fe == nil || fe.Code != CodeValidationError || fe.Kind != fault.InvalidParameter || !strings.Contains(fe.Message, c.want) {
				t.Fatalf("%q: got %#v, want ValidationError containing %q", c.value, err, c.want)
			}
			if !strings.HasPrefix(fe.Message, "1 validation error detected: ") {
				t.Fatalf("message %q", fe.Message)
			}
		})
	}
}

// fieldOf names the member each case checks, as the API model does.
func fieldOf(name string) string {
	switch strings.Fields(name)[0] {
	case "user":
		return "userName"
	case "group":
		return "groupName"
	case "policy":
		if strings.HasPrefix(name, "policy path") {
			return "path"
		}
		return "policyName"
	case "path":
		return "path"
	case "prefix":
		return "pathPrefix"
	case "version":
		return "versionId"
	case "key":
		return "accessKeyId"
	case "document":
		return "policyDocument"
	}
	return "description"
}

func TestTags(t *testing.T) {
	cases := []struct {
		name string
		tags []Tag
		code string
		want string
	}{
		{"ok", []Tag{{"team", "apps"}, {"cost center", "1:2/3=4+5-6@7_8.9"}, {"empty", ""}}, "", ""},
		{"unicode letters", []Tag{{"équipe", "données"}}, "", ""},
		{"empty key", []Tag{{"", "x"}}, CodeValidationError, "Value null at 'tags.1.member.key'"},
		{"bad key", []Tag{{"a", "b"}, {"a*b", "x"}}, CodeValidationError, "Value 'a*b' at 'tags.2.member.key'"},
		{"bad value", []Tag{{"a", "b#"}}, CodeValidationError, "at 'tags.1.member.value'"},
		{"long value", []Tag{{"a", strings.Repeat("v", 257)}}, CodeValidationError, "less than or equal to 256"},
		{"duplicate regardless of case", []Tag{{"Team", "a"}, {"team", "b"}}, CodeInvalidInput, `"team" appears more than once`},
		{"too many", make51(), CodeValidationError, "less than or equal to 50"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckTags("tags", c.tags)
			if c.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			fe := fault.As(err)
			if fe == nil || fe.Code != c.code || !strings.Contains(fe.Message, c.want) {
				t.Fatalf("got %v, want %s containing %q", err, c.code, c.want)
			}
		})
	}
}

func make51() []Tag {
	var tags []Tag
	for i := range 51 {
		tags = append(tags, Tag{Key: "k" + strings.Repeat("x", i), Value: "v"})
	}
	return tags
}
