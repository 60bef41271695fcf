package store

import (
	"context"
	"strings"
)

// Indexer keeps a derived view of the state (counts, free resources) that
// would otherwise be recomputed from every record on every read. The cache
// hands it each change before it moves its revision on, so a read after
// Sync sees the index as current as the cache. Its methods must be quick
// and must not call the store.
type Indexer interface {
	// Reset forgets everything: the cache reloaded. Every key follows as
	// a Put.
	Reset()
	Put(key string, value []byte, rev int64)
	Delete(key string)
}

// AddIndex feeds ix every key under prefix now and every change from here
// on.
func (s *Store) AddIndex(prefix string, ix Indexer) {
	for _, p := range coldPrefixes {
		if strings.HasPrefix(prefix, p) || strings.HasPrefix(p, prefix) {
			panic("store: an index under " + p + ", whose values the cache does not keep")
		}
	}
	c := s.cache
	c.ixmu.Lock()
	defer c.ixmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.indexes = append(c.indexes, index{prefix: prefix, ix: ix})
	c.replay(index{prefix: prefix, ix: ix})
}

// Sync waits until the cache, and so every index, reflects every write
// this process has committed.
func (s *Store) Sync(ctx context.Context) error { return s.sync(ctx) }

type index struct {
	prefix string
	ix     Indexer
}

// replay fills one index from the tree; c.ixmu and c.mu are held.
func (c *cache) replay(x index) {
	x.ix.Reset()
	full := c.prefix + x.prefix
	c.tree.Load().AscendGreaterOrEqual(item{key: full}, func(it item) bool {
		if !strings.HasPrefix(it.key, full) {
			return false
		}
		x.ix.Put(it.key[len(c.prefix):], c.stored(it.key, it.e.value), it.e.rev)
		return true
	})
}

// BatchIndexer is an Indexer that takes a watch response's changes under
// its prefix at once, in order (to take its own lock once for them all).
type BatchIndexer interface {
	Indexer
	Apply(changes []Change)
}

// indexChanges hands a watch response's changes to the indexes, each
// index its own in order; c.ixmu is held.
func (c *cache) indexChanges(changes []Change) {
	var mine []Change
	for _, x := range c.indexes {
		b, ok := x.ix.(BatchIndexer)
		if !ok {
			for _, ch := range changes {
				c.indexChange(x, ch)
			}
			continue
		}
		mine = mine[:0]
		for _, ch := range changes {
			if strings.HasPrefix(ch.Key, x.prefix) {
				mine = append(mine, ch)
			}
		}
		if len(mine) > 0 {
			b.Apply(mine)
		}
	}
}

// indexChange hands one change to index x if it is under its prefix;
// c.ixmu is held.
func (c *cache) indexChange(x index, ch Change) {
	if !strings.HasPrefix(ch.Key, x.prefix) {
		return
	}
	if ch.Deleted {
		x.ix.Delete(ch.Key)
	} else {
		x.ix.Put(ch.Key, ch.Value, ch.Rev)
	}
}
