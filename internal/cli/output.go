package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/document"
	smithydocumentjson "github.com/aws/smithy-go/document/json"
)

// marshalShape renders an SDK value as indented JSON through its generated
// Serialize method, so keys are the ECS member names (what the AWS CLI prints
// and what -f accepts) rather than Go field names. Response metadata is not a
// modelled member and never appears.
func marshalShape(v smithy.Serializable) ([]byte, error) {
	w := &shapeWriter{}
	v.Serialize(w)
	if w.root == nil {
		w.root = &object{}
	}
	addZeros(reflect.ValueOf(v), w.root)
	flat, err := json.Marshal(w.root)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, flat, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// addZeros puts back the numbers and booleans the SDK serializer leaves out
// when they are zero (it cannot tell 0 from unset in non-pointer fields), so
// a script reading totalRunningCount gets 0 rather than null. Members are
// named from the struct's schema, never guessed from Go names.
func addZeros(v reflect.Value, node any) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Struct:
		o, ok := node.(*object)
		if !ok || o.schema == nil || v.Type() == reflect.TypeFor[time.Time]() {
			return
		}
		members := o.schema.Members()
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Anonymous {
				continue
			}
			name := ""
			for m := range members {
				if strings.EqualFold(m, f.Name) {
					name = m
					break
				}
			}
			if name == "" {
				continue // not a modelled member (ResultMetadata)
			}
			fv := v.Field(i)
			if j := slices.Index(o.keys, name); j >= 0 {
				addZeros(fv, o.vals[j])
				continue
			}
			switch fv.Kind() {
			case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Float32, reflect.Float64:
				o.keys = append(o.keys, name)
				o.vals = append(o.vals, fv.Interface())
			}
		}
	case reflect.Slice:
		if a, ok := node.(*array); ok && v.Type().Elem().Kind() != reflect.Uint8 {
			for i := 0; i < v.Len() && i < len(a.items); i++ {
				addZeros(v.Index(i), a.items[i])
			}
		}
	case reflect.Map:
		if o, ok := node.(*object); ok && v.Type().Key().Kind() == reflect.String {
			for i, k := range o.keys {
				if e := v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key())); e.IsValid() {
					addZeros(e, o.vals[i])
				}
			}
		}
	}
}

// object is a JSON object; its keys print sorted, which is the order the
// generated serializers use anyway and makes map output stable.
type object struct {
	schema *smithy.Schema // of a structure, for addZeros
	keys   []string
	vals   []any
}

func (o *object) MarshalJSON() ([]byte, error) {
	idx := make([]int, len(o.keys))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return o.keys[idx[a]] < o.keys[idx[b]] })
	var b bytes.Buffer
	b.WriteByte('{')
	for n, i := range idx {
		k := o.keys[i]
		if n > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

type array struct{ items []any }

func (a *array) MarshalJSON() ([]byte, error) {
	if a.items == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(a.items)
}

// shapeWriter is a smithy.ShapeSerializer that builds a JSON tree.
type shapeWriter struct {
	root   any
	stack  []any // *object or *array
	key    string
	hasKey bool
}

var _ smithy.ShapeSerializer = (*shapeWriter)(nil)

func (w *shapeWriter) put(s *smithy.Schema, v any) {
	if len(w.stack) == 0 {
		w.root = v
		return
	}
	switch c := w.stack[len(w.stack)-1].(type) {
	case *array:
		c.items = append(c.items, v)
	case *object:
		k := ""
		if w.hasKey {
			k, w.hasKey = w.key, false
		} else if s != nil {
			k = s.MemberName()
		}
		c.keys = append(c.keys, k)
		c.vals = append(c.vals, v)
	}
}

func (w *shapeWriter) open(s *smithy.Schema, c any) {
	w.put(s, c)
	w.stack = append(w.stack, c)
}

func (w *shapeWriter) close() { w.stack = w.stack[:len(w.stack)-1] }

func (w *shapeWriter) Bytes() []byte {
	b, _ := json.Marshal(w.root)
	return b
}

func (w *shapeWriter) WriteInt8(s *smithy.Schema, v int8)   { w.put(s, v) }
func (w *shapeWriter) WriteInt16(s *smithy.Schema, v int16) { w.put(s, v) }
func (w *shapeWriter) WriteInt32(s *smithy.Schema, v int32) { w.put(s, v) }
func (w *shapeWriter) WriteInt64(s *smithy.Schema, v int64) { w.put(s, v) }
func (w *shapeWriter) WriteFloat32(s *smithy.Schema, v float32) {
	w.WriteFloat64(s, float64(v))
}
func (w *shapeWriter) WriteFloat64(s *smithy.Schema, v float64) {
	switch {
	case math.IsNaN(v):
		w.put(s, "NaN")
	case math.IsInf(v, 1):
		w.put(s, "Infinity")
	case math.IsInf(v, -1):
		w.put(s, "-Infinity")
	default:
		w.put(s, json.Number(strconv.FormatFloat(v, 'g', -1, 64)))
	}
}
func (w *shapeWriter) WriteBool(s *smithy.Schema, v bool)       { w.put(s, v) }
func (w *shapeWriter) WriteString(s *smithy.Schema, v string)   { w.put(s, v) }
func (w *shapeWriter) WriteBigInt(s *smithy.Schema, v *big.Int) { w.put(s, json.Number(v.String())) }
func (w *shapeWriter) WriteBigFloat(s *smithy.Schema, v *big.Float) {
	w.put(s, json.Number(v.Text('g', -1)))
}
func (w *shapeWriter) WriteBlob(s *smithy.Schema, v []byte) {
	w.put(s, base64.StdEncoding.EncodeToString(v))
}

// WriteTime prints local RFC 3339, like the tables; -f accepts it back.
func (w *shapeWriter) WriteTime(s *smithy.Schema, v time.Time) {
	w.put(s, v.Local().Format(time.RFC3339Nano))
}

func (w *shapeWriter) WriteUnion(s, _ *smithy.Schema) { w.open(s, &object{}) }
func (w *shapeWriter) CloseUnion()                    { w.close() }
func (w *shapeWriter) WriteNil(s *smithy.Schema)      { w.put(s, nil) }
func (w *shapeWriter) WriteStruct(s *smithy.Schema)   { w.open(s, &object{schema: s}) }
func (w *shapeWriter) CloseStruct()                   { w.close() }
func (w *shapeWriter) WriteList(s *smithy.Schema)     { w.open(s, &array{items: []any{}}) }
func (w *shapeWriter) CloseList()                     { w.close() }
func (w *shapeWriter) WriteMap(s *smithy.Schema)      { w.open(s, &object{}) }
func (w *shapeWriter) WriteKey(_ *smithy.Schema, k string) {
	w.key, w.hasKey = k, true
}
func (w *shapeWriter) CloseMap() { w.close() }

func (w *shapeWriter) WriteDocument(s *smithy.Schema, v document.Value) {
	w.put(s, documentValue(v))
}

func documentValue(v document.Value) any {
	switch d := v.(type) {
	case document.Boolean:
		return bool(d)
	case document.Number:
		return json.Number(d)
	case document.String:
		return string(d)
	case document.Blob:
		return base64.StdEncoding.EncodeToString(d)
	case document.Timestamp:
		return time.Time(d).Local().Format(time.RFC3339Nano)
	case document.List:
		out := make([]any, len(d))
		for i, e := range d {
			out[i] = documentValue(e)
		}
		return out
	case document.Map:
		out := make(map[string]any, len(d))
		for k, e := range d {
			out[k] = documentValue(e)
		}
		return out
	case document.Structure:
		out := make(map[string]any, len(d.Members))
		for k, e := range d.Members {
			out[k] = documentValue(e)
		}
		return out
	case document.Opaque:
		return opaqueValue(d.Value)
	case *document.Opaque:
		return opaqueValue(d.Value)
	}
	return nil
}

func opaqueValue(v any) any {
	var raw []byte
	if m, ok := v.(document.Marshaler); ok {
		raw, _ = m.MarshalSmithyDocument()
	} else {
		raw, _ = smithydocumentjson.NewEncoder().Encode(v)
	}
	if !json.Valid(raw) {
		return nil
	}
	return json.RawMessage(raw)
}

// Table helpers. Columns are fixed per command so scripts that scrape the
// table (they should use -o json) at least see a stable order.

func newTable(w io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(header) > 0 {
		row(tw, header...)
	}
	return tw
}

func row(tw *tabwriter.Writer, cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
		// A tab or newline in a value would break the columns.
		cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(cells[i])
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
}

// fields prints "Label:  value" lines for describe output.
type fields struct{ tw *tabwriter.Writer }

func newFields(w io.Writer) fields { return fields{tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)} }

func (f fields) add(label, value string) {
	if value == "" {
		value = "-"
	}
	fmt.Fprintf(f.tw, "%s:\t%s\n", label, value)
}

func (f fields) flush() { f.tw.Flush() }

func ts(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.Local().Format(time.RFC3339)
}

func str(s *string) string { return aws.ToString(s) }

func i32(p *int32) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(int(*p))
}

func boolText(p *bool) string {
	if p == nil {
		return ""
	}
	return strconv.FormatBool(*p)
}

func tagText[T any](tags []T, kv func(T) (string, string)) string {
	parts := make([]string, 0, len(tags))
	for _, t := range tags {
		k, v := kv(t)
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// lastSegment returns what follows the last '/' of an ARN (a name or id).
func lastSegment(arn string) string {
	if i := strings.LastIndexByte(arn, '/'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

// familyRevision splits ".../family:rev" from a task definition ARN.
func familyRevision(arn string) (string, string) {
	s := lastSegment(arn)
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// printRaw prints an extension operation's JSON answer indented, as -o json
// shows the ECS operations' answers.
func (s *session) printRaw(raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := s.stdout.Write(b.Bytes())
	return err
}
