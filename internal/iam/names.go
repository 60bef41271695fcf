package iam

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/fault"
)

// Input rules, as IAM's API model states them. A broken rule is a
// ValidationError naming the member in IAM's wording ("1 validation error
// detected: Value 'a b' at 'userName' failed to satisfy constraint: ..."),
// which SDKs and scripts already recognise.

// Patterns of IAM's model. \w is ASCII only, as in the Java regexes IAM
// validates with.
const (
	NamePattern       = `[\w+=,.@-]+`
	PathPattern       = `(\u002F)|(\u002F[\u0021-\u007E]+\u002F)`
	PolicyPathPattern = `((/[A-Za-z0-9\.,\+@=_-]+)*)/`
	VersionIDPattern  = `v[1-9][0-9]*(\.[A-Za-z0-9-]*)?`
	tagPattern        = `[\p{L}\p{Z}\p{N}_.:/=+\-@]`
)

var (
	nameRE       = regexp.MustCompile(`^[A-Za-z0-9_+=,.@-]+$`)
	pathRE       = regexp.MustCompile(`^(/|/[\x21-\x7E]+/)$`)
	pathPrefixRE = regexp.MustCompile(`^/[\x21-\x7F]*$`)
	policyPathRE = regexp.MustCompile(`^((/[A-Za-z0-9.,+@=_-]+)*)/$`)
	versionIDRE  = regexp.MustCompile(`^v[1-9][0-9]*(\.[A-Za-z0-9-]*)?$`)
	keyIDRE      = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
)

// validation is IAM's ValidationError for one member.
func validation(field, value string, null bool, constraint string) *fault.Error {
	v := "'" + value + "'"
	if null {
		v = "null"
	}
	return &fault.Error{Kind: fault.InvalidParameter, Code: CodeValidationError,
		Message: fmt.Sprintf("1 validation error detected: Value %s at '%s' failed to satisfy constraint: %s", v, field, constraint)}
}

// required reports a member that must be given.
func required(field, v string) error {
	if v == "" {
		return validation(field, "", true, "Member must not be null")
	}
	return nil
}

// length checks v's length in characters against [lo, hi].
func length(field, v string, lo, hi int) error {
	n := utf8.RuneCountInString(v)
	switch {
	case n < lo:
		return validation(field, v, false, fmt.Sprintf("Member must have length greater than or equal to %d", lo))
	case hi > 0 && n > hi:
		return validation(field, v, false, fmt.Sprintf("Member must have length less than or equal to %d", hi))
	}
	return nil
}

func pattern(field, v string, re *regexp.Regexp, shown string) error {
	if !re.MatchString(v) {
		return validation(field, v, false, "Member must satisfy regular expression pattern: "+shown)
	}
	return nil
}

// checkName checks a user, group or policy name: required, 1..max
// characters of letters, digits and +=,.@_-.
func checkName(field, v string, max int) error {
	if err := required(field, v); err != nil {
		return err
	}
	if err := length(field, v, 1, max); err != nil {
		return err
	}
	return pattern(field, v, nameRE, NamePattern)
}

// CheckUserName checks a user name (at most 64 characters).
func CheckUserName(field, v string) error { return checkName(field, v, 64) }

// CheckGroupName checks a group name (at most 128 characters).
func CheckGroupName(field, v string) error { return checkName(field, v, 128) }

// CheckPolicyName checks an inline or managed policy name (at most 128).
func CheckPolicyName(field, v string) error { return checkName(field, v, 128) }

// CheckPath checks a user or group path: "/" or "/a/b/", printable ASCII,
// at most 512 characters. Empty means "/" and passes.
func CheckPath(field, v string) error {
	if v == "" {
		return nil
	}
	if err := length(field, v, 1, 512); err != nil {
		return err
	}
	return pattern(field, v, pathRE, PathPattern)
}

// CheckPathPrefix checks a list filter's path prefix; empty passes.
func CheckPathPrefix(field, v string) error {
	if v == "" {
		return nil
	}
	if err := length(field, v, 1, 512); err != nil {
		return err
	}
	return pattern(field, v, pathPrefixRE, `\u002F[\u0021-\u007F]*`)
}

// CheckPolicyPath checks a managed policy's path (a narrower set than a
// user's); empty passes.
func CheckPolicyPath(field, v string) error {
	if v == "" {
		return nil
	}
	if err := length(field, v, 1, 512); err != nil {
		return err
	}
	return pattern(field, v, policyPathRE, PolicyPathPattern)
}

// CheckVersionID checks a policy version ID such as v3.
func CheckVersionID(field, v string) error {
	if err := required(field, v); err != nil {
		return err
	}
	return pattern(field, v, versionIDRE, VersionIDPattern)
}

// CheckAccessKeyID checks an access key ID's shape (16..128 word
// characters).
func CheckAccessKeyID(field, v string) error {
	if err := required(field, v); err != nil {
		return err
	}
	if err := length(field, v, 16, 128); err != nil {
		return err
	}
	return pattern(field, v, keyIDRE, `[\w]+`)
}

// CheckDescription checks a managed policy's description.
func CheckDescription(field, v string) error { return length(field, v, 0, 1000) }

// CheckPolicyDocument checks a document's size and characters before it is
// parsed: IAM takes tab, newline, carriage return and U+0020..U+00FF only.
func CheckPolicyDocument(field, v string) error {
	if err := required(field, v); err != nil {
		return err
	}
	if err := length(field, v, 1, 131072); err != nil {
		return err
	}
	for _, r := range v {
		if r != '\t' && r != '\n' && r != '\r' && (r < 0x20 || r > 0xFF) {
			return validation(field, v, false, `Member must satisfy regular expression pattern: [\u0009\u000A\u000D\u0020-\u00FF]+`)
		}
	}
	return nil
}

func tagChars(s string) bool {
	for _, r := range s {
		if !(unicode.IsLetter(r) || unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp) || unicode.IsNumber(r) || strings.ContainsRune("_.:/=+-@", r)) {
			return false
		}
	}
	return true
}

// CheckTags checks tags to add: at most 50, keys of 1..128 and values of
// 0..256 letters, digits, spaces and _.:/=+-@, no key twice (keys are
// compared regardless of case, as IAM does). field is the list's member
// name, e.g. "tags".
func CheckTags(field string, tags []Tag) error {
	if len(tags) > MaxTagsPerUser {
		return validation(field, fmt.Sprintf("%d tags", len(tags)), false, fmt.Sprintf("Member must have length less than or equal to %d", MaxTagsPerUser))
	}
	seen := map[string]bool{}
	for i, t := range tags {
		kf := fmt.Sprintf("%s.%d.member.key", field, i+1)
		vf := fmt.Sprintf("%s.%d.member.value", field, i+1)
		if err := required(kf, t.Key); err != nil {
			return err
		}
		if err := length(kf, t.Key, 1, 128); err != nil {
			return err
		}
		if !tagChars(t.Key) {
			return validation(kf, t.Key, false, "Member must satisfy regular expression pattern: "+tagPattern+"+")
		}
		if err := length(vf, t.Value, 0, 256); err != nil {
			return err
		}
		if !tagChars(t.Value) {
			return validation(vf, t.Value, false, "Member must satisfy regular expression pattern: "+tagPattern+"*")
		}
		k := strings.ToLower(t.Key)
		if seen[k] {
			return invalidInput("Duplicate tag keys found: %q appears more than once (tag keys are compared regardless of case).", t.Key)
		}
		seen[k] = true
	}
	return nil
}

// CheckTagKeys checks the keys to remove from a user.
func CheckTagKeys(field string, keys []string) error {
	if len(keys) == 0 {
		return validation(field, "", true, "Member must not be null")
	}
	if len(keys) > MaxTagsPerUser {
		return validation(field, fmt.Sprintf("%d keys", len(keys)), false, fmt.Sprintf("Member must have length less than or equal to %d", MaxTagsPerUser))
	}
	for i, k := range keys {
		f := fmt.Sprintf("%s.%d.member", field, i+1)
		if err := length(f, k, 1, 128); err != nil {
			return err
		}
		if !tagChars(k) {
			return validation(f, k, false, "Member must satisfy regular expression pattern: "+tagPattern+"+")
		}
	}
	return nil
}

// normPath is path with "/" for none.
func normPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}
