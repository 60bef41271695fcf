package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/s2"
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
			if got := len(enc) > 0 && compressed([]byte(enc)); got != tc.compressed {
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
	if v := raw.Kvs[0].Value; v[0] != dictMark || len(v) >= len(plain)/2 {
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

// valueSeen records the values an index is handed.
type valueSeen struct {
	mu   sync.Mutex
	seen map[string][]byte
}

func (v *valueSeen) Reset() {}
func (v *valueSeen) Put(key string, value []byte, _ int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil {
		v.seen = map[string][]byte{}
	}
	v.seen[key] = bytes.Clone(value)
}
func (v *valueSeen) Delete(string) {}

// The cache keeps large values compressed, as etcd holds them; readers
// (one at a time or many at once), indexes and reloads still see JSON, and
// a value that cannot be decompressed fails only its own reads, by name.
func TestCacheKeepsValuesCompressed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	const n = 40
	want := map[string][]byte{}
	txn := s.Txn()
	for i := range n {
		v := bigValue(30 + i)
		v.Name = fmt.Sprintf("task-%02d", i)
		key := fmt.Sprintf("tasks/c/%02d", i)
		want[key], _ = json.Marshal(v)
		txn.Create(key, v)
	}
	early := &valueSeen{}
	s.AddIndex("tasks/", early) // fed from here on
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	late := &valueSeen{}
	s.AddIndex("tasks/", late) // fed by a replay of the cache
	for key, plain := range want {
		e, ok := s.cache.get(s.prefix + key)
		if !ok || !compressed(e.value) || len(e.value) >= len(plain)/2 {
			t.Fatalf("%s: cache holds %d bytes for %d of JSON: want it compressed", key, len(e.value), len(plain))
		}
		for name, ix := range map[string]*valueSeen{"watch": early, "replay": late} {
			if got := ix.seen[key]; !bytes.Equal(got, plain) {
				t.Fatalf("%s: index fed by the %s got %.20q, want the JSON", key, name, got)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for r := range 50 {
				key := fmt.Sprintf("tasks/c/%02d", (g*7+r)%n)
				it, err := Get[bigObj](ctx, s, key)
				if err == nil && (it.Value.Name != "task-"+key[len(key)-2:] || len(it.Value.Items) != 30+(g*7+r)%n) {
					err = fmt.Errorf("%s: read %s with %d items", key, it.Value.Name, len(it.Value.Items))
				}
				if err == nil && r%10 == 0 {
					var items []Item[bigObj]
					if items, _, err = List[bigObj](ctx, s, "tasks/c/", "", 0); err == nil && len(items) != n {
						err = fmt.Errorf("listed %d, want %d", len(items), n)
					}
					for i, it := range items {
						if err == nil && it.Value.Name != fmt.Sprintf("task-%02d", i) {
							err = fmt.Errorf("listed %s at %d", it.Value.Name, i)
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Written past the store: a compressed value that is not.
	put, err := s.client.Put(ctx, s.prefix+"tasks/c/zz-bad", string([]byte{compressedMark, 0xff, 0xff, 0xff}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitFor(ctx, put.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := Get[bigObj](ctx, s, "tasks/c/zz-bad"); err == nil || !strings.Contains(err.Error(), "tasks/c/zz-bad") {
		t.Fatalf("corrupt value: %v, want an error naming its key", err)
	}
	if _, err := ListRaw(ctx, s, "tasks/c/"); err == nil || !strings.Contains(err.Error(), "tasks/c/zz-bad") {
		t.Fatalf("raw list over a corrupt value: %v, want an error naming its key", err)
	}
	if it, err := Get[bigObj](ctx, s, "tasks/c/07"); err != nil || it.Value.Name != "task-07" {
		t.Fatalf("a good record beside the corrupt one: %+v %v", it.Value.Name, err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	e, ok := s.cache.get(s.prefix + "tasks/c/03")
	if !ok || !compressed(e.value) {
		t.Fatal("after a reload the cache holds the value decompressed")
	}
	if it, err := Get[bigObj](ctx, s, "tasks/c/03"); err != nil || it.Value.Name != "task-03" {
		t.Fatalf("after a reload: %+v %v", it.Value.Name, err)
	}
}

// A task record of another cluster, region and account than the
// dictionary's, with its own identifiers.
var otherTask = []byte(`{"availabilityZone":"eu-west-2b","capacityProviderName":"payments-m6i","clusterArn":"arn:aws:ecs:eu-west-2:123456789012:cluster/payments-prod","containerInstanceArn":"arn:aws:ecs:eu-west-2:123456789012:container-instance/payments-prod/9c3e1f7a2b4d4e6f8a0b1c2d3e4f5a6b","containers":[{"containerArn":"arn:aws:ecs:eu-west-2:123456789012:container/payments-prod/4b7d9e1f3a5c4e7f9b1d3f5a7c9e1b3d/e2a4c6e8f0a24c6e8a0c2e4a6c8e0a2c","cpu":"256","image":"registry.internal/payments/api:2026.12.1","imageDigest":"sha256:4f2a9c7e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5a","lastStatus":"RUNNING","memory":"512","name":"api","networkBindings":[{"bindIP":"0.0.0.0","containerPort":8080,"hostPort":32768,"protocol":"tcp"}],"runtimeId":"7e9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a","taskArn":"arn:aws:ecs:eu-west-2:123456789012:task/payments-prod/4b7d9e1f3a5c4e7f9b1d3f5a7c9e1b3d"}],"cpu":"256","createdAt":1796601123.456,"desiredStatus":"RUNNING","group":"service:payments-api","healthStatus":"HEALTHY","lastStatus":"RUNNING","launchType":"EC2","memory":"512","overrides":{"containerOverrides":[]},"pullStartedAt":1796601124.1,"pullStoppedAt":1796601127.9,"startedAt":1796601128.35,"startedBy":"ecs-svc/8412236590817731204","taskArn":"arn:aws:ecs:eu-west-2:123456789012:task/payments-prod/4b7d9e1f3a5c4e7f9b1d3f5a7c9e1b3d","taskDefinitionArn":"arn:aws:ecs:eu-west-2:123456789012:task-definition/payments-api:41","version":4,"capstanId":"4b7d9e1f3a5c4e7f9b1d3f5a7c9e1b3d","capstanCluster":"payments-prod","capstanInstanceId":"9c3e1f7a2b4d4e6f8a0b1c2d3e4f5a6b","capstanKind":"service","capstanReserved":{"cpu":256,"memory":512,"ports":["tcp/32768"]},"capstanStateSeq":5}`)

// The dictionary earns its keep on records it was not made from: s2 alone
// keeps a task record at ~60% of its JSON.
func TestDictionaryCompressesOtherClustersRecords(t *testing.T) {
	enc := encodeValue(bytes.Clone(otherTask))
	if enc[0] != dictMark {
		t.Fatalf("mark %#x, want %#x", enc[0], dictMark)
	}
	plain := 1 + len(s2.Encode(nil, otherTask))
	if ratio := float64(len(enc)) / float64(len(otherTask)); ratio > 0.45 || len(enc) >= plain*3/4 {
		t.Fatalf("task record: %d bytes of JSON → %d with the dictionary (%.2f), %d without", len(otherTask), len(enc), ratio, plain)
	}
	out, err := decodeValue([]byte(enc))
	if err != nil || !bytes.Equal(out, otherTask) {
		t.Fatalf("round trip: %v", err)
	}
}

// Values written against the dictionary are read with it forever: neither
// its content nor its reading may change. The golden value was written by
// the version that introduced it; an earlier version's s2-only value still
// reads too.
func TestDictionaryIsFrozen(t *testing.T) {
	if sum := fmt.Sprintf("%x", sha256.Sum256(dictText)); sum != dictSHA256 {
		t.Fatalf("values.dict changed (sha256 %s, was %s): values already written cannot be read; add a new dictionary under a new mark instead", sum, dictSHA256)
	}
	golden, _ := hex.DecodeString(goldenHex)
	out, err := decodeValue(golden)
	if err != nil || !bytes.Equal(out, otherTask) {
		t.Fatalf("golden value: %v\n%s", err, out)
	}
	old := append([]byte{compressedMark}, s2.Encode(nil, otherTask)...)
	if out, err := decodeValue(old); err != nil || !bytes.Equal(out, otherTask) {
		t.Fatalf("s2-only value: %v", err)
	}
	if _, err := decodeValue([]byte{dictMark, 0x40, 0xff, 0xff}); err == nil {
		t.Fatal("a corrupt value decoded without error")
	}
}

const (
	dictSHA256 = "33dae97f348c5231a1daf9a6cf9f909018369c55f3c65a608949d06fb982845b"
	goldenHex  = "019a0d524f042465752d776573742d326209614e54042c7061796d656e74732d6d36696e6004154c303a313233343536373839303132956015470c70726f642e0e0431004681015e5200466604325d00802f39633365316637613262346434653666386130623163326433653466356136622e7e00828c047e85003a7c00f04034623764396531663361356334653766396231643366356137633965316233642f653261346336653866306132346336653861306332653461366338653061326395d2083235369dd24072656769737472792e696e7465726e616c1578342f6170693a323032362e31322e315efa04bc34663261396337653162336435663761396331653362356437663961316333653562376439663161336335653762396409c204376511c0663a04517b0c22353132b93a08617069523d05447b2262696e644950223a22302e302e302e302e8e01a8506f7274223a383038302c22686f7374506f7274223a33323736382c2270726f746f636f6c223a2274637016971cbd8804376596ca00318a3e0601624f045a02020c7461736b358596fd01bdee29de3aee05243630313132332e343536aeee05158429743afa05184845414c54485915002e083531321500341c3630313132342e3152f8051c3630313132372e39b5ddb1f7203630313132382e3335151a32f705483834313232333635393038313737333132303431bb15005409630044b5f8a2af043e30062eaf01043a3432c6133a3f06824f02152f0043a9652eae05b1674a65068e20050937a2850608323536d985603531322c22706f727473223a5b227463702f3332373638225dc19b15000804357d"
)

// Large values are compressed without the dictionary (its encoder is the
// slower), small ones with it.
func TestLargeValuesSkipTheDictionary(t *testing.T) {
	var page bytes.Buffer
	page.WriteString(`{"events":[`)
	for i := 0; page.Len() <= dictMax; i++ {
		fmt.Fprintf(&page, `{"id":"%d","message":"(service payments-api) has started 1 tasks: (task %032x).","createdAt":%d},`, i, i*7919, 1796601123+i)
	}
	page.WriteString(`{}]}`)
	enc := encodeValue(bytes.Clone(page.Bytes()))
	if enc[0] != compressedMark || len(enc) > page.Len()/3 {
		t.Fatalf("a %d-byte page: mark %#x, %d bytes; want s2 without the dictionary", page.Len(), enc[0], len(enc))
	}
	if out, err := decodeValue([]byte(enc)); err != nil || !bytes.Equal(out, page.Bytes()) {
		t.Fatalf("round trip: %v", err)
	}
}

// Values encoded side by side each get their own encoding back (the
// dictionary's encoder runs on goroutines of its own).
func TestConcurrentEncodesKeepTheirOwnValues(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				v := bytes.ReplaceAll(otherTask, []byte("4b7d9e1f3a5c"), fmt.Appendf(nil, "%06d%06d", g, i))
				enc := encodeValue(bytes.Clone(v))
				out, err := decodeValue([]byte(enc))
				if err != nil || enc[0] != dictMark || !bytes.Equal(out, v) {
					errs <- fmt.Errorf("goroutine %d value %d: mark %#x, %v", g, i, enc[0], err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
