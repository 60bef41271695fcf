package layers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/capstanhq/capstan/"

// place finds a package's layer and unit, or -1.
func place(pkg string) (layer, unit int) {
	for l, units := range Layers {
		for u, pats := range units {
			for _, p := range pats {
				if pkg == strings.TrimSuffix(p, "/...") || strings.HasSuffix(p, "/...") && strings.HasPrefix(pkg, strings.TrimSuffix(p, "...")) {
					return l, u
				}
			}
		}
	}
	return -1, -1
}

// check reports the imports that break the layering; imports maps each
// package (module-relative) to its module-relative imports.
func check(imports map[string][]string) []string {
	var bad []string
	for pkg, deps := range imports {
		if !strings.HasPrefix(pkg, "internal/") || pkg == "internal/layers" {
			continue // commands, benchmarks and tests sit above everything
		}
		l, u := place(pkg)
		if l < 0 {
			bad = append(bad, pkg+" is in no layer: add it to Layers")
			continue
		}
		for _, d := range deps {
			dl, du := place(d)
			switch {
			case !strings.HasPrefix(d, "internal/"):
				bad = append(bad, fmt.Sprintf("%s imports %s from outside internal/", pkg, d))
			case dl < 0:
				// reported as its own package
			case dl > l:
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s of a higher layer (%d)", pkg, l, d, dl))
			case dl == l && du != u:
				bad = append(bad, fmt.Sprintf("%s imports %s, a peer in layer %d", pkg, d, l))
			}
		}
	}
	return bad
}

// moduleImports lists the module's packages and their imports of the
// module, as `go list` sees the non-test sources.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(p.ImportPath, module)
		imports[pkg] = nil
		for _, i := range p.Imports {
			if strings.HasPrefix(i, module) {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(i, module))
			}
		}
	}
	return imports
}

// Every internal package is in a layer and imports only downwards or within
// its unit.
func TestImportsFollowTheLayers(t *testing.T) {
	imports := moduleImports(t)
	if len(imports) < 40 || imports["internal/ops"] == nil {
		t.Fatalf("go list found %d packages, without internal/ops's imports: the listing is wrong", len(imports))
	}
	for _, b := range check(imports) {
		t.Error(b)
	}
}

// The check itself catches each kind of break.
func TestCheckFindsBreaks(t *testing.T) {
	cases := map[string]map[string][]string{
		"peer":       {"internal/controller/daemons": {"internal/ops"}},
		"upward":     {"internal/fleet": {"internal/controller"}},
		"unplaced":   {"internal/newthing": nil},
		"plan peers": {"internal/rollout": {"internal/servicedeploy"}},
		"to cmd":     {"internal/store": {"cmd/capstan"}},
	}
	for name, imports := range cases {
		if len(check(imports)) == 0 {
			t.Errorf("%s: no break found in %v", name, imports)
		}
	}
	ok := map[string][]string{
		"internal/ops":                {"internal/fleet", "internal/rollout", "internal/store"},
		"internal/controller/daemons": {"internal/controller", "internal/fleet"},
		"internal/agent/engine":       {"internal/agent/resources", "internal/runtime"},
		"internal/runtime/docker":     {"internal/runtime"},
		"internal/testenv/agents":     {"internal/testenv", "internal/server", "internal/agent"},
		"cmd/capstan":                 {"internal/server"},
	}
	if b := check(ok); len(b) != 0 {
		t.Errorf("allowed imports refused: %v", b)
	}
}
