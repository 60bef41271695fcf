package fleet

import (
	"strings"
	"testing"
)

func TestQueryLanguage(t *testing.T) {
	inst := map[string]string{
		"ecs.instance-type": "t2.micro", "ecs.os-type": "linux", "zone": "a", "gpus": "4", "ecs.instance-id": "abc",
	}
	cases := []struct {
		expr string
		want bool
	}{
		{"attribute:ecs.instance-type == t2.micro", true},
		{"attribute:ecs.instance-type == t2.small", false},
		{"attribute:ecs.instance-type != t2.small", true},
		{"attribute:missing != x", true},
		{"attribute:missing == x", false},
		{"attribute:zone exists", true},
		{"attribute:missing exists", false},
		{"attribute:missing !exists", true},
		{"attribute:zone in [a, b]", true},
		{"attribute:zone in [b,c]", false},
		{"attribute:zone not_in [b, c]", true},
		{"attribute:missing not_in [b]", true},
		{"attribute:ecs.instance-type =~ t2.*", true},
		{"attribute:ecs.instance-type =~ t2", false}, // the whole value must match
		{"attribute:ecs.instance-type !~ m5.*", true},
		{"attribute:ecs.instance-type =~ t[0-9].micro", true},
		{"attribute:gpus > 3", true},
		{"attribute:gpus >= 10", false}, // numbers compare as numbers, not text
		{"attribute:gpus < 10", true},
		{"attribute:gpus <= 4", true},
		{"attribute:zone == a and attribute:ecs.os-type == linux", true},
		{"attribute:zone == b && attribute:ecs.os-type == linux", false},
		{"attribute:zone == b or attribute:ecs.os-type == linux", true},
		{"attribute:zone == b || attribute:gpus == 5", false},
		{"not(attribute:zone == b)", true},
		{"!(attribute:zone == a)", false},
		{"(attribute:zone == b or attribute:zone == a) and attribute:gpus > 1", true},
		{"attribute:zone == b or attribute:zone == a and attribute:gpus > 9", false}, // and binds tighter
	}
	for _, c := range cases {
		f, err := ParseInstanceFilter(c.expr)
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		if got := f.Match(inst); got != c.want {
			t.Errorf("%q = %v, want %v", c.expr, got, c.want)
		}
	}
}

func TestQueryLanguageRefusesBadExpressions(t *testing.T) {
	for _, expr := range []string{
		"attribute:zone",
		"attribute:zone ==",
		"attribute:zone = a",
		"attribute:zone in a",
		"attribute:zone in [a",
		"attribute:zone in []",
		"task:group == service:web",
		"(attribute:zone == a",
		"attribute:zone == a and",
		"attribute:zone =~ (",
		"attribute:zone like a",
		"attribute:bad name == a",
	} {
		_, err := ParseInstanceFilter(expr)
		if err == nil {
			t.Errorf("%q: accepted", expr)
			continue
		}
		if !strings.Contains(err.Error(), "invalid expression") || !strings.Contains(err.Error(), expr) {
			t.Errorf("%q: error %q does not quote the expression", expr, err)
		}
	}
}
