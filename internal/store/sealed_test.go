package store

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/secrets"
)

// secretObj is a record holding a secret, as agent credentials and
// access keys do.
type secretObj struct {
	ID     string `json:"id"`
	Secret string `json:"secret,omitempty"`
	Sealed string `json:"sealed,omitempty"`
	N      int    `json:"n"`
}

func (o secretObj) SealSecrets(s Sealer) (any, error) {
	err := SealSecret(s, &o.Secret, &o.Sealed, o.ID)
	return o, err
}

func (o *secretObj) OpenSecrets(s Sealer) error { return OpenSecret(s, &o.Secret, &o.Sealed, o.ID) }

func (o *secretObj) InClear() bool { return o.Secret != "" && o.Sealed == "" }

func newBox(t *testing.T) *secrets.Box {
	t.Helper()
	b, _, err := secrets.LoadOrCreate(t.TempDir() + "/key")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Secrets reach etcd sealed and read back in the clear; a record an
// earlier version wrote in the clear reads as before and Reseal seals
// it; a store with another key, or none, opens no secret.
func TestSecretsAreSealedInEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	const oldSecret, newSecret = "OLDwJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEK", "NEWwJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEK"

	plain := open(t, dir)
	if _, err := plain.Txn().Create("s/old", secretObj{ID: "old", Secret: oldSecret}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	plain.Close()

	box := newBox(t)
	s, err := Open(ctx, Config{DataDir: dir, Sealer: box})
	if err != nil {
		t.Fatal(err)
	}
	old, err := Get[secretObj](ctx, s, "s/old")
	if err != nil || old.Value.Secret != oldSecret || !old.Value.InClear() {
		t.Fatalf("a record in the clear: %+v %v", old.Value, err)
	}
	if _, err := s.Txn().Create("s/new", secretObj{ID: "new", Secret: newSecret}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := s.RawJSON(ctx, "s/new")
	if err != nil || bytes.Contains(raw, []byte(newSecret)) || !bytes.Contains(raw, []byte(`"sealed":"s1:`+box.KeyID())) {
		t.Fatalf("etcd holds %s (%v)", raw, err)
	}
	got, err := Get[secretObj](ctx, s, "s/new")
	if err != nil || got.Value.Secret != newSecret || got.Value.InClear() {
		t.Fatalf("read back: %+v %v", got.Value, err)
	}
	// Rewritten for another change, the sealed value stays as it was.
	was := got.Value.Sealed
	got.Value.N = 2
	if _, err := s.Txn().Update("s/new", got.Rev, got.Value).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ = Get[secretObj](ctx, s, "s/new"); got.Value.Sealed != was || got.Value.N != 2 {
		t.Fatalf("after an update: %+v, sealed %s before", got.Value, was)
	}

	if n, err := Reseal[secretObj](ctx, s, "s/"); n != 1 || err != nil {
		t.Fatalf("Reseal: %d %v, want 1", n, err)
	}
	if n, err := Reseal[secretObj](ctx, s, "s/"); n != 0 || err != nil {
		t.Fatalf("Reseal again: %d %v, want 0", n, err)
	}
	if raw, _ := s.RawJSON(ctx, "s/old"); bytes.Contains(raw, []byte(oldSecret)) {
		t.Fatalf("resealed, etcd holds %s", raw)
	}
	items, _, err := List[secretObj](ctx, s, "s/", "", 0)
	if err != nil || len(items) != 2 || items[0].Value.Secret != newSecret || items[1].Value.Secret != oldSecret {
		t.Fatalf("listed %+v %v", items, err)
	}
	if _, err := Reseal[obj](ctx, s, "s/"); err == nil {
		t.Fatal("Reseal of a record without secrets")
	}
	s.Close()

	if _, err := Open(ctx, Config{DataDir: dir, Sealer: newBox(t)}); !errors.Is(err, ErrOtherKey) || !strings.Contains(err.Error(), box.KeyID()) {
		t.Fatalf("another key: %v", err)
	}
	plain = open(t, dir)
	defer plain.Close()
	if _, err := Get[secretObj](ctx, plain, "s/new"); !errors.Is(err, errNoSealer) {
		t.Fatalf("a sealed secret without a key: %v", err)
	}
}
