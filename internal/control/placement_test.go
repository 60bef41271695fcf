package control

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

func cands() []*candidate {
	return []*candidate{
		{id: "a", cpu: 1024, mem: 512, ports: []string{"tcp/80"}, attributes: map[string]string{"zone": "x"}},
		{id: "b", cpu: 4096, mem: 4096, attributes: map[string]string{"zone": "y"}, groupTasks: 2},
		{id: "c", cpu: 2048, mem: 1024, attributes: map[string]string{"zone": "y"}},
	}
}

func TestPlace(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name       string
		need       need
		strategy   []shapes.PlacementStrategy
		constraint []shapes.PlacementConstraint
		want       string // instance id, or "" with wantWhy in the reason
		wantWhy    string
	}{
		{"binpack memory picks the fullest that fits", need{cpu: 256, mem: 256}, nil, nil, "a", ""},
		{"binpack skips what does not fit", need{cpu: 256, mem: 600}, nil, nil, "c", ""},
		{"binpack cpu", need{cpu: 1500, mem: 100}, []shapes.PlacementStrategy{{Type: "binpack", Field: "cpu"}}, nil, "c", ""},
		{"spread by instance prefers fewer tasks of the group", need{cpu: 100, mem: 100}, []shapes.PlacementStrategy{{Type: "spread", Field: "instanceId"}, {Type: "binpack", Field: "memory"}}, nil, "a", ""},
		{"port taken", need{cpu: 100, mem: 100, ports: []string{"tcp/80"}}, nil, nil, "c", ""},
		{"distinct instance", need{cpu: 100, mem: 3000}, nil, []shapes.PlacementConstraint{{Type: "distinctInstance"}}, "", "distinctInstance"},
		{"memberOf", need{cpu: 100, mem: 100}, nil, []shapes.PlacementConstraint{{Type: "memberOf", Expression: "attribute:zone == y"}}, "c", ""},
		{"too much memory names the largest free", need{cpu: 100, mem: 9000}, nil, nil, "", "RESOURCE:MEMORY (needs 9000 MiB, largest free is 4096 MiB)"},
		{"too much cpu", need{cpu: 9000, mem: 1}, nil, nil, "", "RESOURCE:CPU"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := parsePlacement(tc.strategy, tc.constraint)
			if err != nil {
				t.Fatal(err)
			}
			c, why := place(cands(), tc.need, rules, rnd)
			switch {
			case tc.want == "" && c != nil:
				t.Fatalf("placed on %s, want a failure", c.id)
			case tc.want == "" && !strings.Contains(why, tc.wantWhy):
				t.Fatalf("reason %q, want %q", why, tc.wantWhy)
			case tc.want != "" && (c == nil || c.id != tc.want):
				t.Fatalf("placed on %v (%s), want %s", c, why, tc.want)
			}
		})
	}
}

func TestParsePlacementRefusals(t *testing.T) {
	for _, tc := range []struct {
		s []shapes.PlacementStrategy
		c []shapes.PlacementConstraint
		f string
	}{
		{[]shapes.PlacementStrategy{{Type: "binpack", Field: "disk"}}, nil, "placementStrategy[0].field"},
		{[]shapes.PlacementStrategy{{Type: "pack"}}, nil, "placementStrategy[0].type"},
		{[]shapes.PlacementStrategy{{Type: "spread", Field: "zone"}}, nil, "placementStrategy[0].field"},
		{nil, []shapes.PlacementConstraint{{Type: "memberOf", Expression: "task:group == x"}}, "placementConstraints[0].expression"},
		{nil, []shapes.PlacementConstraint{{Type: "sameInstance"}}, "placementConstraints[0].type"},
	} {
		if _, err := parsePlacement(tc.s, tc.c); err == nil || !strings.Contains(err.Error(), tc.f) {
			t.Errorf("%+v %+v: got %v, want an error naming %s", tc.s, tc.c, err, tc.f)
		}
	}
}
