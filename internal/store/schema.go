package store

import (
	"context"
	"errors"
	"fmt"
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
// safe to run again: a server stopped halfway runs it anew.
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

// Schema is the data's recorded schema version.
func (s *Store) Schema(ctx context.Context) (version, minVersion int, err error) {
	it, err := Get[schemaRecord](ctx, s, schemaKey)
	if errors.Is(err, ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	return it.Value.Version, it.Value.MinVersion, nil
}

// checkSchema migrates data of an older version to SchemaVersion, step by
// step, and refuses data of a newer one that does not admit this version.
func (s *Store) checkSchema(ctx context.Context) error {
	return s.migrateSchema(ctx, SchemaVersion, migrations)
}

func (s *Store) migrateSchema(ctx context.Context, current int, steps []migration) error {
	for {
		it, err := Get[schemaRecord](ctx, s, schemaKey)
		var rec schemaRecord
		var rev int64
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return err
		default:
			rec, rev = it.Value, it.Rev
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
		txn := s.Txn()
		if rev == 0 {
			txn = txn.Create(schemaKey, next)
		} else {
			txn = txn.Update(schemaKey, rev, next)
		}
		_, err = txn.Commit(ctx)
		if errors.Is(err, ErrConflict) {
			// Another server recorded a version meanwhile: look again.
			continue
		}
		if err != nil {
			return err
		}
		if rec.Version != current {
			s.log.Info("stored data migrated", "from_schema", rec.Version, "to_schema", current)
		}
		return nil
	}
}
