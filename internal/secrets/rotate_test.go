package secrets

import (
	"path/filepath"
	"strings"
	"testing"
)

// A box given the previous key opens values sealed under either key and
// seals under its own only; the key itself is refused as its previous.
func TestWithPrevious(t *testing.T) {
	dir := t.TempDir()
	oldBox, _, err := LoadOrCreate(filepath.Join(dir, "old.key"))
	if err != nil {
		t.Fatal(err)
	}
	sealedOld, _ := oldBox.Seal("the-secret", "AKID1")
	newBox, _, err := LoadOrCreate(filepath.Join(dir, "new.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newBox.Open(sealedOld, "AKID1"); err == nil || !strings.Contains(err.Error(), "sealed under key "+oldBox.KeyID()) {
		t.Fatalf("without the previous key: %v", err)
	}
	again, err := Load(filepath.Join(dir, "old.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := newBox.WithPrevious(again); err != nil {
		t.Fatal(err)
	}
	if got, err := newBox.Open(sealedOld, "AKID1"); err != nil || got != "the-secret" {
		t.Fatalf("old value with the previous key: %q %v", got, err)
	}
	if _, err := newBox.Open(sealedOld, "AKID2"); err == nil {
		t.Fatal("an old value opened for another record")
	}
	sealedNew, _ := newBox.Seal("the-secret", "AKID1")
	if !newBox.Current(sealedNew) || newBox.Current(sealedOld) {
		t.Fatalf("current: new %v, old %v", newBox.Current(sealedNew), newBox.Current(sealedOld))
	}
	if _, err := oldBox.Open(sealedNew, "AKID1"); err == nil {
		t.Fatal("the old key opened a value sealed under the new one")
	}
	if ids := newBox.PreviousKeyIDs(); len(ids) != 1 || ids[0] != oldBox.KeyID() {
		t.Fatalf("previous key IDs %v", ids)
	}
	if err := oldBox.WithPrevious(again); err == nil {
		t.Fatal("a key was taken as its own previous key")
	}
	if _, err := Load(filepath.Join(dir, "missing.key")); err == nil {
		t.Fatal("Load created a key")
	}
}
