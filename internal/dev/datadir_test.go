package dev

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDataDir(t *testing.T) {
	ctx := context.Background()
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o600)
	for _, fresh := range []bool{false, true} {
		d := &env{cfg: Config{DataDir: foreign, Fresh: fresh}}
		if err := d.prepareDataDir(ctx); err == nil || !strings.Contains(err.Error(), foreign) {
			t.Errorf("fresh=%v: a directory capstan dev did not make was accepted: %v", fresh, err)
		}
	}
	if _, err := os.Stat(filepath.Join(foreign, "notes.txt")); err != nil {
		t.Fatalf("the foreign directory was touched: %v", err)
	}

	own := filepath.Join(t.TempDir(), "dev")
	d := &env{cfg: Config{DataDir: own}}
	if err := d.prepareDataDir(ctx); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(own, "state"), []byte("x"), 0o600)
	if err := d.prepareDataDir(ctx); err != nil {
		t.Fatalf("rerun on its own directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(own, "state")); err != nil {
		t.Fatalf("a rerun lost state: %v", err)
	}
	d.cfg.Fresh = true
	if err := d.prepareDataDir(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(own, "state")); !os.IsNotExist(err) {
		t.Fatalf("--fresh kept state: %v", err)
	}
}

func TestSourceHash(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o600)
	a, err := sourceHash(dir, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := sourceHash(dir, "amd64"); b != a {
		t.Errorf("same source, hashes %s and %s", a, b)
	}
	if b, _ := sourceHash(dir, "arm64"); b == a {
		t.Error("another architecture, same hash")
	}
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main // changed\n"), 0o600)
	if b, _ := sourceHash(dir, "amd64"); b == a {
		t.Error("changed source, same hash")
	}
}
