package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/iam"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/store"
)

// validateState checks the flags of the state: TLS to an external etcd.
func (c *Config) validateState() error {
	if c.EtcdCACert == "" && c.EtcdCert == "" && c.EtcdKey == "" {
		return nil
	}
	if len(c.EtcdEndpoints) == 0 {
		return errors.New("--etcd-cacert, --etcd-cert and --etcd-key are for an external etcd (--etcd-endpoints); the embedded member needs none")
	}
	for _, e := range c.EtcdEndpoints {
		if !strings.HasPrefix(e, "https://") {
			return fmt.Errorf("--etcd-endpoints must be https:// URLs with --etcd-cacert, --etcd-cert or --etcd-key (got %s)", e)
		}
	}
	if c.EtcdCACert != "" {
		if _, err := store.LoadCAFile(c.EtcdCACert); err != nil {
			return fmt.Errorf("--etcd-cacert: %w", err)
		}
	}
	if (c.EtcdCert == "") != (c.EtcdKey == "") {
		return errors.New("--etcd-cert and --etcd-key go together")
	}
	if c.EtcdCert != "" {
		if _, err := tls.LoadX509KeyPair(c.EtcdCert, c.EtcdKey); err != nil {
			return fmt.Errorf("--etcd-cert and --etcd-key: %w", err)
		}
	}
	return nil
}

// secretsKeyFile is where the key sealing the secrets in etcd is kept.
func (c *Config) secretsKeyFile() string {
	return cmp.Or(c.SecretsKeyFile, filepath.Join(c.DataDir, "secrets.key"))
}

// openStore opens the state with the secrets key, created on first start.
func openStore(ctx context.Context, cfg *Config) (*store.Store, error) {
	// The data dir holds the key, the administrator credential and the
	// embedded member's socket: its user's alone.
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	keyFile := cfg.secretsKeyFile()
	box, created, err := secrets.LoadOrCreate(keyFile)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-file: %w", err)
	}
	if created {
		cfg.Log.Info("secrets key created; servers sharing this etcd need a copy (--secrets-key-file)", "file", keyFile, "key_id", box.KeyID())
	}
	if cfg.SecretsPreviousKeyFile != "" {
		prev, err := secrets.Load(cfg.SecretsPreviousKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--secrets-previous-key-file: %w", err)
		}
		if err := box.WithPrevious(prev); err != nil {
			return nil, fmt.Errorf("--secrets-previous-key-file %s holds the key of --secrets-key-file %s: give the new key to --secrets-key-file", cfg.SecretsPreviousKeyFile, keyFile)
		}
	}
	st, err := store.Open(ctx, store.Config{
		DataDir:   filepath.Join(cfg.DataDir, "etcd"),
		Endpoints: cfg.EtcdEndpoints,
		TLS:       store.TLSFiles{CACert: cfg.EtcdCACert, Cert: cfg.EtcdCert, Key: cfg.EtcdKey},
		MaxTxnOps: cfg.EtcdMaxTxnOps,
		Prefix:    cfg.EtcdPrefix,
		Logger:    cfg.Log,
		Sealer:    box,
	})
	if errors.Is(err, store.ErrOtherKey) {
		return nil, fmt.Errorf("--secrets-key-file %s: %w: servers sharing an etcd need the same key file (to rotate it, give the key in use as --secrets-previous-key-file)", keyFile, err)
	}
	return st, err
}

// sealSecrets seals the secrets an earlier version kept in the clear, and
// all of them anew when the key is being rotated.
func sealSecrets(ctx context.Context, cfg *Config, svc *fleet.State, ids *iam.Store) error {
	creds, err := svc.SealCredentials(ctx)
	if err != nil {
		return fmt.Errorf("seal agent credentials: %w", err)
	}
	keys, err := ids.SealAccessKeys(ctx)
	if err != nil {
		return fmt.Errorf("seal access keys: %w", err)
	}
	if svc.Store.Rotating() {
		cfg.Log.Info("secrets sealed anew with the new key; --secrets-previous-key-file is no longer needed", "agent_credentials", creds, "access_keys", keys)
		return svc.Store.FinishRotation(ctx)
	}
	if creds+keys > 0 {
		cfg.Log.Info("sealed secrets stored in the clear by an earlier version", "agent_credentials", creds, "access_keys", keys)
	}
	return nil
}
