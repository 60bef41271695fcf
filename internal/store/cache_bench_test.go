package store

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/btree"
)

// treeOf is a cache tree of n keys shaped like a fleet's (tasks, desired
// entries, instances) with 1.4 KB values.
func treeOf(degree, n int) (*btree.BTreeG[kv], []string) {
	t := newTree(degree)
	keys := make([]string, n)
	val := make([]byte, 1400)
	for i := range keys {
		kind := []string{"tasks", "desired", "containerinstances"}[i%3]
		keys[i] = fmt.Sprintf("%s/scale/%016x", kind, rand.Uint64())
		t.ReplaceOrInsert(kv{keys[i], entry{value: val, rev: 1}})
	}
	return t, keys
}

// BenchmarkCacheTreeApply applies watch responses of 4 puts at random keys
// to a copy of a 60,000-key tree, as cache.apply does, for each degree side
// by side: the bytes copied per response are what the collector pays for.
func BenchmarkCacheTreeApply(b *testing.B) {
	for _, degree := range []int{4, 8, 16, 32} {
		b.Run(fmt.Sprintf("degree=%d", degree), func(b *testing.B) {
			t, keys := treeOf(degree, 60000)
			val := make([]byte, 1400)
			rnd := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			rev := int64(1)
			for b.Loop() {
				c := t.Clone()
				for range 4 {
					rev++
					c.ReplaceOrInsert(kv{keys[rnd.IntN(len(keys))], entry{value: val, rev: rev}})
				}
				t = c
			}
		})
	}
}

// BenchmarkCacheTreeGet reads random keys, for each degree side by side.
func BenchmarkCacheTreeGet(b *testing.B) {
	for _, degree := range []int{4, 8, 16, 32} {
		b.Run(fmt.Sprintf("degree=%d", degree), func(b *testing.B) {
			t, keys := treeOf(degree, 60000)
			rnd := rand.New(rand.NewPCG(1, 2))
			for b.Loop() {
				if _, ok := t.Get(kv{key: keys[rnd.IntN(len(keys))]}); !ok {
					b.Fatal("missing key")
				}
			}
		})
	}
}

// BenchmarkCacheTreeScan walks the 20,000 keys of one kind in order, as
// List and Keys do, for each degree side by side.
func BenchmarkCacheTreeScan(b *testing.B) {
	for _, degree := range []int{4, 8, 16, 32} {
		b.Run(fmt.Sprintf("degree=%d", degree), func(b *testing.B) {
			t, _ := treeOf(degree, 60000)
			for b.Loop() {
				n := 0
				t.AscendGreaterOrEqual(kv{key: "tasks/"}, func(it kv) bool {
					if len(it.key) < 6 || it.key[:6] != "tasks/" {
						return false
					}
					n++
					return true
				})
				if n != 20000 {
					b.Fatalf("%d keys", n)
				}
			}
		})
	}
}
