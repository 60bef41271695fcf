// Command shapegen writes the Go wire types of the ECS JSON API from the
// botocore service model installed on this machine, plus the members that the
// newer Go SDK has and botocore lacks (listed in patches below).
//
//	go run ./tools/shapegen -model "$(python3 -c 'import botocore,os;print(os.path.dirname(botocore.__file__))')/data/ecs/2014-11-13/service-2.json.gz" -out internal/api/shapes/zz_shapes.go
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"io"
	"log"
	"os"
	"sort"
	"strings"
	"unicode"
)

type member struct {
	Shape string `json:"shape"`
}

type shape struct {
	Type      string            `json:"type"`
	Members   map[string]member `json:"members"`
	Required  []string          `json:"required"`
	Member    *member           `json:"member"`
	Value     *member           `json:"value"`
	Enum      []string          `json:"enum"`
	Min       *float64          `json:"min"`
	Max       *float64          `json:"max"`
	Exception bool              `json:"exception"`
}

type operation struct {
	Input  *member `json:"input"`
	Output *member `json:"output"`
}

type model struct {
	Operations map[string]operation `json:"operations"`
	Shapes     map[string]*shape    `json:"shapes"`
}

// patch adds a member the Go SDK (v1.105.1) models and botocore does not.
type patch struct{ structure, member, shape string }

var patches = []patch{
	{"CreateDaemonRequest", "critical", "BoxedBoolean"},
	{"UpdateDaemonRequest", "critical", "BoxedBoolean"},
	{"DaemonRevision", "critical", "BoxedBoolean"},
	{"DaemonCapacityProvider", "withoutDaemonCount", "Integer"},
	{"DaemonRevisionDetail", "totalWithoutDaemonCount", "Integer"},
	{"DaemonDeploymentCapacityProvider", "withoutDaemonInstanceCount", "Integer"},
	{"DaemonDeploymentRevisionDetail", "totalWithoutDaemonInstanceCount", "Integer"},
	{"DaemonTaskDefinition", "pidMode", "DaemonPidMode"},
	{"DaemonTaskDefinition", "ipcMode", "DaemonIpcMode"},
	{"RegisterDaemonTaskDefinitionRequest", "pidMode", "DaemonPidMode"},
	{"RegisterDaemonTaskDefinitionRequest", "ipcMode", "DaemonIpcMode"},
	{"DaemonVolume", "logDriverVolumeConfiguration", "LogDriverVolumeConfiguration"},
	{"InstanceLaunchTemplate", "nitroEnclavesEnabled", "BoxedBoolean"},
	{"RegisterTaskDefinitionRequest", "trustedExecutionConfiguration", "TrustedExecutionConfiguration"},
	{"TaskDefinition", "trustedExecutionConfiguration", "TrustedExecutionConfiguration"},
}

var newShapes = map[string]*shape{
	"DaemonPidMode": {Type: "string", Enum: []string{"none", "shared"}},
	"DaemonIpcMode": {Type: "string", Enum: []string{"none", "shared"}},
	"LogDriverVolumeConfiguration": {Type: "structure", Required: []string{"driver"},
		Members: map[string]member{"driver": {Shape: "LogDriver"}}},
	"TrustedExecutionConfiguration": {Type: "structure",
		Members: map[string]member{"isolationMode": {Shape: "String"}, "attestationPolicy": {Shape: "String"}}},
}

func main() {
	modelPath := flag.String("model", "", "botocore ECS service-2.json(.gz)")
	out := flag.String("out", "", "output Go file")
	flag.Parse()
	if *modelPath == "" || *out == "" {
		log.Fatal("shapegen: -model and -out are required")
	}
	m, err := load(*modelPath)
	if err != nil {
		log.Fatal(err)
	}
	for n, s := range newShapes {
		if _, ok := m.Shapes[n]; !ok {
			m.Shapes[n] = s
		}
	}
	for _, p := range patches {
		s := m.Shapes[p.structure]
		if s == nil {
			log.Fatalf("shapegen: patch names unknown structure %s", p.structure)
		}
		if _, ok := s.Members[p.member]; !ok {
			s.Members[p.member] = member{Shape: p.shape}
		}
	}
	src, err := generate(m)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(err)
	}
}

func load(path string) (*model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		r = gz
	}
	var m model
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		return nil, fmt.Errorf("decode model: %w", err)
	}
	return &m, nil
}

func exported(s string) string {
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

type gen struct {
	m   *model
	buf bytes.Buffer
}

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.buf, format, args...) }

// goType is the Go type of a member whose shape is name.
func (g *gen) goType(name string) string {
	s := g.m.Shapes[name]
	switch s.Type {
	case "structure":
		return "*" + name
	case "string":
		return "string"
	case "boolean":
		return "*bool"
	case "integer":
		return "*int32"
	case "long":
		return "*int64"
	case "double", "float":
		return "*float64"
	case "timestamp":
		return "*Timestamp"
	case "blob":
		return "[]byte"
	case "list":
		elem := g.goType(s.Member.Shape)
		return "[]" + strings.TrimPrefix(elem, "*")
	case "map":
		return "map[string]" + strings.TrimPrefix(g.goType(s.Value.Shape), "*")
	}
	log.Fatalf("shapegen: shape %s has unknown type %s", name, s.Type)
	return ""
}

func generate(m *model) ([]byte, error) {
	g := &gen{m: m}
	g.p("// Code generated by tools/shapegen from the ECS service model. DO NOT EDIT.\n\n")
	g.p("package shapes\n\n")

	names := sortedKeys(m.Shapes)
	// Enums: constants and value sets.
	for _, n := range names {
		s := m.Shapes[n]
		if s.Type != "string" || len(s.Enum) == 0 {
			continue
		}
		g.p("// %s values.\nconst (\n", n)
		seen := map[string]bool{}
		for _, v := range s.Enum {
			c := n + constName(v)
			if seen[c] {
				continue
			}
			seen[c] = true
			g.p("\t%s = %q\n", c, v)
		}
		g.p(")\n\n")
	}
	g.p("var enums = map[string][]string{\n")
	for _, n := range names {
		s := m.Shapes[n]
		if s.Type == "string" && len(s.Enum) > 0 {
			g.p("\t%q: {", n)
			for i, v := range s.Enum {
				if i > 0 {
					g.p(", ")
				}
				g.p("%q", v)
			}
			g.p("},\n")
		}
	}
	g.p("}\n\n")

	// Operations: input and output types by operation name.
	g.p("// Operations lists every modelled operation with its input and output shape names.\n")
	g.p("var Operations = map[string][2]string{\n")
	for _, n := range sortedKeys(m.Operations) {
		op := m.Operations[n]
		in, out := "", ""
		if op.Input != nil {
			in = op.Input.Shape
		}
		if op.Output != nil {
			out = op.Output.Shape
		}
		g.p("\t%q: {%q, %q},\n", n, in, out)
	}
	g.p("}\n\n")

	for _, n := range names {
		s := m.Shapes[n]
		if s.Type != "structure" || s.Exception {
			continue
		}
		g.p("type %s struct {\n", n)
		for _, mn := range sortedKeys(s.Members) {
			mem := s.Members[mn]
			tag := "omitempty"
			gt := g.goType(mem.Shape)
			if gt == "*Timestamp" {
				gt = "Timestamp"
				tag = "omitzero"
			}
			// A nil list is omitted, an empty one is sent as [] (as ECS does).
			if strings.HasPrefix(gt, "[]") || strings.HasPrefix(gt, "map[") {
				tag = "omitzero"
			}
			g.p("\t%s %s `json:\"%s,%s\"`\n", exported(mn), gt, mn, tag)
		}
		g.p("}\n\n")
		g.check(n, s)
	}
	src, err := format.Source(g.buf.Bytes())
	if err != nil {
		return g.buf.Bytes(), fmt.Errorf("format: %w", err)
	}
	return src, nil
}

func constName(v string) string {
	var b strings.Builder
	up := true
	for _, r := range v {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			up = true
			continue
		}
		if up {
			b.WriteRune(unicode.ToUpper(r))
			up = false
		} else {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// check writes the Check method: required members, enum values, and the
// model's min/max bounds, recursing into nested structures.
func (g *gen) check(n string, s *shape) {
	g.p("// Check reports the first member of v that breaks a rule of the model.\n")
	g.p("func (v *%s) Check(path string) *Violation {\n", n)
	g.p("\tif v == nil { return nil }\n")
	req := map[string]bool{}
	for _, r := range s.Required {
		req[r] = true
	}
	for _, mn := range sortedKeys(s.Members) {
		ms := g.m.Shapes[s.Members[mn].Shape]
		f := "v." + exported(mn)
		jp := fmt.Sprintf("join(path, %q)", mn)
		gt := g.goType(s.Members[mn].Shape)
		if req[mn] {
			switch {
			case gt == "string":
				g.p("\tif %s == \"\" { return required(%s) }\n", f, jp)
			case strings.HasPrefix(gt, "[]") || strings.HasPrefix(gt, "map"):
				g.p("\tif %s == nil { return required(%s) }\n", f, jp)
			case gt == "*Timestamp":
				g.p("\tif %s.IsZero() { return required(%s) }\n", f, jp)
			default:
				g.p("\tif %s == nil { return required(%s) }\n", f, jp)
			}
		}
		switch ms.Type {
		case "string":
			if len(ms.Enum) > 0 {
				g.p("\tif %s != \"\" { if x := oneOf(%s, %s, enums[%q]); x != nil { return x } }\n", f, jp, f, s.Members[mn].Shape)
			}
			if ms.Min != nil || ms.Max != nil {
				g.p("\tif %s != \"\" { if x := length(%s, len(%s), %s, %s); x != nil { return x } }\n", f, jp, f, bound(ms.Min), bound(ms.Max))
			}
		case "integer", "long", "double", "float":
			if ms.Min != nil || ms.Max != nil {
				g.p("\tif %s != nil { if x := within(%s, float64(*%s), %s, %s); x != nil { return x } }\n", f, jp, f, bound(ms.Min), bound(ms.Max))
			}
		case "structure":
			g.p("\tif x := %s.Check(%s); x != nil { return x }\n", f, jp)
		case "list":
			if ms.Min != nil || ms.Max != nil {
				g.p("\tif %s != nil { if x := count(%s, len(%s), %s, %s); x != nil { return x } }\n", f, jp, f, bound(ms.Min), bound(ms.Max))
			}
			es := g.m.Shapes[ms.Member.Shape]
			switch {
			case es.Type == "structure":
				g.p("\tfor i := range %s { if x := %s[i].Check(index(%s, i)); x != nil { return x } }\n", f, f, jp)
			case es.Type == "string" && len(es.Enum) > 0:
				g.p("\tfor i, e := range %s { if x := oneOf(index(%s, i), e, enums[%q]); x != nil { return x } }\n", f, jp, ms.Member.Shape)
			}
		case "map":
			vs := g.m.Shapes[ms.Value.Shape]
			if vs.Type == "structure" {
				g.p("\tfor k := range %s { e := %s[k]; if x := e.Check(join(%s, k)); x != nil { return x } }\n", f, f, jp)
			}
		}
	}
	g.p("\treturn nil\n}\n\n")
}

func bound(f *float64) string {
	if f == nil {
		return "nil"
	}
	return fmt.Sprintf("bnd(%v)", *f)
}
