package store

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestSchemaRecordedAndMigrated(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	v, minV, err := s.Schema(ctx)
	if err != nil || v != SchemaVersion || minV != 0 {
		t.Fatalf("new store's schema = %d (min %d), %v; want %d", v, minV, err, SchemaVersion)
	}

	// Steps of a made-up version 3 run in order from the recorded one,
	// and record where they leave the data.
	var ran []int
	step := func(to, minV int) migration {
		return migration{to: to, minVersion: minV, run: func(context.Context, *Store) error { ran = append(ran, to); return nil }}
	}
	steps := []migration{step(1, 0), step(2, 1), step(3, 2)}
	if err := s.migrateSchema(ctx, 3, steps); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 2 || ran[0] != 2 || ran[1] != 3 {
		t.Fatalf("ran steps %v, want [2 3]", ran)
	}
	if v, minV, _ := s.Schema(ctx); v != 3 || minV != 2 {
		t.Fatalf("schema after migration = %d (min %d), want 3 (min 2)", v, minV)
	}
	// A version-2 build runs beside it (3 admits 2); a version-1 one is
	// refused, naming both versions.
	if err := s.migrateSchema(ctx, 2, steps[:2]); err != nil {
		t.Fatalf("adjacent older build refused: %v", err)
	}
	if v, _, _ := s.Schema(ctx); v != 3 {
		t.Fatalf("an older build rewrote the schema to %d", v)
	}
	err = s.migrateSchema(ctx, 1, steps[:1])
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "schema version 3") || !strings.Contains(err.Error(), "this build has schema version 1") {
		t.Fatalf("older build's error = %v", err)
	}
	// A failing step leaves the recorded version where it was.
	bad := append(steps, migration{to: 4, minVersion: 3, run: func(context.Context, *Store) error { return errors.New("boom") }})
	if err := s.migrateSchema(ctx, 4, bad); err == nil || !strings.Contains(err.Error(), "schema version 4") {
		t.Fatalf("failing step: %v", err)
	}
	if v, _, _ := s.Schema(ctx); v != 3 {
		t.Fatalf("schema after a failed step = %d, want 3", v)
	}
	s.Close()

	// Reopened by this build, the data of version 3 (min 2) is refused.
	_, err = Open(ctx, Config{DataDir: dir})
	if !errors.Is(err, ErrSchema) {
		t.Fatalf("Open of newer data: %v", err)
	}
}
