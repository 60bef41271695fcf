// Package secrets seals the secrets the server keeps in etcd (agent
// credentials' and IAM users' secret access keys) with AES-256-GCM under a
// key kept outside etcd, in a file of the server's: a copy of etcd's data,
// or whoever reads etcd, learns no secret from it.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// KeySize is the key's length: AES-256.
const KeySize = 32

// prefix starts every sealed value: the format's version, then the key's
// ID, so that a value sealed under another key says so instead of
// failing as if tampered with.
const prefix = "s1:"

// maxOpened bounds the cache of opened values: past it the cache starts
// over (a lookup then costs one decryption again).
const maxOpened = 1 << 16

// Box seals and opens secrets under one key. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
	id   string

	mu     sync.RWMutex
	opened map[openKey]string

	// prev opens values sealed under the key this one replaces, while
	// they are sealed anew (WithPrevious).
	prev *Box
}

// openKey is a value opened before: the record's ID and the sealed value.
type openKey struct{ id, sealed string }

// New returns a Box for a KeySize-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets: a key is %d bytes, got %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("capstan secrets key id\x00"), key...))
	return &Box{aead: aead, id: hex.EncodeToString(sum[:4]), opened: map[openKey]string{}}, nil
}

// KeyID names the key (a hash of it, revealing nothing of it): values
// sealed under another key are told apart by it.
func (b *Box) KeyID() string { return b.id }

// WithPrevious makes b open the values sealed under prev's key too, for
// rotating keys: b seals under its own key only. The keys must differ.
func (b *Box) WithPrevious(prev *Box) error {
	if prev.id == b.id {
		return errors.New("secrets: the previous key is the key itself")
	}
	b.prev = prev
	return nil
}

// PreviousKeyIDs names the key given to WithPrevious, if any.
func (b *Box) PreviousKeyIDs() []string {
	if b.prev == nil {
		return nil
	}
	return []string{b.prev.id}
}

// Current reports whether sealed was sealed under b's own key.
func (b *Box) Current(sealed string) bool { return strings.HasPrefix(sealed, prefix+b.id+":") }

// Seal encrypts secret bound to id (the record's access key ID): the
// value opens only with the same id, so it cannot be moved to another
// record.
func (b *Box) Seal(secret, id string) (string, error) {
	nonce := make([]byte, b.aead.NonceSize(), b.aead.NonceSize()+len(secret)+b.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	ct := b.aead.Seal(nonce, nonce, []byte(secret), aad(id))
	sealed := prefix + b.id + ":" + base64.RawStdEncoding.EncodeToString(ct)
	b.remember(id, sealed, secret)
	return sealed, nil
}

// Open decrypts a value Seal returned for id. Every signed request looks
// its secret up, so an opened value is kept in memory: the next Open of
// it is a map lookup.
func (b *Box) Open(sealed, id string) (string, error) {
	b.mu.RLock()
	s, ok := b.opened[openKey{id, sealed}]
	b.mu.RUnlock()
	if ok {
		return s, nil
	}
	rest, ok := strings.CutPrefix(sealed, prefix)
	keyID, body, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return "", errors.New("secrets: not a sealed value")
	}
	if b.prev != nil && keyID == b.prev.id {
		return b.prev.Open(sealed, id)
	}
	if keyID != b.id {
		return "", fmt.Errorf("secrets: sealed under key %s, not this server's key %s", keyID, b.id)
	}
	ct, err := base64.RawStdEncoding.DecodeString(body)
	if err != nil || len(ct) < b.aead.NonceSize() {
		return "", errors.New("secrets: not a sealed value")
	}
	n := b.aead.NonceSize()
	plain, err := b.aead.Open(nil, ct[:n], ct[n:], aad(id))
	if err != nil {
		return "", fmt.Errorf("secrets: the value for %s does not open (altered, or sealed for another record)", id)
	}
	s = string(plain)
	b.remember(id, sealed, s)
	return s, nil
}

func (b *Box) remember(id, sealed, secret string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.opened) >= maxOpened {
		clear(b.opened)
	}
	b.opened[openKey{id, sealed}] = secret
}

func aad(id string) []byte { return []byte("capstan secret\x00" + id) }

// LoadOrCreate reads the key file at path, or creates it with a fresh key
// (mode 0600) when there is none; created says which. A key file others
// may read is refused: the key is what keeps the secrets in etcd secret.
func LoadOrCreate(path string) (b *Box, created bool, err error) {
	b, err = load(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return b, false, err
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("secrets key file: %w", err)
	}
	// Written whole under another name, then linked into place: a server
	// starting beside this one reads either no file or the whole key, and
	// of two creating it at once one wins and both use its key.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secrets-key-*")
	if err != nil {
		return nil, false, fmt.Errorf("secrets key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("secrets key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			b, err = load(path)
			return b, false, err
		}
		return nil, false, fmt.Errorf("secrets key file: %w", err)
	}
	b, err = New(key)
	return b, err == nil, err
}

// Load reads the key file at path, which must exist; it is refused as
// LoadOrCreate refuses it.
func Load(path string) (*Box, error) { return load(path) }

func load(path string) (*Box, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets key file %s may be read by others (mode %04o): chmod 600 it", path, fi.Mode().Perm())
	}
	buf := make([]byte, 256)
	n, err := f.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("secrets key file %s: %w", path, err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(buf[:n])))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("secrets key file %s: not a key (%d bytes of base64)", path, KeySize)
	}
	return New(key)
}
