// Package shapes holds the request and response members of the ECS JSON API,
// generated from the service model, with the model's own validation rules.
package shapes

//go:generate sh -c "go run ../../../tools/shapegen -model \"$(python3 -c 'import botocore,os;print(os.path.dirname(botocore.__file__))')/data/ecs/2014-11-13/service-2.json.gz\" -out zz_shapes.go"

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Timestamp is a point in time sent as epoch seconds, the only form the SDKs decode.
type Timestamp struct{ time.Time }

// At returns t as a Timestamp, truncated to milliseconds as ECS reports them.
func At(t time.Time) Timestamp { return Timestamp{t.Truncate(time.Millisecond)} }

// MarshalJSON writes epoch seconds with millisecond fractions.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	ms := t.UnixMilli()
	return strconv.AppendFloat(nil, float64(ms)/1000, 'f', -1, 64), nil
}

// UnmarshalJSON accepts integer or fractional epoch seconds. Decimal
// fractions are parsed exactly: a float64 round trip would move 0.973 s to
// 0.972999999 s and break comparisons with stored times.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		*t = Timestamp{}
		return nil
	}
	bad := fmt.Errorf("timestamp must be epoch seconds, got %s", truncate(s, 40))
	if strings.ContainsAny(s, "eE") {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f < 0 || f > 1e11 {
			return bad
		}
		sec, frac := math.Modf(f)
		*t = Timestamp{time.Unix(int64(sec), int64(math.Round(frac*1e6))*1e3).UTC()}
		return nil
	}
	whole, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || sec < 0 || sec > 1e11 || len(frac) > 9 && strings.Trim(frac[9:], "0123456789") != "" {
		return bad
	}
	if len(frac) > 9 {
		frac = frac[:9]
	}
	var ns int64
	if frac != "" {
		ns, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		if err != nil || ns < 0 {
			return bad
		}
	}
	*t = Timestamp{time.Unix(sec, ns).UTC()}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Violation names the member that breaks a rule and the rule it breaks.
type Violation struct {
	Field string
	Rule  string
}

func (v *Violation) Error() string { return v.Field + ": " + v.Rule }

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func required(field string) *Violation { return &Violation{field, "is required"} }

func oneOf(field, v string, values []string) *Violation {
	if slices.Contains(values, v) {
		return nil
	}
	return &Violation{field, fmt.Sprintf("must be one of %s (got %q)", strings.Join(values, ", "), truncate(v, 64))}
}

func bnd(f float64) *float64 { return &f }

func length(field string, n int, lo, hi *float64) *Violation {
	if lo != nil && float64(n) < *lo {
		return &Violation{field, fmt.Sprintf("must be at least %v characters long", *lo)}
	}
	if hi != nil && float64(n) > *hi {
		return &Violation{field, fmt.Sprintf("must be at most %v characters long", *hi)}
	}
	return nil
}

func count(field string, n int, lo, hi *float64) *Violation {
	if lo != nil && float64(n) < *lo {
		return &Violation{field, fmt.Sprintf("must have at least %v items", *lo)}
	}
	if hi != nil && float64(n) > *hi {
		return &Violation{field, fmt.Sprintf("must have at most %v items", *hi)}
	}
	return nil
}

func within(field string, f float64, lo, hi *float64) *Violation {
	if (lo != nil && f < *lo) || (hi != nil && f > *hi) {
		switch {
		case lo != nil && hi != nil:
			return &Violation{field, fmt.Sprintf("must be between %v and %v", *lo, *hi)}
		case lo != nil:
			return &Violation{field, fmt.Sprintf("must be at least %v", *lo)}
		default:
			return &Violation{field, fmt.Sprintf("must be at most %v", *hi)}
		}
	}
	return nil
}

// EnumValues returns the values the model allows for an enum shape.
func EnumValues(shape string) []string { return enums[shape] }
