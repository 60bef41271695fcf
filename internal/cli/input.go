package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// readInputFile decodes a request file (the JSON the AWS CLI takes with
// --cli-input-json) into an SDK input struct. "-" reads standard input.
func readInputFile(path string, stdin io.Reader, in any) error {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return err
	}
	if err := decodeInput(data, in); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// decodeInput fills in (a pointer to an SDK struct) from JSON.
//
// The SDK structs carry no json tags and their Go names are the model's member
// names with the first letter upper-cased, so members match fields without
// regard to case. encoding/json would do that too, but it silently drops
// unknown members (a typo would be lost, not reported) and cannot read epoch
// timestamps, so the walk is done here.
func decodeInput(data []byte, in any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			// Offset counts the bytes read, the one at fault included.
			return fmt.Errorf("not valid JSON at %s: %w", position(data, se.Offset-1), err)
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return fmt.Errorf("not valid JSON at %s: the document ends early", position(data, int64(len(data))))
		}
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if dec.More() {
		next := dec.InputOffset() + int64(len(data[dec.InputOffset():])-len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")))
		return fmt.Errorf("not valid JSON at %s: more than one value", position(data, next))
	}
	if _, ok := doc.(map[string]any); !ok {
		return errors.New("must be a JSON object")
	}
	d := &decoder{}
	d.value("", reflect.ValueOf(in).Elem(), doc)
	if len(d.unknown) > 0 {
		msg := "unknown member"
		if len(d.unknown) > 1 {
			msg += "s"
		}
		msg += " " + strings.Join(d.unknown, ", ")
		if hint := wrapperHint(d.unknown); hint != "" {
			msg += " (" + hint + ")"
		}
		d.errs = append([]string{msg}, d.errs...)
	}
	if len(d.errs) > 0 {
		return errors.New(strings.Join(d.errs, "; "))
	}
	return nil
}

// position is "line L, column C" (both from 1, columns in bytes) of the
// byte at index i of data.
func position(data []byte, i int64) string {
	before := data[:max(0, min(i, int64(len(data))))]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return fmt.Sprintf("line %d, column %d", line, col)
}

// wrapperHint recognises describe output passed where a request belongs.
func wrapperHint(unknown []string) string {
	for _, u := range unknown {
		switch u {
		case "taskDefinition", "daemonTaskDefinition", "capacityProvider":
			return fmt.Sprintf("this looks like describe output; pass the object inside %q without its read-only members", u)
		}
	}
	return ""
}

type decoder struct {
	unknown []string
	errs    []string
}

func (d *decoder) fail(path, format string, args ...any) {
	if path == "" {
		path = "(top level)"
	}
	d.errs = append(d.errs, path+": "+fmt.Sprintf(format, args...))
}

var timeType = reflect.TypeFor[time.Time]()

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func (d *decoder) value(path string, dst reflect.Value, src any) {
	if src == nil {
		return // null means absent, as the AWS CLI treats it
	}
	t := dst.Type()
	switch {
	case t == timeType:
		d.time(path, dst, src)
		return
	case t.Kind() == reflect.Pointer:
		v := reflect.New(t.Elem())
		d.value(path, v.Elem(), src)
		dst.Set(v)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		d.object(path, dst, src)
	case reflect.String:
		s, ok := src.(string)
		if !ok {
			d.fail(path, "want a string, got %s", jsonKind(src))
			return
		}
		dst.SetString(s)
	case reflect.Bool:
		b, ok := src.(bool)
		if !ok {
			d.fail(path, "want true or false, got %s", jsonKind(src))
			return
		}
		dst.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := src.(json.Number)
		if !ok {
			d.fail(path, "want an integer, got %s", jsonKind(src))
			return
		}
		i, err := strconv.ParseInt(string(n), 10, t.Bits())
		if err != nil {
			d.fail(path, "want an integer that fits %d bits, got %s", t.Bits(), n)
			return
		}
		dst.SetInt(i)
	case reflect.Float32, reflect.Float64:
		n, ok := src.(json.Number)
		if !ok {
			d.fail(path, "want a number, got %s", jsonKind(src))
			return
		}
		f, err := strconv.ParseFloat(string(n), t.Bits())
		if err != nil {
			d.fail(path, "want a number, got %s", n)
			return
		}
		dst.SetFloat(f)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // blob
			s, ok := src.(string)
			b, err := base64.StdEncoding.DecodeString(s)
			if !ok || err != nil {
				d.fail(path, "want a base64 string")
				return
			}
			dst.SetBytes(b)
			return
		}
		list, ok := src.([]any)
		if !ok {
			d.fail(path, "want an array, got %s", jsonKind(src))
			return
		}
		out := reflect.MakeSlice(t, len(list), len(list))
		for i, e := range list {
			d.value(fmt.Sprintf("%s[%d]", path, i), out.Index(i), e)
		}
		dst.Set(out)
	case reflect.Map:
		m, ok := src.(map[string]any)
		if !ok || t.Key().Kind() != reflect.String {
			d.fail(path, "want an object, got %s", jsonKind(src))
			return
		}
		out := reflect.MakeMapWithSize(t, len(m))
		for _, k := range sortedKeys(m) {
			v := reflect.New(t.Elem()).Elem()
			d.value(path+"."+k, v, m[k])
			out.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), v)
		}
		dst.Set(out)
	default:
		// Unions and documents do not occur in the requests this CLI reads.
		d.fail(path, "this member cannot be given in a file (%s)", t)
	}
}

func (d *decoder) object(path string, dst reflect.Value, src any) {
	m, ok := src.(map[string]any)
	if !ok {
		d.fail(path, "want an object, got %s", jsonKind(src))
		return
	}
	t := dst.Type()
	byName := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if f.IsExported() && !f.Anonymous {
			byName[strings.ToLower(f.Name)] = i
		}
	}
	for _, k := range sortedKeys(m) {
		p := k
		if path != "" {
			p = path + "." + k
		}
		i, ok := byName[strings.ToLower(k)]
		if !ok {
			d.unknown = append(d.unknown, p)
			continue
		}
		d.value(p, dst.Field(i), m[k])
	}
}

// time accepts epoch seconds (the wire form) or RFC 3339 (what -o json prints).
func (d *decoder) time(path string, dst reflect.Value, src any) {
	switch v := src.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err == nil {
			sec := int64(f)
			dst.Set(reflect.ValueOf(time.Unix(sec, int64((f-float64(sec))*1e9))))
			return
		}
	case string:
		t, err := time.Parse(time.RFC3339Nano, v)
		if err == nil {
			dst.Set(reflect.ValueOf(t))
			return
		}
	}
	d.fail(path, "want a timestamp (epoch seconds or RFC 3339), got %s", jsonKind(src))
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
