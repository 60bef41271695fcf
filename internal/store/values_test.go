package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

func TestValueEncoding(t *testing.T) {
	big := []byte(`{"name":"` + strings.Repeat("arn:aws:ecs:us-east-1:000000000000:task/c/", 20) + `","n":1}`)
	noise := make([]byte, 600)
	rand.Read(noise)
	// s2 finds no repeats in random hex and has no entropy coder.
	random := []byte(`"` + hex.EncodeToString(noise) + `"`)
	for _, tc := range []struct {
		name       string
		in         []byte
		compressed bool
	}{
		{"empty", []byte{}, false},
		{"small stays plain", []byte(`{"name":"x","n":1}`), false},
		{"large and repetitive is compressed", big, true},
		{"incompressible stays plain", random, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Clone(tc.in)
			enc := encodeValue(in)
			if got := len(enc) > 0 && enc[0] == compressedMark; got != tc.compressed {
				t.Fatalf("compressed = %v, want %v (%d → %d bytes)", got, tc.compressed, len(tc.in), len(enc))
			}
			if tc.compressed && len(enc) > len(tc.in)-len(tc.in)/8 {
				t.Fatalf("kept compressed at %d of %d bytes: saves less than an eighth", len(enc), len(tc.in))
			}
			out, err := decodeValue([]byte(enc))
			if err != nil || !bytes.Equal(out, tc.in) {
				t.Fatalf("round trip: %q, %v", out, err)
			}
		})
	}
	if _, err := decodeValue([]byte{compressedMark, 0xff, 0xff, 0xff}); err == nil {
		t.Fatal("a corrupt compressed value decoded without error")
	}
}

type bigObj struct {
	Name  string   `json:"name"`
	Items []string `json:"items"`
}

func bigValue(n int) bigObj {
	v := bigObj{Name: "task"}
	for i := range n {
		v.Items = append(v.Items, "arn:aws:ecs:us-east-1:000000000000:container/c/"+strings.Repeat("x", i%7))
	}
	return v
}

// Large records go to etcd compressed; every way of reading them (the
// cache, a watch, a cold read, a reload) sees the JSON, and plain values
// an earlier version wrote are read as they are.
func TestLargeValuesAreStoredCompressed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	want := bigValue(40)
	plain, _ := json.Marshal(want)
	sub := s.Subscribe("events/")
	defer sub.Close()
	if _, err := s.Txn().Create("tasks/c/big", want).Create("events/c/01", want).Create("tasks/c/small", obj{"s", 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// What an earlier version wrote: plain JSON, however large.
	put, err := s.client.Put(ctx, s.prefix+"tasks/c/old", string(plain))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.client.Get(ctx, s.prefix+"tasks/c/big")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("raw read: %v", err)
	}
	if v := raw.Kvs[0].Value; v[0] != compressedMark || len(v) >= len(plain)/2 {
		t.Fatalf("etcd holds %d bytes starting %#x for %d bytes of JSON: want it compressed", len(v), v[0], len(plain))
	}
	// Written past the store, so Sync does not know of it: wait for its revision.
	if err := s.WaitFor(ctx, put.Header.Revision); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store, when string) {
		t.Helper()
		for _, key := range []string{"tasks/c/big", "events/c/01", "tasks/c/old"} {
			it, err := Get[bigObj](ctx, s, key)
			if err != nil || it.Value.Name != want.Name || len(it.Value.Items) != len(want.Items) {
				t.Fatalf("%s: get %s: %+v %v", when, key, it.Value.Name, err)
			}
		}
		if it, err := Get[obj](ctx, s, "tasks/c/small"); err != nil || it.Value.N != 1 {
			t.Fatalf("%s: small record: %+v %v", when, it, err)
		}
		vals, err := ListRaw(ctx, s, "tasks/c/")
		if err != nil || len(vals) != 3 {
			t.Fatalf("%s: raw list: %d %v", when, len(vals), err)
		}
		for _, v := range vals {
			if v[0] != '{' {
				t.Fatalf("%s: ListRaw gave %q, want JSON", when, v[:8])
			}
		}
	}
	check(s, "cached")
	chs, _, err := sub.Next(ctx)
	if err != nil || len(chs) != 1 || !bytes.Equal(chs[0].Value, plain) {
		t.Fatalf("watched change of a cold record: %d changes %v", len(chs), err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	check(s, "after reload")
}
