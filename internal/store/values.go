package store

import (
	_ "embed"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/s2"
)

// Values of compressMin bytes or more go to etcd compressed, in s2's block
// format behind a mark byte no JSON value starts with: dictMark for
// values compressed against dict1, compressedMark for those compressed
// without it (larger values, and all an earlier version wrote). Plain
// JSON is read as it is, so a store written by an earlier version opens
// unchanged. Every byte written is marshalled, logged, applied and held
// in raft's memory several times over inside etcd and mapped into the
// server with its database, and the cache keeps values as etcd holds
// them (see entry), so readers decompress them (~0.3 µs a task record).
//
// Records are small and alike: on its own s2 left task records at ~60% of
// their JSON, container instances at ~58%, and records under 300 bytes
// as they were. Against a dictionary of such records it leaves tasks at
// ~32%, container instances at ~16% and placements at ~42%, measured on
// a 200-instance scale run's records in another cluster, region and
// account than the dictionary's (docs/performance-history.md,
// twenty-fourth round).
//
// Larger values (event pages, deployments) are long enough to find their
// own repeats, and gain little from the dictionary (event pages ~19% →
// ~15%); they are compressed without it, by s2's assembly encoder, which
// has none for dictionaries: at 5,000 instances the dictionary's encoder
// took 2.5 s of the server's CPU in a rollout, against 0.4 s for s2's.
const (
	compressMin    = 128
	dictMax        = 4 << 10
	compressedMark = 0x00
	dictMark       = 0x01
)

// dictText is dict1's content: records of each kind the store holds most
// of, as this version writes them, with names and identifiers left out.
// Values written against it can only be read with it: it must never
// change (TestDictionaryIsFrozen). A better one takes a new mark.
//
//go:embed values.dict
var dictText []byte

// dict1 is dictText in s2's serialized dictionary form: the repeat offset
// (0) as a uvarint, then the content. Built from that form, not with
// s2.MakeDict, whose choice of repeat offset could differ between
// versions of the library.
var dict1 = func() *s2.Dict {
	d := s2.NewDict(append([]byte{0}, dictText...))
	if d == nil {
		panic("store: values.dict is not a usable s2 dictionary")
	}
	return d
}()

// encodeValue is what goes to etcd for the JSON value b, which the caller
// must not change afterwards (the string may share its bytes).
func encodeValue(b []byte) string {
	if len(b) >= compressMin {
		scratch := scratchPool.Get().(*[]byte)
		defer scratchPool.Put(scratch)
		if n := 1 + s2.MaxEncodedLen(len(b)); cap(*scratch) < n {
			*scratch = make([]byte, n)
		}
		out := (*scratch)[:cap(*scratch)]
		if len(b) <= dictMax {
			out[0] = dictMark
			out = out[:1+len(dictEncode(out[1:], b))]
		} else {
			out[0] = compressedMark
			out = out[:1+len(s2.Encode(out[1:], b))]
		}
		// Worth a decompression on every read only if it saves an eighth.
		if len(out) <= len(b)-len(b)/8 {
			return string(out) // the one copy, at its compressed size
		}
	}
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// dictEncode is dict1.Encode run on an encoder goroutine. The
// dictionary's encoder keeps its 64 KiB hash table in a local array: run
// on the writer's goroutine, it grew the stacks of the 5,000 agent
// sessions' receivers (which write their tasks' states) from 4 to 128 KiB,
// each until the next collection shrank it, and the growth and the
// collector's pacing on those stacks cost more than the handoff.
func dictEncode(dst, src []byte) []byte {
	encodersOnce.Do(startEncoders)
	j := encodeJobs.Get().(*encodeJob)
	j.dst, j.src = dst, src
	encodeQueue <- j
	<-j.done
	out := j.dst
	j.dst, j.src = nil, nil
	encodeJobs.Put(j)
	return out
}

type encodeJob struct {
	dst, src []byte
	done     chan struct{}
}

var (
	encodeQueue  = make(chan *encodeJob)
	encodersOnce sync.Once
	encodeJobs   = sync.Pool{New: func() any { return &encodeJob{done: make(chan struct{}, 1)} }}
)

// startEncoders starts one encoder per processor; they live as long as
// the process.
func startEncoders() {
	for range runtime.GOMAXPROCS(0) {
		go func() {
			for j := range encodeQueue {
				j.dst = dict1.Encode(j.dst, j.src)
				j.done <- struct{}{}
			}
		}()
	}
}

// scratchPool holds compression buffers: a value is compressed into one,
// then copied out at its final size.
var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

// compressed reports whether v, as etcd holds it, is compressed.
func compressed(v []byte) bool {
	return len(v) > 0 && (v[0] == compressedMark || v[0] == dictMark)
}

// decompress is decodeValue into dst's memory if it is large enough.
func decompress(dst, v []byte) ([]byte, error) {
	var b []byte
	var err error
	if v[0] == dictMark {
		b, err = dict1.Decode(dst, v[1:])
	} else {
		b, err = s2.Decode(dst, v[1:])
	}
	if err != nil {
		return nil, fmt.Errorf("decompress value: %w", err)
	}
	return b, nil
}

// withJSON calls fn with the JSON of v, a value as etcd holds it: a
// compressed one is decompressed into a pooled buffer, which fn must not
// keep (a decoder copies what it keeps, as encoding/json's contract
// asks of Unmarshalers too).
func withJSON(v []byte, fn func([]byte) error) error {
	if !compressed(v) {
		return fn(v)
	}
	buf := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(buf)
	b, err := decompress((*buf)[:cap(*buf)], v)
	if err != nil {
		return err
	}
	if cap(b) > cap(*buf) {
		*buf = b
	}
	return fn(b)
}

// decodeValue is the JSON value of what etcd holds.
func decodeValue(v []byte) ([]byte, error) {
	if !compressed(v) {
		return v, nil
	}
	return decompress(nil, v)
}
