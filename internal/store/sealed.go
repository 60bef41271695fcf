package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Sealer encrypts the secrets records hold before they go to etcd
// (Config.Sealer; internal/secrets is the server's).
type Sealer interface {
	// Seal encrypts secret bound to id: it opens with that id only.
	Seal(secret, id string) (string, error)
	Open(sealed, id string) (string, error)
	// KeyID names the key, so that servers sharing an etcd can tell
	// whether they share it.
	KeyID() string
}

// SecretRecord is a record holding a secret: in the clear in memory,
// sealed in etcd. The store writes what SealSecrets returns (a copy) and
// calls OpenSecrets on every record it reads, so every writer and reader
// of the record is covered, and a record written in the clear (before
// secrets were sealed) reads as it did and is sealed when next written.
type SecretRecord interface {
	SealSecrets(Sealer) (any, error)
	OpenSecrets(Sealer) error
	// InClear says the record read holds its secret unsealed.
	InClear() bool
}

// rotatingSealer is a Sealer that also opens values of the keys it
// replaces (secrets.Box.WithPrevious).
type rotatingSealer interface {
	Sealer
	// PreviousKeyIDs names the keys replaced.
	PreviousKeyIDs() []string
	// Current says sealed is under the Sealer's own key.
	Current(sealed string) bool
}

type secretSealer interface{ SealSecrets(Sealer) (any, error) }

type secretOpener interface{ OpenSecrets(Sealer) error }

// errNoSealer is the answer to a sealed secret in a store without a key.
var errNoSealer = errors.New("store: a sealed secret and no key to open it")

// SealSecret sets *sealed to secret sealed for id and clears *secret,
// keeping a sealed value that already holds it (records are rewritten
// for other changes far more often than their secrets change). A record
// without a secret is left as it is.
func SealSecret(s Sealer, secret, sealed *string, id string) error {
	if *secret == "" {
		return nil
	}
	if rs, ok := s.(rotatingSealer); *sealed != "" && (!ok || rs.Current(*sealed)) {
		if was, err := s.Open(*sealed, id); err == nil && was == *secret {
			*secret = ""
			return nil
		}
	}
	v, err := s.Seal(*secret, id)
	if err != nil {
		return err
	}
	*sealed, *secret = v, ""
	return nil
}

// OpenSecret sets *secret from *sealed, keeping *sealed for SealSecret.
// A record in the clear is left as it is.
func OpenSecret(s Sealer, secret, sealed *string, id string) error {
	if *sealed == "" {
		return nil
	}
	if s == nil {
		return errNoSealer
	}
	v, err := s.Open(*sealed, id)
	if err != nil {
		return err
	}
	*secret = v
	return nil
}

// sealFor is what put writes for v: a copy with its secrets sealed.
func (s *Store) sealFor(v any) (any, error) {
	r, ok := v.(secretSealer)
	if !ok || s.sealer == nil {
		return v, nil
	}
	return r.SealSecrets(s.sealer)
}

// openIn opens the secrets of the record v points to, if it holds any.
func (s *Store) openIn(v any) error {
	if r, ok := v.(secretOpener); ok {
		return r.OpenSecrets(s.sealer)
	}
	return nil
}

// Reseal rewrites sealed the records under prefix that hold their secret
// in the clear, as a store written before secrets were sealed does, and
// every one of them while the key is being rotated (Rotating); it says how
// many it rewrote. A record changed meanwhile was rewritten, hence sealed,
// by that writer.
func Reseal[T any](ctx context.Context, s *Store, prefix string) (int, error) {
	if _, ok := any(new(T)).(SecretRecord); !ok {
		return 0, fmt.Errorf("store: %T holds no secret", *new(T))
	}
	if s.sealer == nil {
		return 0, nil
	}
	items, _, err := List[T](ctx, s, prefix, "", 0)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, it := range items {
		if !s.rotating && !any(&it.Value).(SecretRecord).InClear() {
			continue
		}
		_, err := s.Txn().Update(it.Key, it.Rev, it.Value).Commit(ctx)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// sealerKey holds the ID of the key the secrets in etcd are sealed with.
const sealerKey = "secrets/key"

type sealerRecord struct {
	KeyID string `json:"keyId"`
}

// checkSealer records the key's ID in etcd on first use and refuses
// another key after: a server with its own key could not open what its
// peers sealed, and would seal what they could not open.
func (s *Store) checkSealer(ctx context.Context) error {
	if s.sealer == nil {
		return nil
	}
	id := s.sealer.KeyID()
	for {
		it, err := Get[sealerRecord](ctx, s, sealerKey)
		if errors.Is(err, ErrNotFound) {
			_, err = s.Txn().Create(sealerKey, sealerRecord{KeyID: id}).Commit(ctx)
			if errors.Is(err, ErrConflict) {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		if it.Value.KeyID == id {
			return nil
		}
		if rs, ok := s.sealer.(rotatingSealer); ok && slices.Contains(rs.PreviousKeyIDs(), it.Value.KeyID) {
			s.rotating, s.sealerRev = true, it.Rev
			return nil
		}
		return fmt.Errorf("%w: the secrets in etcd are sealed with key %s, and this key is %s", ErrOtherKey, it.Value.KeyID, id)
	}
}

// Rotating says the secrets in etcd are sealed under a previous key of the
// Sealer's: Reseal then rewrites every record, and FinishRotation records
// the new key.
func (s *Store) Rotating() bool { return s.rotating }

// FinishRotation records the Sealer's key as the one the secrets in etcd
// are sealed with, once every record holding one was resealed: from then
// on a server with only the previous key is refused.
func (s *Store) FinishRotation(ctx context.Context) error {
	if !s.rotating {
		return nil
	}
	if _, err := s.Txn().Update(sealerKey, s.sealerRev, sealerRecord{KeyID: s.sealer.KeyID()}).Commit(ctx); err != nil {
		return fmt.Errorf("record the new secrets key: %w", err)
	}
	s.rotating = false
	return nil
}

// ErrOtherKey means the store was given another key than the one the
// secrets in etcd are sealed with.
var ErrOtherKey = errors.New("store: another secrets key")

var _ SecretRecord = (*AgentCredential)(nil)

// SealSecrets implements SecretRecord.
func (c AgentCredential) SealSecrets(s Sealer) (any, error) {
	err := SealSecret(s, &c.SecretAccessKey, &c.SealedSecretAccessKey, c.AccessKeyID)
	return c, err
}

// OpenSecrets implements SecretRecord.
func (c *AgentCredential) OpenSecrets(s Sealer) error {
	return OpenSecret(s, &c.SecretAccessKey, &c.SealedSecretAccessKey, c.AccessKeyID)
}

// InClear implements SecretRecord.
func (c *AgentCredential) InClear() bool {
	return c.SecretAccessKey != "" && c.SealedSecretAccessKey == ""
}

// RawJSON is the JSON of the value etcd holds at key, read from etcd
// itself: what a copy of etcd's data shows of it.
func (s *Store) RawJSON(ctx context.Context, key string) ([]byte, error) {
	resp, err := s.get(ctx, s.prefix+key)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return decodeValue(resp.Kvs[0].Value)
}
