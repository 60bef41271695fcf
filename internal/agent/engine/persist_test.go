package engine

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
)

// paint sets every settable leaf reachable from v. Fresh, it gives every
// pointer, slice and map something new to hold and writes first values;
// otherwise it writes other values in place, through the pointers and
// slices v holds (maps get a new entry).
func paint(v reflect.Value, fresh bool) {
	str, num, at := "x", int64(1), time.Date(2026, 12, 4, 1, 2, 3, 4, time.UTC)
	if !fresh {
		str, num, at = "changed", 7, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if fresh {
			v.Set(reflect.New(v.Type().Elem()))
		}
		if !v.IsNil() {
			paint(v.Elem(), fresh)
		}
	case reflect.Slice:
		if fresh {
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		}
		for i := range v.Len() {
			paint(v.Index(i), fresh)
		}
	case reflect.Map:
		if fresh {
			v.Set(reflect.MakeMap(v.Type()))
		}
		if !v.IsNil() {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			paint(k, fresh)
			paint(e, fresh)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(at))
			return
		}
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				paint(v.Field(i), fresh)
			}
		}
	case reflect.String:
		v.SetString(str)
	case reflect.Bool:
		v.SetBool(fresh)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(num)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(num))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(num))
	}
}

func fill(v reflect.Value)     { paint(v, true) }
func scribble(v reflect.Value) { paint(v, false) }

// The saved head is compared with later records, so it must share nothing
// they change in place: every field of a record, present and to come, is
// filled, the original is changed everywhere through its pointers and
// slices, and the copy must still be as it was.
func TestCloneHeadSharesNothing(t *testing.T) {
	var r record
	fill(reflect.ValueOf(&r).Elem())
	r.Task = protocol.Task{} // not part of the head
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	c := r.cloneHead()
	if !reflect.DeepEqual(c, &r) {
		t.Fatal("the copy differs from the original")
	}
	scribble(reflect.ValueOf(&r).Elem())
	if reflect.DeepEqual(c, &r) {
		t.Fatal("scribbling changed nothing: the test proves nothing")
	}
	got, _ := json.Marshal(c)
	if string(got) != string(want) {
		t.Fatalf("the copy changed with the original:\n%s\nwant\n%s", got, want)
	}
}

// A step that changes nothing writes nothing, and one that changes a
// container in place (a port's number, an exit code) is written: the
// comparison that spares the encoding must not miss it.
func TestPersistWritesChangesMadeInPlace(t *testing.T) {
	store := newMemStore()
	e := &Engine{cfg: Config{Store: store}, log: slog.New(slog.DiscardHandler)}
	tk := e.taskBase(taskArn("inplace"))
	tk.desired = newTestTask("inplace", ctrDef("app", "busybox"))
	port, code := int32(8080), 0
	tk.cs = []*ctr{{name: "app", id: "c1", phase: phaseRunning, ports: []shapes.NetworkBinding{{HostPort: &port}}, exitCode: &code}}
	stored := func() record {
		t.Helper()
		data, _ := store.Tasks()
		var rec record
		if err := json.Unmarshal(data[tk.arn], &rec); err != nil {
			t.Fatalf("stored record: %v", err)
		}
		return rec
	}
	tk.persist()
	if rec := stored(); *rec.Containers[0].Ports[0].HostPort != 8080 || rec.Task.Arn != tk.arn {
		t.Fatalf("first record %+v", rec)
	}
	before := store.puts()
	tk.persist()
	if n := store.puts(); n != before {
		t.Fatalf("an unchanged record was written again (%d writes, want %d)", n, before)
	}
	port = 9090
	tk.persist()
	if got := *stored().Containers[0].Ports[0].HostPort; got != 9090 {
		t.Fatalf("port changed in place was not written: %d", got)
	}
	code = 137
	tk.persist()
	if got := *stored().Containers[0].ExitCode; got != 137 {
		t.Fatalf("exit code changed in place was not written: %d", got)
	}
	tk.cs[0].reason = "OOM"
	tk.persist()
	if got := stored().Containers[0].Reason; got != "OOM" {
		t.Fatalf("reason not written: %q", got)
	}
	// A new desired task (a stop) is written with the record as it is.
	d := tk.desired
	d.DesiredStatus, d.Version = StatusStopped, d.Version+1
	tk.desired, tk.desiredJSON, tk.savedHead = d, nil, nil
	tk.persist()
	if rec := stored(); rec.Task.DesiredStatus != StatusStopped || rec.Containers[0].Reason != "OOM" {
		t.Fatalf("record after the desired change %+v", rec)
	}
}

// BenchmarkPersistUnchanged is a step that changes nothing, the common
// case: compared with the saved head, beside encoding the record to
// compare the bytes (the way before).
func BenchmarkPersistUnchanged(b *testing.B) {
	store := newMemStore()
	e := &Engine{cfg: Config{Store: store}, log: slog.New(slog.DiscardHandler)}
	tk := e.taskBase(taskArn("bench"))
	tk.desired = newTestTask("bench", ctrDef("app", "busybox", "sleep", "1000"), ctrDef("sidecar", "busybox", "sleep", "1000"))
	port, now := int32(8080), time.Now()
	tk.times.Started = now
	for _, name := range []string{"app", "sidecar"} {
		tk.cs = append(tk.cs, &ctr{name: name, id: "id-" + name, phase: phaseRunning, ports: []shapes.NetworkBinding{{HostPort: &port}},
			createdAt: now, startedAt: now, firstStartedAt: now})
	}
	tk.state = tk.buildState()
	tk.persist()
	b.Run("compare", func(b *testing.B) {
		for b.Loop() {
			tk.persist()
		}
	})
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if data, err := tk.encodeRecord(); err != nil || string(data) != string(tk.saved) {
				b.Fatal("record changed", err)
			}
		}
	})
	if store.puts() != 1 {
		b.Fatalf("%d writes", store.puts())
	}
}

// mutateNth changes the nth place reachable from v, in a fixed order:
// leaves change value, pointers become nil, slices nil or empty. It
// reports false when v has fewer places.
func mutateNth(v reflect.Value, n *int) bool {
	hit := func() bool { *n--; return *n < 0 }
	switch v.Kind() {
	case reflect.Pointer:
		if hit() {
			v.SetZero()
			return true
		}
		return !v.IsNil() && mutateNth(v.Elem(), n)
	case reflect.Slice:
		if hit() {
			v.SetZero()
			return true
		}
		if hit() {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return true
		}
		for i := range v.Len() {
			if mutateNth(v.Index(i), n) {
				return true
			}
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			if hit() {
				v.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Millisecond)))
				return true
			}
			return false
		}
		for i := range v.NumField() {
			if v.Field(i).CanSet() && mutateNth(v.Field(i), n) {
				return true
			}
		}
	case reflect.String:
		if hit() {
			v.SetString(v.String() + "!")
			return true
		}
	case reflect.Bool:
		if hit() {
			v.SetBool(!v.Bool())
			return true
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if hit() {
			v.SetInt(v.Int() + 1)
			return true
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if hit() {
			v.SetUint(v.Uint() + 1)
			return true
		}
	case reflect.Float32, reflect.Float64:
		if hit() {
			v.SetFloat(v.Float() + 1)
			return true
		}
	}
	return false
}

// sameHead may skip a write only for records that encode alike: every
// field a record has, or will have, is changed one at a time (each value,
// each pointer and slice made nil, each slice empty), and for every change
// the encoding shows, sameHead must see it.
func TestSameHeadSeesEveryField(t *testing.T) {
	var base record
	fill(reflect.ValueOf(&base).Elem())
	base.Task = protocol.Task{} // persist compares records without their tasks
	if !sameHead(&base, base.cloneHead()) {
		t.Fatal("a record differs from its copy")
	}
	enc := func(r *record) string {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	places := 0
	for i := 0; ; i++ {
		v := base.cloneHead()
		n := i
		rv := reflect.ValueOf(v).Elem()
		changed := false
		for f := range rv.NumField() {
			if rv.Type().Field(f).Name != "Task" && mutateNth(rv.Field(f), &n) {
				changed = true
				break
			}
		}
		if !changed {
			break
		}
		places++
		if enc(v) != enc(&base) && sameHead(v, &base) {
			t.Errorf("change %d goes unseen:\n%s\nagainst\n%s", i, enc(v), enc(&base))
		}
	}
	if places < 60 {
		t.Fatalf("only %d places changed", places)
	}
}
