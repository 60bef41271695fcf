package taskdef

import (
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// CheckTags also serves resources whose model checks differ, so it repeats
// the model's count and length bounds; these rows reach them directly.
func TestCheckTags(t *testing.T) {
	many := make([]shapes.Tag, 51)
	for i := range many {
		many[i].Key = "k" + strings.Repeat("x", i)
	}
	rows := []struct {
		name  string
		tags  []shapes.Tag
		field string // empty when the tags are valid
	}{
		{"none", nil, ""},
		{"fifty", many[:50], ""},
		{"multibyte at the limits", []shapes.Tag{{Key: strings.Repeat("é", 128), Value: strings.Repeat("ü", 256)}}, ""},
		{"fifty-one", many, "resourceTags"},
		{"key long", []shapes.Tag{{Key: strings.Repeat("k", 129)}}, "resourceTags[0].key"},
		{"value long", []shapes.Tag{{Key: "k", Value: strings.Repeat("v", 257)}}, "resourceTags[0].value"},
		{"key reserved mixed case", []shapes.Tag{{Key: "Aws:x"}}, "resourceTags[0].key"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			err := CheckTags("resourceTags", row.tags)
			if row.field == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			assertFault(t, err, invalid, row.field)
		})
	}
}
