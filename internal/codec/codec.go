// Package codec decodes JSON for the hot paths: stored records, agent
// messages, watch changes. It keeps encoding/json's semantics (struct tags,
// Unmarshaler methods, unknown fields ignored) at 35-45% of its cost
// (BenchmarkDecode): at 5,000 instances, decoding with encoding/json took
// a third of the server's CPU. Encoding stays with encoding/json, into
// pooled buffers where the caller only passes the bytes on (Encode).
package codec

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sync"

	segjson "github.com/segmentio/encoding/json"
)

// Unmarshal decodes b into v as encoding/json.Unmarshal would.
func Unmarshal(b []byte, v any) error {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() && rv.Elem().Kind() == reflect.Struct {
		if p := planFor(rv.Elem().Type()); p != nil {
			presizeObject(b, p, rv.UnsafePointer())
		}
	}
	return segjson.Unmarshal(b, v)
}

// Encoded is a value's JSON in a pooled buffer.
type Encoded struct{ buf bytes.Buffer }

var encodedPool = sync.Pool{New: func() any { return new(Encoded) }}

// keepMax bounds the buffers the pool keeps: one large response must not
// stay held by the pool.
const keepMax = 256 << 10

// Encode is json.Marshal(v) without its copy of the result: what a
// caller compresses, writes or copies anyway was allocated twice, and at
// 5,000 instances a rollout's record writes and API responses allocated
// ~650 MB that way. Bytes are valid until Release.
func Encode(v any) (*Encoded, error) {
	e := encodedPool.Get().(*Encoded)
	e.buf.Reset()
	// Marshal's escaping: the Encoder escapes HTML by default as it does.
	if err := json.NewEncoder(&e.buf).Encode(v); err != nil {
		e.Release()
		return nil, err
	}
	e.buf.Truncate(e.buf.Len() - 1) // Encode's newline
	return e, nil
}

// Bytes is the JSON; it must not be kept past Release.
func (e *Encoded) Bytes() []byte { return e.buf.Bytes() }

// Release returns the buffer to the pool.
func (e *Encoded) Release() {
	if e.buf.Cap() > keepMax {
		return
	}
	encodedPool.Put(e)
}
