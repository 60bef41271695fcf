package store

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/btree"
)

// A tree layout under test: the cache's (entries by pointer) or entries
// held in the items themselves, as before, for side-by-side runs.
type layout[T any] struct {
	name string
	make func(key string, e entry) T
	key  func(T) string
	less func(a, b T) bool
}

var (
	pointerLayout = layout[item]{"pointer",
		func(k string, e entry) item { return item{k, &e} },
		func(it item) string { return it.key },
		func(a, b item) bool { return a.key < b.key }}
	inlineLayout = layout[kv]{"inline",
		func(k string, e entry) kv { return kv{k, e} },
		func(it kv) string { return it.key },
		func(a, b kv) bool { return a.key < b.key }}
)

// treeOf is a tree of n keys shaped like a fleet's cache (tasks, desired
// entries, instances) with 1.4 KB values.
func treeOf[T any](l layout[T], degree, n int) (*btree.BTreeG[T], []string) {
	t := btree.NewG(degree, l.less)
	keys := make([]string, n)
	val := make([]byte, 1400)
	for i := range keys {
		kind := []string{"tasks", "desired", "containerinstances"}[i%3]
		keys[i] = fmt.Sprintf("%s/scale/%016x", kind, rand.Uint64())
		t.ReplaceOrInsert(l.make(keys[i], entry{value: val, rev: 1}))
	}
	return t, keys
}

func benchApply[T any](b *testing.B, l layout[T], degree int) {
	t, keys := treeOf(l, degree, 60000)
	val := make([]byte, 1400)
	rnd := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	rev := int64(1)
	for b.Loop() {
		c := t.Clone()
		for range 4 {
			rev++
			c.ReplaceOrInsert(l.make(keys[rnd.IntN(len(keys))], entry{value: val, rev: rev}))
		}
		t = c
	}
}

func benchGet[T any](b *testing.B, l layout[T], degree int) {
	t, keys := treeOf(l, degree, 60000)
	rnd := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		if _, ok := t.Get(l.make(keys[rnd.IntN(len(keys))], entry{})); !ok {
			b.Fatal("missing key")
		}
	}
}

func benchScan[T any](b *testing.B, l layout[T], degree int) {
	t, _ := treeOf(l, degree, 60000)
	for b.Loop() {
		n := 0
		t.AscendGreaterOrEqual(l.make("tasks/", entry{}), func(it T) bool {
			if k := l.key(it); len(k) < 6 || k[:6] != "tasks/" {
				return false
			}
			n++
			return true
		})
		if n != 20000 {
			b.Fatalf("%d keys", n)
		}
	}
}

// The cache tree's costs for each degree with the cache's layout (pointer),
// and for its degree with entries inline, side by side.
func benchLayouts(b *testing.B, pointer, inline func(b *testing.B, degree int)) {
	for _, degree := range []int{8, 16, 32} {
		b.Run(fmt.Sprintf("%s/degree=%d", pointerLayout.name, degree), func(b *testing.B) { pointer(b, degree) })
	}
	b.Run(fmt.Sprintf("%s/degree=%d", inlineLayout.name, treeDegree), func(b *testing.B) { inline(b, treeDegree) })
}

// BenchmarkCacheTreeApply applies watch responses of 4 puts at random keys
// to a copy of a 60,000-key tree, as cache.apply does: the bytes copied
// per response are what the collector pays for.
func BenchmarkCacheTreeApply(b *testing.B) {
	benchLayouts(b, func(b *testing.B, d int) { benchApply(b, pointerLayout, d) }, func(b *testing.B, d int) { benchApply(b, inlineLayout, d) })
}

// BenchmarkCacheTreeGet reads random keys.
func BenchmarkCacheTreeGet(b *testing.B) {
	benchLayouts(b, func(b *testing.B, d int) { benchGet(b, pointerLayout, d) }, func(b *testing.B, d int) { benchGet(b, inlineLayout, d) })
}

// BenchmarkCacheTreeScan walks the 20,000 keys of one kind in order, as
// List and Keys do.
func BenchmarkCacheTreeScan(b *testing.B) {
	benchLayouts(b, func(b *testing.B, d int) { benchScan(b, pointerLayout, d) }, func(b *testing.B, d int) { benchScan(b, inlineLayout, d) })
}
