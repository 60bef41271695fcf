package control

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
)

// candidate is an instance as placement sees it.
type candidate struct {
	id         string
	cpu, mem   int             // remaining
	taken      map[string]bool // "tcp/80" ports reserved or in use
	attributes map[string]string
	tasks      int // tasks placed on it (for spread)
	groupTasks int // tasks of the same group (distinctInstance, spread)
}

// need is what one task asks for.
type need struct {
	cpu, mem int
	ports    []string // static host ports
}

// placementRules are a RunTask's strategy and constraints, validated.
type placementRules struct {
	strategy         []shapes.PlacementStrategy
	distinctInstance bool
	memberOf         []instanceFilter
}

func parsePlacement(strategies []shapes.PlacementStrategy, constraints []shapes.PlacementConstraint) (placementRules, error) {
	var r placementRules
	if len(strategies) > 5 {
		return r, fault.Invalid("placementStrategy", "at most 5 strategies")
	}
	for i, st := range strategies {
		f := fieldIndex("placementStrategy", i)
		switch st.Type {
		case "random":
		case "binpack":
			if st.Field != "cpu" && st.Field != "memory" {
				return r, fault.Invalid(f+".field", "binpack takes cpu or memory (got %q)", clip(st.Field))
			}
		case "spread":
			if st.Field != "instanceId" && st.Field != "host" && !strings.HasPrefix(st.Field, "attribute:") {
				return r, fault.Invalid(f+".field", "spread takes instanceId, host or attribute:NAME (got %q)", clip(st.Field))
			}
		default:
			return r, fault.Invalid(f+".type", "must be random, spread or binpack (got %q)", clip(st.Type))
		}
	}
	r.strategy = strategies
	if len(constraints) > 10 {
		return r, fault.Invalid("placementConstraints", "at most 10 constraints")
	}
	for i, c := range constraints {
		f := fieldIndex("placementConstraints", i)
		switch c.Type {
		case "distinctInstance":
			r.distinctInstance = true
		case "memberOf":
			flt, err := parseInstanceFilter(c.Expression)
			if err != nil || len(flt) == 0 {
				return r, fault.Invalid(f+".expression", "memberOf needs an expression of the form attribute:NAME == VALUE")
			}
			r.memberOf = append(r.memberOf, flt)
		default:
			return r, fault.Invalid(f+".type", "must be distinctInstance or memberOf (got %q)", clip(c.Type))
		}
	}
	return r, nil
}

// place picks an instance for one task, or explains why none fits. The
// default strategy is binpack on memory, then cpu.
func place(cands []*candidate, n need, rules placementRules, rnd *rand.Rand) (*candidate, string) {
	var fits []*candidate
	reasons := map[string]int{}
	for _, c := range cands {
		switch {
		case rules.distinctInstance && c.groupTasks > 0:
			reasons["distinctInstance placement constraint unsatisfied"]++
		case c.cpu < n.cpu:
			reasons[fmt.Sprintf("RESOURCE:CPU (needs %d units, largest free is %d)", n.cpu, maxFree(cands, func(c *candidate) int { return c.cpu }))]++
		case c.mem < n.mem:
			reasons[fmt.Sprintf("RESOURCE:MEMORY (needs %d MiB, largest free is %d MiB)", n.mem, maxFree(cands, func(c *candidate) int { return c.mem }))]++
		case slices.ContainsFunc(n.ports, func(p string) bool { return c.taken[p] }):
			reasons["RESOURCE:PORTS (a requested host port is taken)"]++
		default:
			fits = append(fits, c)
		}
	}
	for _, m := range rules.memberOf {
		fits = slices.DeleteFunc(fits, func(c *candidate) bool {
			if !m.match(c.attributes) {
				reasons["MemberOf placement constraint unsatisfied"]++
				return true
			}
			return false
		})
	}
	if len(fits) == 0 {
		keys := make([]string, 0, len(reasons))
		for k := range reasons {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, strings.Join(keys, "; ")
	}
	strategy := rules.strategy
	if len(strategy) == 0 {
		strategy = []shapes.PlacementStrategy{{Type: "binpack", Field: "memory"}, {Type: "binpack", Field: "cpu"}}
	}
	// Random order first, so ties break randomly; then stable sorts from the
	// last strategy to the first make the first one dominant.
	rnd.Shuffle(len(fits), func(i, j int) { fits[i], fits[j] = fits[j], fits[i] })
	for i := len(strategy) - 1; i >= 0; i-- {
		st := strategy[i]
		var key func(*candidate) int
		switch {
		case st.Type == "binpack" && st.Field == "cpu":
			key = func(c *candidate) int { return c.cpu - n.cpu }
		case st.Type == "binpack":
			key = func(c *candidate) int { return c.mem - n.mem }
		case st.Type == "spread" && (st.Field == "instanceId" || st.Field == "host"):
			key = func(c *candidate) int { return c.groupTasks }
		case st.Type == "spread":
			attr := strings.TrimPrefix(st.Field, "attribute:")
			counts := map[string]int{}
			for _, c := range cands {
				counts[c.attributes[attr]] += c.groupTasks
			}
			key = func(c *candidate) int { return counts[c.attributes[attr]] }
		default:
			continue
		}
		sort.SliceStable(fits, func(a, b int) bool { return key(fits[a]) < key(fits[b]) })
	}
	return fits[0], ""
}

func maxFree(cands []*candidate, f func(*candidate) int) int {
	m := 0
	for _, c := range cands {
		m = max(m, f(c))
	}
	return m
}
