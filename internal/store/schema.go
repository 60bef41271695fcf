package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SchemaVersion is the version of the stored data this build writes. A
// change to what records mean, or one an older server would undo by
// rewriting a record (records are decoded into this build's structs, so a
// field an older build lacks is dropped when it writes the record back),
// takes a new version and a step in migrations.
const SchemaVersion = 1

// schemaKey holds the data's schemaRecord, under the store's prefix.
const schemaKey = "schema"

// schemaRecord says which version wrote the data, and the oldest version
// that may still run against it: a server of version v opens data of a
// newer version only when MinVersion <= v. A version whose records an
// older server may rewrite safely keeps MinVersion at the previous one, so
// that the two run side by side during a rolling upgrade.
type schemaRecord struct {
	Version    int `json:"version"`
	MinVersion int `json:"minVersion"`
}

// migration takes the data from version to-1 to version to. Each must be
// safe to run again: a server stopped halfway runs it anew. Steps run
// before the cache is loaded: they read and write through s.client.
type migration struct {
	to int
	// minVersion is the oldest version that may still run once this step
	// is done (see schemaRecord).
	minVersion int
	run        func(ctx context.Context, s *Store) error
}

// migrations are this build's steps, in order. Data written before the
// schema was recorded is version 0.
var migrations = []migration{
	// Version 1 only records the schema: version 0's records are
	// version 1's, and a version-0 server (which does not read the
	// record) writes nothing version 1 would lose.
	{to: 1, minVersion: 0, run: func(context.Context, *Store) error { return nil }},
}

// ErrSchema says the data was written by a version of Capstan this build
// cannot run against.
var ErrSchema = errors.New("store: unsupported schema version")

// Schema is the data's recorded schema version, read from etcd.
func (s *Store) Schema(ctx context.Context) (version, minVersion int, err error) {
	rec, _, err := s.readSchema(ctx)
	return rec.Version, rec.MinVersion, err
}

// readSchema reads the schema record and its revision (0: none).
func (s *Store) readSchema(ctx context.Context) (rec schemaRecord, rev int64, err error) {
	key := s.prefix + schemaKey
	resp, err := s.get(ctx, key)
	if err != nil {
		return rec, 0, fmt.Errorf("store: read the schema version: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return rec, 0, nil
	}
	kv := resp.Kvs[0]
	b, err := decodeValue(kv.Value)
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		return rec, 0, fmt.Errorf("store: the schema version at %s: %w", key, err)
	}
	return rec, kv.ModRevision, nil
}

// checkSchema migrates data of an older version to SchemaVersion, step by
// step, and refuses data of a newer one that does not admit this version.
func (s *Store) checkSchema(ctx context.Context) error {
	return s.migrateSchema(ctx, SchemaVersion, migrations)
}

func (s *Store) migrateSchema(ctx context.Context, current int, steps []migration) error {
	key := s.prefix + schemaKey
	for {
		rec, rev, err := s.readSchema(ctx)
		if err != nil {
			return err
		}
		if rec.Version > current {
			if rec.MinVersion <= current {
				s.log.Warn("the data's schema is newer than this build's; running beside the newer servers",
					"data_schema", rec.Version, "build_schema", current)
				return nil
			}
			return fmt.Errorf("%w: the data was written by schema version %d, which needs Capstan of schema version %d or later, and this build has schema version %d: run a newer Capstan",
				ErrSchema, rec.Version, rec.MinVersion, current)
		}
		if rec.Version == current && rev != 0 {
			return nil
		}
		next := rec
		for _, m := range steps {
			if m.to <= rec.Version || m.to > current {
				continue
			}
			s.log.Info("migrating the stored data", "from_schema", m.to-1, "to_schema", m.to)
			if err := m.run(ctx, s); err != nil {
				return fmt.Errorf("store: migrate the data to schema version %d: %w", m.to, err)
			}
			next = schemaRecord{Version: m.to, MinVersion: m.minVersion}
		}
		if next.Version != current {
			return fmt.Errorf("store: no migration from schema version %d to %d", next.Version, current)
		}
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		// Written only if nobody recorded a version meanwhile.
		tr, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, encodeValue(b))).Commit()
		if err != nil {
			return fmt.Errorf("store: record the schema version: %w", err)
		}
		if !tr.Succeeded {
			continue
		}
		if rec.Version != current {
			s.log.Info("stored data migrated", "from_schema", rec.Version, "to_schema", current)
		}
		return nil
	}
}
