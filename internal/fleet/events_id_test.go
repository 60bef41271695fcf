package fleet

import (
	"testing"
	"time"
)

func TestEventIDsSortByTime(t *testing.T) {
	var g eventIDs
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	steps := []struct {
		name string
		at   time.Time
		n    int
	}{
		{"first", t0, 1},
		{"same millisecond", t0, 5000}, // more than the counter holds
		{"clock steps back", t0.Add(-time.Second), 3},
		{"later", t0.Add(time.Minute), 2},
	}
	prev := ""
	for _, s := range steps {
		for range s.n {
			id := g.next(s.at)
			if !EventIDPattern.MatchString(id) {
				t.Fatalf("%s: %q is not a UUIDv7", s.name, id)
			}
			if id <= prev {
				t.Fatalf("%s: %s does not sort after %s", s.name, id, prev)
			}
			prev = id
		}
	}
	if got := EventIDTime(g.next(t0.Add(time.Hour))); !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("id time %v, want %v", got, t0.Add(time.Hour))
	}
}

func TestEventIDFloor(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	cases := []struct {
		name  string
		id    time.Time
		floor time.Time
		below bool
	}{
		{"same millisecond", t0, t0, true},
		{"later id", t0.Add(time.Millisecond), t0, true},
		{"earlier id", t0.Add(-time.Millisecond), t0, false},
		{"long after", t0.Add(48 * time.Hour), t0, true},
	}
	for _, c := range cases {
		var g eventIDs // fresh: a used one never goes back in time
		if got := EventIDFloor(c.floor) < g.next(c.id); got != c.below {
			t.Errorf("%s: floor below id = %v, want %v", c.name, got, c.below)
		}
	}
}

func TestParseEventCursor(t *testing.T) {
	const id = "019b7c2e-1a2b-7abc-8def-0123456789ab"
	cases := []struct {
		in   string
		want eventCursor
		ok   bool
	}{
		{"", eventCursor{}, true},
		{id, eventCursor{id: id}, true},
		{id + "@42", eventCursor{id: id, rev: 42, hasRev: true}, true},
		{"@7", eventCursor{rev: 7, hasRev: true}, true},
		{"@", eventCursor{}, false},
		{id + "@-1", eventCursor{}, false},
		{id + "@x", eventCursor{}, false},
		{"019b7c2e-1a2b-4abc-8def-0123456789ab", eventCursor{}, false}, // v4, not time-ordered
		{"nonsense", eventCursor{}, false},
	}
	for _, c := range cases {
		got, err := ParseEventCursor(c.in)
		if (err == nil) != c.ok || c.ok && got != c.want {
			t.Errorf("parse %q = %+v, %v; want %+v ok=%v", c.in, got, err, c.want, c.ok)
		}
		if c.ok && c.want.hasRev && got.String() != c.in {
			t.Errorf("cursor %q prints as %q", c.in, got.String())
		}
	}
}
