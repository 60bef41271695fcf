package taskdef

import (
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/fault"
)

// checkOrder validates dependsOn and the implicit start-order edges, and
// refuses cycles, which would leave the task waiting forever.
func checkOrder(cs []container, names map[string]int) error {
	type edge struct {
		field string
		to    int
	}
	edges := make([][]edge, len(cs))
	target := func(from int, field, name string) (int, error) {
		j, ok := names[name]
		switch {
		case !ok:
			return 0, fault.Invalid(field, "names no container of this task definition (%q)", clip(name))
		case j == from:
			return 0, fault.Invalid(field, "a container cannot depend on itself (%q)", name)
		}
		return j, nil
	}
	for i, c := range cs {
		seen := make(map[string]int, len(c.dependsOn))
		for k, d := range c.dependsOn {
			p := at(c.path+".dependsOn", k)
			j, err := target(i, p+".containerName", d.ContainerName)
			if err != nil {
				return err
			}
			if prev, dup := seen[d.ContainerName]; dup {
				return fault.Invalid(p+".containerName", "repeats the dependency of %s (%q)", at(c.path+".dependsOn", prev), d.ContainerName)
			}
			seen[d.ContainerName] = k
			switch d.Condition {
			case "COMPLETE", "SUCCESS":
				if cs[j].essential {
					return fault.Invalid(p+".condition", "%s cannot wait on essential container %q: its exit stops the task", d.Condition, d.ContainerName)
				}
			case "HEALTHY":
				if !cs[j].hasHealthCheck() {
					return fault.Invalid(p+".condition", "HEALTHY needs container %q to have a healthCheck", d.ContainerName)
				}
			}
			edges[i] = append(edges[i], edge{p + ".containerName", j})
		}
		for _, l := range c.implicit {
			j, err := target(i, l.field, l.to)
			if err != nil {
				return err
			}
			edges[i] = append(edges[i], edge{l.field, j})
		}
	}

	const (
		unseen = iota
		active
		done
	)
	state := make([]int, len(cs))
	var stack []int
	var visit func(i int) error
	visit = func(i int) error {
		state[i] = active
		stack = append(stack, i)
		for _, e := range edges[i] {
			switch state[e.to] {
			case active:
				start := slices.Index(stack, e.to)
				var cycle []string
				for _, k := range stack[start:] {
					cycle = append(cycle, cs[k].name)
				}
				cycle = append(cycle, cs[e.to].name)
				return fault.Invalid(e.field, "makes a dependency cycle: %s", strings.Join(cycle, " -> "))
			case unseen:
				if err := visit(e.to); err != nil {
					return err
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = done
		return nil
	}
	for i := range cs {
		if state[i] == unseen {
			if err := visit(i); err != nil {
				return err
			}
		}
	}
	return nil
}
