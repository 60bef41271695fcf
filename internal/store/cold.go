package store

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// fillCold reads from etcd the values of the entries of kvs (in key order)
// the cache keeps no value for, one range per run of them. An entry
// deleted since the cache's read is dropped; one written since is read as
// it is now, a moment later than the rest.
func (s *Store) fillCold(ctx context.Context, kvs []kv) ([]kv, error) {
	out := kvs[:0]
	for i := 0; i < len(kvs); {
		if !kvs[i].cold {
			out = append(out, kvs[i])
			i++
			continue
		}
		j := i + 1
		for j < len(kvs) && kvs[j].cold {
			j++
		}
		opts := []clientv3.OpOption{}
		if j-i > 1 {
			opts = append(opts, clientv3.WithRange(kvs[j-1].key+"\x00"))
		}
		resp, err := s.get(ctx, kvs[i].key, opts...)
		if err != nil {
			return nil, fmt.Errorf("read %s from etcd: %w", kvs[i].key[len(s.prefix):], err)
		}
		// Both in key order: one merge.
		k := 0
		for _, e := range kvs[i:j] {
			for k < len(resp.Kvs) && string(resp.Kvs[k].Key) < e.key {
				k++
			}
			if k == len(resp.Kvs) || string(resp.Kvs[k].Key) != e.key {
				continue
			}
			// As etcd holds it, as the cache's values are.
			e.value, e.rev, e.cold = resp.Kvs[k].Value, resp.Kvs[k].ModRevision, false
			out = append(out, e)
		}
		i = j
	}
	return out, nil
}
