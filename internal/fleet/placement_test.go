package fleet

import (
	"fmt"
	"math/rand/v2"
	"slices"
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
			rules, err := ParsePlacement(tc.strategy, tc.constraint)
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
		if _, err := ParsePlacement(tc.s, tc.c); err == nil || !strings.Contains(err.Error(), tc.f) {
			t.Errorf("%+v %+v: got %v, want an error naming %s", tc.s, tc.c, err, tc.f)
		}
	}
}

// The spread picker picks what place picks: at every step a fitting
// candidate with the fewest of the group's tasks, ties at random, and nil
// once nothing fits; and it applies only to a spread over instances alone.
func TestSpreadPickerPicksAsPlace(t *testing.T) {
	spread, err := ParsePlacement([]shapes.PlacementStrategy{{Type: "spread", Field: "instanceId"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range [][]shapes.PlacementStrategy{nil, {{Type: "spread", Field: "instanceId"}, {Type: "binpack", Field: "memory"}}, {{Type: "spread", Field: "attribute:zone"}}} {
		rules, err := ParsePlacement(other, nil)
		if err != nil {
			t.Fatal(err)
		}
		if newSpreadPicker(nil, need{}, rules, nil) != nil {
			t.Errorf("picker for %+v", other)
		}
	}
	distinct, _ := ParsePlacement([]shapes.PlacementStrategy{{Type: "spread", Field: "instanceId"}}, []shapes.PlacementConstraint{{Type: "distinctInstance"}})
	if newSpreadPicker(nil, need{}, distinct, nil) != nil {
		t.Error("picker despite a constraint")
	}

	rnd := rand.New(rand.NewPCG(3, 4))
	firsts := map[string]int{}
	for trial := range 400 {
		// Uneven starting loads and room; a port only some have free.
		var cs []*candidate
		for i := range 12 {
			c := &candidate{id: string(rune('a' + i)), cpu: 1000, mem: 100 * (i%4 + 1), groupTasks: i % 3}
			if i%5 == 0 {
				c.ports = []string{"tcp/80"}
			}
			cs = append(cs, c)
		}
		n := need{cpu: 10, mem: 50}
		if trial%2 == 1 {
			n.ports = []string{"tcp/8080"}
		}
		p := newSpreadPicker(cs, n, spread, rnd)
		if p == nil {
			t.Fatal("no picker for a spread over instances")
		}
		for step := 0; ; step++ {
			c := p.next()
			// What place would accept: the least loaded among the fitting.
			low, fitting := -1, 0
			for _, x := range cs {
				if x.cpu >= n.cpu && x.mem >= n.mem && !slices.ContainsFunc(n.ports, x.taken) {
					fitting++
					if low < 0 || x.groupTasks < low {
						low = x.groupTasks
					}
				}
			}
			if c == nil {
				if fitting != 0 {
					t.Fatalf("trial %d step %d: nothing picked, %d fit", trial, step, fitting)
				}
				if pc, _ := place(cs, n, spread, rnd); pc != nil {
					t.Fatalf("trial %d: place found %s after the picker gave up", trial, pc.id)
				}
				break
			}
			if c.groupTasks != low || c.cpu < n.cpu || c.mem < n.mem || slices.ContainsFunc(n.ports, c.taken) {
				t.Fatalf("trial %d step %d: picked %s at load %d, least is %d", trial, step, c.id, c.groupTasks, low)
			}
			if step == 0 {
				firsts[c.id]++
			}
			c.cpu -= n.cpu
			c.mem -= n.mem
			for _, port := range n.ports {
				c.take(port)
			}
			c.groupTasks++
		}
	}
	// The least loaded at the start are a, d, g, j (load 0); each should
	// come first about a quarter of the time.
	for _, id := range []string{"a", "d", "g", "j"} {
		if f := firsts[id]; f < 60 || f > 140 {
			t.Errorf("%s first in %d of 400 runs, want about 100: %v", id, f, firsts)
		}
	}
}

// BenchmarkSpreadPlacement places 10,000 tasks on 5,000 candidates by
// spread over instances: a scan per task (place) and the picker, side by
// side.
func BenchmarkSpreadPlacement(b *testing.B) {
	rules, err := ParsePlacement([]shapes.PlacementStrategy{{Type: "spread", Field: "instanceId"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	n := need{cpu: 64, mem: 128}
	fleet := func() []*candidate {
		cs := make([]*candidate, 5000)
		for i := range cs {
			cs[i] = &candidate{id: fmt.Sprint(i), cpu: 4096, mem: 8192}
		}
		return cs
	}
	charge := func(c *candidate) {
		c.cpu -= n.cpu
		c.mem -= n.mem
		c.groupTasks++
	}
	b.Run("scan", func(b *testing.B) {
		rnd := rand.New(rand.NewPCG(1, 2))
		for range b.N {
			cs := fleet()
			for range 10000 {
				c, _ := place(cs, n, rules, rnd)
				charge(c)
			}
		}
		b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "tasks/s")
	})
	b.Run("picker", func(b *testing.B) {
		rnd := rand.New(rand.NewPCG(1, 2))
		for range b.N {
			cs := fleet()
			p := newSpreadPicker(cs, n, rules, rnd)
			for range 10000 {
				charge(p.next())
			}
		}
		b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "tasks/s")
	})
}
