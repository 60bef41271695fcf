package dev

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentBinaryBuiltOnce: the static capstan for the instances is built
// with progress lines while it builds, then reused by the next run as long
// as the source and toolchain are the same.
func TestAgentBinaryBuiltOnce(t *testing.T) {
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = 200 * time.Millisecond
	ctx := context.Background()
	src, err := sourceTree("")
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := goToolchain()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	var out bytes.Buffer
	path, err := agentBinary(ctx, goTool, src, data, newPrinter(&out))
	if err != nil {
		t.Fatal(err)
	}
	if !staticCapstan(path) {
		t.Fatalf("%s is not a static capstan", path)
	}
	if !strings.Contains(out.String(), "building the static capstan: ") || !strings.Contains(out.String(), "built the static capstan in ") {
		t.Errorf("no progress while building:\n%s", out.String())
	}
	before, _ := os.Stat(path)

	out.Reset()
	began := time.Now()
	again, err := agentBinary(ctx, goTool, src, data, newPrinter(&out))
	if err != nil || again != path {
		t.Fatalf("second run: %s %v", again, err)
	}
	after, _ := os.Stat(path)
	if !strings.Contains(out.String(), "(up to date: "+path+")") || strings.Contains(out.String(), "building") || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("second run rebuilt:\n%s", out.String())
	}
	t.Logf("reuse took %v", time.Since(began))

	// A damaged binary is not reused even with a matching key.
	os.WriteFile(path, []byte("not a binary"), 0o700)
	out.Reset()
	if _, err := agentBinary(ctx, goTool, src, data, newPrinter(&out)); err != nil || !staticCapstan(path) || !strings.Contains(out.String(), "building") {
		t.Errorf("damaged binary: %v\n%s", err, out.String())
	}
}

// TestBuildKey: the key follows the binary's sources, not tests or
// testdata.
func TestBuildKey(t *testing.T) {
	ctx := context.Background()
	goTool, err := goToolchain()
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	write := func(name, body string) {
		os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o700)
		os.WriteFile(filepath.Join(src, name), []byte(body), 0o600)
	}
	write("go.mod", "module example.com/x\n")
	write("cmd/x/main.go", "package main\n")
	key := func() string {
		k, err := buildKey(ctx, goTool, src)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a := key()
	write("cmd/x/main_test.go", "package main\n")
	write("cmd/x/testdata/in.go", "package x\n")
	write(".git/HEAD", "ref\n")
	if b := key(); b != a {
		t.Error("a test, testdata or .git changed the key")
	}
	write("cmd/x/main.go", "package main // changed\n")
	if b := key(); b == a {
		t.Error("a source change kept the key")
	}
	c := key()
	write("go.sum", "example.com/y v1.0.0 h1:x\n")
	if key() == c {
		t.Error("a new go.sum kept the key")
	}
}
