package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestSealOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "secrets.key")
	b, created, err := LoadOrCreate(path)
	if err != nil || !created {
		t.Fatalf("first start: created %v, %v", created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v (%v), want 0600", fi.Mode(), err)
	}
	const secret, id = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "CSAGABCDEFGHIJKLMNOP"
	sealed, err := b.Seal(secret, id)
	if err != nil || strings.Contains(sealed, secret) || !strings.HasPrefix(sealed, "s1:"+b.KeyID()+":") {
		t.Fatalf("sealed %q (%v)", sealed, err)
	}
	again, _ := b.Seal(secret, id)
	if again == sealed {
		t.Fatal("two seals of one secret are alike: the nonce repeats")
	}

	// The next start reads the same key, and opens without the cache.
	b2, created, err := LoadOrCreate(path)
	if err != nil || created || b2.KeyID() != b.KeyID() {
		t.Fatalf("second start: created %v, key %s of %s, %v", created, b2.KeyID(), b.KeyID(), err)
	}
	if got, err := b2.Open(sealed, id); err != nil || got != secret {
		t.Fatalf("opened %q, %v", got, err)
	}
	if _, err := b2.Open(sealed, "CSAGOTHERRECORDXXXXX"); err == nil || !strings.Contains(err.Error(), "does not open") {
		t.Fatalf("opened for another record: %v", err)
	}
	altered := sealed[:len(sealed)-2] + "AA"
	if altered == sealed {
		altered = sealed[:len(sealed)-2] + "BB"
	}
	if _, err := b2.Open(altered, id); err == nil {
		t.Fatal("an altered value opened")
	}
	other, _, err := LoadOrCreate(filepath.Join(t.TempDir(), "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(sealed, id); err == nil || !strings.Contains(err.Error(), "sealed under key "+b.KeyID()) {
		t.Fatalf("another key: %v", err)
	}
	if _, err := b2.Open(secret, id); err == nil {
		t.Fatal("a plain value opened")
	}
}

func TestKeyFileChecks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k")
	if _, _, err := LoadOrCreate(path); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	if _, _, err := LoadOrCreate(path); err == nil || !strings.Contains(err.Error(), "read by others") {
		t.Fatalf("a key file others may read: %v", err)
	}
	os.WriteFile(path, []byte("not a key\n"), 0o600)
	os.Chmod(path, 0o600)
	if _, _, err := LoadOrCreate(path); err == nil || !strings.Contains(err.Error(), "not a key") {
		t.Fatalf("a file without a key: %v", err)
	}
}

// Servers started at once on one key file all end up with the same key.
func TestConcurrentCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k")
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			b, _, err := LoadOrCreate(path)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = b.KeyID()
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("keys %v", ids)
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".secrets-key-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// BenchmarkOpen is a lookup's cost: the first Open of a value decrypts,
// the next ones read the cache.
func BenchmarkOpen(b *testing.B) {
	box, _, err := LoadOrCreate(filepath.Join(b.TempDir(), "k"))
	if err != nil {
		b.Fatal(err)
	}
	sealed, _ := box.Seal("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "CSAGABCDEFGHIJKLMNOP")
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := box.Open(sealed, "CSAGABCDEFGHIJKLMNOP"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decrypt", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			clear(box.opened)
			if _, err := box.Open(sealed, "CSAGABCDEFGHIJKLMNOP"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
