package ops

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
)

// FieldChange is one field of a daemon task definition that an update
// changes: Field is a path such as containerDefinitions[agent].image or
// containerDefinitions[agent].environment[LOG_LEVEL]; Change is added,
// removed or changed.
type FieldChange struct {
	Field   string `json:"field"`
	Change  string `json:"change"`
	Current any    `json:"current,omitempty"`
	New     any    `json:"new,omitempty"`
}

// identityFields say which revision a definition is, not what it runs.
var identityFields = []string{"daemonTaskDefinitionArn", "revision", "status", "registeredAt", "registeredBy", "deleteRequestedAt", "deregisteredAt"}

// diffDefinitions compares two definitions member by member. Lists of
// objects with a unique name (containers, environment variables, secrets,
// volumes) are matched by name, so adding a variable reads as one added
// field rather than a changed list.
func diffDefinitions(cur, next any) []FieldChange {
	a, b := asTree(cur), asTree(next)
	for _, m := range []any{a, b} {
		if o, ok := m.(map[string]any); ok {
			for _, f := range identityFields {
				delete(o, f)
			}
		}
	}
	out := []FieldChange{}
	diffTree("", a, b, &out)
	return out
}

func asTree(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var t any
	if json.Unmarshal(b, &t) != nil {
		return nil
	}
	return t
}

func diffTree(path string, a, b any, out *[]FieldChange) {
	switch {
	case empty(a) && empty(b):
		return
	case empty(a):
		*out = append(*out, FieldChange{Field: path, Change: "added", New: b})
		return
	case empty(b):
		*out = append(*out, FieldChange{Field: path, Change: "removed", Current: a})
		return
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			diffTree(p, am[k], bm[k], out)
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok {
		an, aNamed := byName(al)
		bn, bNamed := byName(bl)
		if aNamed && bNamed {
			var names []string
			for _, e := range al {
				names = append(names, e.(map[string]any)["name"].(string))
			}
			for _, e := range bl {
				if n := e.(map[string]any)["name"].(string); an[n] == nil {
					names = append(names, n)
				}
			}
			for _, n := range names {
				diffTree(path+"["+n+"]", nilIfMissing(an, n), nilIfMissing(bn, n), out)
			}
			return
		}
		if len(al) == len(bl) {
			for i := range al {
				diffTree(path+"["+strconv.Itoa(i)+"]", al[i], bl[i], out)
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, FieldChange{Field: path, Change: "changed", Current: a, New: b})
	}
}

// empty: absent, null, or an empty list or object (the API shows those
// interchangeably).
func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

func nilIfMissing(m map[string]any, k string) any {
	if v, ok := m[k]; ok {
		return v
	}
	return nil
}

// byName indexes a list of objects by their "name" member; ok is false
// unless every element has a distinct string name.
func byName(l []any) (map[string]any, bool) {
	m := make(map[string]any, len(l))
	for _, e := range l {
		o, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		n, ok := o["name"].(string)
		if !ok || m[n] != nil {
			return nil, false
		}
		m[n] = o
	}
	return m, true
}
