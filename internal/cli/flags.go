package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// listFlag collects a repeatable flag; commas also separate values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// tagFlag collects repeatable KEY=VALUE tags (values may contain commas).
type tagFlag []types.Tag

func (t *tagFlag) String() string { return "" }

func (t *tagFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	*t = append(*t, types.Tag{Key: aws.String(k), Value: aws.String(val)})
	return nil
}

// parseRange reads MIN or MIN-MAX.
func parseRange(flagName, v string) (lo int32, hi *int32, err error) {
	a, b, isRange := strings.Cut(v, "-")
	n, err := strconv.ParseInt(a, 10, 32)
	if err != nil {
		return 0, nil, usageErrorf("--%s %q: want MIN or MIN-MAX", flagName, v)
	}
	if !isRange {
		return int32(n), nil, nil
	}
	m, err := strconv.ParseInt(b, 10, 32)
	if err != nil || m < n {
		return 0, nil, usageErrorf("--%s %q: want MIN or MIN-MAX with MAX >= MIN", flagName, v)
	}
	return int32(n), aws.Int32(int32(m)), nil
}

// wantArgs checks the number of positional arguments.
func wantArgs(args []string, min, max int, what string) error {
	switch {
	case len(args) < min:
		return usageErrorf("missing %s", what)
	case max >= 0 && len(args) > max:
		return usageErrorf("unexpected argument %q", args[max])
	}
	return nil
}

// upperEnum normalises an enum flag value and checks it.
func upperEnum(flagName, v string, allowed ...string) (string, error) {
	u := strings.ToUpper(v)
	for _, a := range allowed {
		if u == a {
			return u, nil
		}
	}
	return "", usageErrorf("--%s %q: want one of %s", flagName, v, strings.Join(allowed, ", "))
}
