package codec_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/store"
	segjson "github.com/segmentio/encoding/json"
)

type leaf struct {
	Tags []string `json:"tags"`
	N    int      `json:"n"`
}

type inner struct {
	Items  []leaf `json:"items"`
	Shadow []int  `json:"shadow"`
	Deep   []int  `json:"twin"` // shadowed by presized.Twin
}

type dupA struct {
	A []int `json:"dup"`
}

type dupB struct {
	B []int `json:"dup"`
}

type custom []int

func (c *custom) UnmarshalJSON(b []byte) error { *c = append(*c, len(b)); return nil }

// presized covers what the sizing walks: embedded structs (a shallower
// field shadowing a deeper one, two equal ones cancelling), pointers,
// nested arrays, types that decode themselves, and fields it must skip.
type Holder struct {
	Held []int `json:"held"`
}

type presized struct {
	inner
	*Holder                  // promoted through a pointer: not sized, and never a field "Holder"
	Shadow  []string         `json:"shadow"`
	Twin    []string         `json:"twin"`
	Ptr     *inner           `json:"ptr"`
	Val     inner            `json:"val"`
	Leaves  []leaf           `json:"leaves"`
	PtrEls  []*leaf          `json:"ptrEls"`
	Grid    [][]int          `json:"grid"`
	Bytes   []byte           `json:"bytes"`
	Custom  custom           `json:"custom"`
	Raw     json.RawMessage  `json:"raw"`
	Map     map[string][]int `json:"map"`
	Any     any              `json:"any"`
	Strs    []string         `json:"strs,omitempty"`
	Untaged []int
	Skip    []int `json:"-"`
	Quoted  []int `json:"quoted,string"`
	hidden  []int
}

var presizeSamples = []string{
	`{"items":[{"tags":["a","b"],"n":1},{"n":2},{"tags":[]},{"tags":null}],"shadow":["x"],"ptr":{"items":[{"tags":["c"]}]},"val":{"items":[{}],"shadow":[1,2]}}`,
	`{"leaves":[{"tags":["t\"1","\\","é"]},null,7,{"tags":[1]}],"ptrEls":[{"tags":["p"]},null],"grid":[[1,2],[],[3]],"bytes":"aGk=","custom":[1,2,3]}`,
	`{"raw":{"a":[1,2]},"map":{"k":[1]},"any":[1,[2]],"strs":[],"Untaged":[5,6],"untaged":[7],"Skip":[1],"-":[1],"quoted":[1],"hidden":[1]}`,
	`{"Items":[{"Tags":["case"]}],"ITEMS":[{"tags":["last"]}],"items":[{"tags":["first"]}]}`,
	`{"ite\u006ds":[{"tags":["escaped key"]}],"leaves":[ {"tags" : [ "x" , "y" ] } , { } ] }`,
	`{"items":[{"tags":["a"]}],"items":[{"n":1}]}`,
	`{"twin":["t"],"dup":[1,2],"val":{"twin":[3],"dup":[4]}}`,
	`{"Holder":{"held":[1]},"held":[2,3]}`,
	`{"Holder":{"held":[1]}}`,
	`{"leaves":[{"tags":["a"]},`, // truncated
	`{"leaves":{"tags":["a"]},"items":"no","ptr":[1],"val":3}`,
	`{"ptr":null,"leaves":null,"items":[]}`,
	`[1,2]`, `null`, ``, `{`, `{"a"}`, `{"items":[1 2]}`,
}

// codec must decode every input exactly as the decoder it wraps does,
// nil and empty slices apart, errors included; sizing changes capacity
// only.
func TestPresizeDecodesTheSame(t *testing.T) {
	for _, s := range presizeSamples {
		checkSame(t, []byte(s))
	}
	checkSame(t, sampleInstance)
	checkSame(t, sampleTask)
}

func checkSame(t *testing.T, b []byte) {
	t.Helper()
	var want, got presized
	werr := segjson.Unmarshal(b, &want)
	gerr := codec.Unmarshal(b, &got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%s: error %v, want %v", b, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("%s: decoded\n%#v\nwant\n%#v", b, got, want)
	}
	sameAs[store.ContainerInstance](t, b)
	sameAs[store.Task](t, b)
	// Two embedded fields of one JSON name at one depth cancel: neither is
	// decoded, so neither is sized (built here, as vet refuses the tag twice).
	dup := reflect.StructOf([]reflect.StructField{
		{Name: "DupA", Type: reflect.TypeFor[dupA](), Anonymous: true},
		{Name: "DupB", Type: reflect.TypeFor[dupB](), Anonymous: true},
	})
	w, g := reflect.New(dup), reflect.New(dup)
	werr, gerr = segjson.Unmarshal(b, w.Interface()), codec.Unmarshal(b, g.Interface())
	if (werr == nil) != (gerr == nil) || werr == nil && !reflect.DeepEqual(w.Interface(), g.Interface()) {
		t.Fatalf("%s: embedded twins decoded differently: %+v, want %+v", b, g.Elem(), w.Elem())
	}
}

// sameAs: after an error the value is whatever the decoder left; callers
// drop it, so only the error is compared.
func sameAs[T any](t *testing.T, b []byte) {
	t.Helper()
	var want, got T
	werr, gerr := segjson.Unmarshal(b, &want), codec.Unmarshal(b, &got)
	if (werr == nil) != (gerr == nil) || werr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("%s: %T decoded differently (errors %v, %v)", b, want, gerr, werr)
	}
}

// Decoding into a value that already holds slices leaves them to the
// decoder, which reuses them.
func TestPresizeKeepsExistingSlices(t *testing.T) {
	v := presized{Leaves: make([]leaf, 0, 8)}
	before := reflect.ValueOf(v.Leaves).Pointer()
	if err := codec.Unmarshal([]byte(`{"leaves":[{"n":1}]}`), &v); err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(v.Leaves).Pointer() != before || len(v.Leaves) != 1 || v.Leaves[0].N != 1 {
		t.Fatalf("leaves %v, not decoded into the slice given", v.Leaves)
	}
}

// Arrays are allocated at their length: a task with one container
// allocates one, not ten.
func TestPresizeSizesArrays(t *testing.T) {
	var v presized
	if err := codec.Unmarshal([]byte(`{"leaves":[{"tags":["a","b","c"]},{"tags":["d"]}],"grid":[[1],[2],[3]]}`), &v); err != nil {
		t.Fatal(err)
	}
	if cap(v.Leaves) != 2 || cap(v.Leaves[0].Tags) != 3 || cap(v.Leaves[1].Tags) != 1 || cap(v.Grid) != 3 {
		t.Fatalf("capacities leaves %d, tags %d %d, grid %d; want 2, 3 1, 3", cap(v.Leaves), cap(v.Leaves[0].Tags), cap(v.Leaves[1].Tags), cap(v.Grid))
	}
	var task store.Task
	if err := codec.Unmarshal(sampleTask, &task); err != nil {
		t.Fatal(err)
	}
	if len(task.Containers) != 1 || cap(task.Containers) != 1 {
		t.Fatalf("containers len %d cap %d, want 1 and 1", len(task.Containers), cap(task.Containers))
	}
}

func FuzzPresize(f *testing.F) {
	for _, s := range presizeSamples {
		f.Add([]byte(s))
	}
	f.Add(sampleInstance)
	f.Add(sampleTask)
	f.Fuzz(func(t *testing.T, b []byte) { checkSame(t, b) })
}
