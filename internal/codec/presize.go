package codec

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"unsafe"
)

// The decoder starts every slice at ten elements and doubles it: a task's
// one container took 10 × 296 bytes, and over a 5,000-instance rollout
// these first arrays were 1.36 GB, a third of what the server allocated.
// It keeps a slice's capacity when the slice it decodes into has one. So
// before decoding, presize walks the JSON once and gives each array the
// decoder will fill an empty slice of exactly its length, and the
// elements' own arrays likewise. It sets capacities only, on fields whose
// key is in the object with an array value, so the decoder overwrites
// each: the values decoded are the same.

// plan is what presize does in objects of one struct type.
type plan struct {
	fields map[string]*field // by JSON name, exact
}

type field struct {
	offset uintptr
	typ    reflect.Type
	kind   reflect.Kind // Slice, Struct or Pointer (to a struct)
	elem   *plan        // the slice's or pointer's elements, or the struct
}

var plans sync.Map // reflect.Type → *plan (nil: nothing to presize)

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// custom types decode themselves: presize leaves them alone.
func custom(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(unmarshalerType) || p.Implements(unmarshalerType) ||
		t.Implements(textUnmarshalerType) || p.Implements(textUnmarshalerType)
}

func planFor(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	p := buildPlan(t, map[reflect.Type]bool{})
	plans.Store(t, p)
	return p
}

// buildPlan is nil when objects of t hold no array presize can size.
func buildPlan(t reflect.Type, seen map[reflect.Type]bool) *plan {
	if t.Kind() != reflect.Struct || custom(t) || seen[t] {
		return nil // recursive types are decoded as they are
	}
	seen[t] = true
	defer delete(seen, t)
	type cand struct {
		f      reflect.StructField
		depth  int
		tagged bool
	}
	byName := map[string][]cand{}
	for _, sf := range reflect.VisibleFields(t) {
		tag := sf.Tag.Get("json")
		if !sf.IsExported() || sf.Anonymous && tag == "" && structOrPointer(sf.Type) {
			continue // an embedded struct's fields are promoted: VisibleFields lists them
		}
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",string,") {
			continue
		}
		if name == "" {
			name = sf.Name
		} else if !plainName(name) {
			continue // a name encoding/json may not take as given
		}
		byName[name] = append(byName[name], cand{sf, len(sf.Index), tag != ""})
	}
	p := &plan{fields: map[string]*field{}}
	for name, cs := range byName {
		// encoding/json's rule: the shallowest field wins, a tagged one
		// among equals; two left and the name is no field's.
		best := -1
		for i, c := range cs {
			if best < 0 || c.depth < cs[best].depth || c.depth == cs[best].depth && c.tagged && !cs[best].tagged {
				best = i
			}
		}
		n := 0
		for _, c := range cs {
			if c.depth == cs[best].depth && c.tagged == cs[best].tagged {
				n++
			}
		}
		if n != 1 {
			continue
		}
		sf := cs[best].f
		off, ok := offsetOf(t, sf.Index)
		if !ok {
			continue
		}
		ft := sf.Type
		f := &field{offset: off, typ: ft, kind: ft.Kind()}
		switch {
		case custom(ft):
			continue
		case ft.Kind() == reflect.Slice:
			if ft.Elem().Kind() == reflect.Uint8 {
				continue // []byte is decoded from a string
			}
			f.elem = buildPlan(ft.Elem(), seen)
		case ft.Kind() == reflect.Struct:
			if f.elem = buildPlan(ft, seen); f.elem == nil {
				continue
			}
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct:
			if f.elem = buildPlan(ft.Elem(), seen); f.elem == nil {
				continue
			}
		default:
			continue
		}
		p.fields[name] = f
	}
	if len(p.fields) == 0 {
		return nil
	}
	return p
}

func structOrPointer(t reflect.Type) bool {
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct
}

// offsetOf is the field's offset from the outer struct, unless the path
// goes through an embedded pointer.
func offsetOf(t reflect.Type, index []int) (uintptr, bool) {
	var off uintptr
	for i, x := range index {
		sf := t.Field(x)
		off += sf.Offset
		t = sf.Type
		if i < len(index)-1 && t.Kind() != reflect.Struct {
			return 0, false
		}
	}
	return off, true
}

// presizeObject sizes the arrays of the object at the start of b, decoded
// into the struct at base. It stops at anything it does not expect: the
// decoder reports the syntax error.
func presizeObject(b []byte, p *plan, base unsafe.Pointer) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return
	}
	i++
	for {
		i = skipWS(b, i)
		if i >= len(b) || b[i] == '}' {
			return
		}
		if b[i] == ',' {
			i = skipWS(b, i+1)
		}
		if i >= len(b) || b[i] != '"' {
			return
		}
		end, plain := stringEnd(b, i)
		if end < 0 {
			return
		}
		key := b[i+1 : end-1]
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return
		}
		i = skipWS(b, i+1)
		var f *field
		if plain {
			f = p.fields[string(key)]
		}
		var next int
		if f != nil {
			next = presizeValue(b, i, f, unsafe.Add(base, f.offset))
		} else {
			next = skipValue(b, i)
		}
		if next < 0 {
			return
		}
		i = next
	}
}

// presizeValue sizes what the value at b[i] fills in f, and is the index
// after the value (-1 if it does not end). An array is walked once to be
// counted, and once more only if its elements hold arrays.
func presizeValue(b []byte, i int, f *field, at unsafe.Pointer) int {
	switch f.kind {
	case reflect.Struct, reflect.Pointer:
		end := skipValue(b, i)
		if end < 0 || b[i] != '{' {
			return end
		}
		if f.kind == reflect.Pointer {
			ptr := (*unsafe.Pointer)(at)
			if *ptr == nil {
				*ptr = reflect.New(f.typ.Elem()).UnsafePointer()
			}
			at = *ptr
		}
		presizeObject(b[i:end], f.elem, at)
		return end
	}
	dst := reflect.NewAt(f.typ, at).Elem()
	if i >= len(b) || b[i] != '[' || !dst.IsNil() {
		return skipValue(b, i) // a slice already there is the decoder's to reuse
	}
	n := 0
	end := eachElement(b[i:], func([]byte) { n++ })
	if end < 0 || n == 0 {
		return end
	}
	end += i
	s := reflect.MakeSlice(f.typ, n, n)
	if f.elem != nil {
		size := f.typ.Elem().Size()
		k := 0
		eachElement(b[i:end], func(e []byte) {
			presizeObject(e, f.elem, unsafe.Add(s.UnsafePointer(), uintptr(k)*size))
			k++
		})
	}
	dst.Set(s)
	dst.SetLen(0)
	return end
}

func plainName(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.$@", c)) {
			return false
		}
	}
	return true
}

// eachElement calls fn with each element of the array at v[0] and is the
// index after the array, -1 if it is not well formed.
func eachElement(v []byte, fn func([]byte)) int {
	i := skipWS(v, 1)
	if i < len(v) && v[i] == ']' {
		return i + 1
	}
	for i < len(v) {
		end := skipValue(v, i)
		if end < 0 {
			return -1
		}
		fn(v[i:end])
		i = skipWS(v, end)
		if i >= len(v) {
			return -1
		}
		if v[i] == ']' {
			return i + 1
		}
		if v[i] != ',' {
			return -1
		}
		i = skipWS(v, i+1)
	}
	return -1
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index after the string starting at b[i], and whether
// it has no escapes; -1 if it does not end.
func stringEnd(b []byte, i int) (int, bool) {
	plain := true
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			plain = false
			j++
		case '"':
			return j + 1, plain
		}
	}
	return -1, false
}

// skipValue is the index after the value starting at b[i], -1 if it does
// not end.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := stringEnd(b, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _ := stringEnd(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}
