package taskdef

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
)

// The model's tag pattern is unanchored, so it never rejects anything; ECS
// applies it to the whole key and value.
var tagPattern = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)

const maxTags = 50

// CheckTags applies the ECS tagging rules to the tags of any resource; field
// is the request member that holds them, usually "tags".
func CheckTags(field string, tags []shapes.Tag) error {
	if len(tags) > maxTags {
		return fault.Invalid(field, "must have at most %d tags (got %d)", maxTags, len(tags))
	}
	seen := make(map[string]int, len(tags))
	for i, t := range tags {
		p := at(field, i)
		if n := utf8.RuneCountInString(t.Key); n < 1 || n > 128 {
			return fault.Invalid(p+".key", "must be 1-128 characters long (got %d)", n)
		}
		if !tagPattern.MatchString(t.Key) {
			return fault.Invalid(p+".key", "may hold only letters, digits, spaces and _ . : / = + - @ (got %q)", clip(t.Key))
		}
		// The aws: prefix belongs to AWS in every case spelling.
		if strings.HasPrefix(strings.ToLower(t.Key), "aws:") {
			return fault.Invalid(p+".key", "must not start with the reserved prefix aws: (got %q)", clip(t.Key))
		}
		if j, dup := seen[t.Key]; dup {
			return fault.Invalid(p+".key", "repeats the key of %s (%q)", at(field, j), clip(t.Key))
		}
		seen[t.Key] = i
		if n := utf8.RuneCountInString(t.Value); n > 256 {
			return fault.Invalid(p+".value", "must be at most 256 characters long (got %d)", n)
		}
		if !tagPattern.MatchString(t.Value) {
			return fault.Invalid(p+".value", "may hold only letters, digits, spaces and _ . : / = + - @ (got %q)", clip(t.Value))
		}
	}
	return nil
}
