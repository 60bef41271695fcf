package store

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// RestoreConfig says which member a snapshot is restored as.
type RestoreConfig struct {
	// Snapshot is the file 'capstan etcd snapshot save' wrote.
	Snapshot string
	// Dir is the member's data dir (a server's DATA/etcd, or a capstan
	// etcd member's --data-dir); the database goes to Dir/data, which
	// must not exist.
	Dir string
	// Name and InitialCluster (NAME=https://IP:PORT,...) as the member
	// will be started with; empty for a server's embedded member.
	Name, InitialCluster string
}

// RestoreSnapshot writes a member's data dir from a snapshot, with a new
// membership: the restored cluster is a new one, whose members are all
// restored from the same snapshot. The keys and their history up to the
// snapshot are kept.
func RestoreSnapshot(cfg RestoreConfig) error {
	if cfg.Snapshot == "" || cfg.Dir == "" {
		return errors.New("restore: a snapshot file and a data dir are required")
	}
	if _, err := os.Stat(cfg.Snapshot); err != nil {
		return fmt.Errorf("restore: snapshot: %w", err)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(data); err == nil {
		return fmt.Errorf("restore: %s exists: move it aside first (restoring never overwrites a member's data)", data)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	name, initial := cfg.Name, cfg.InitialCluster
	var peer string
	if initial == "" {
		// The embedded member's identity (startLocked): its peer URL is
		// a name only, nothing listens there.
		if name == "" {
			name = "capstan"
		}
		peer = (&url.URL{Scheme: "unix", Path: filepath.Join(dir, "peer.sock")}).String()
		initial = name + "=" + peer
	} else {
		if name == "" {
			return errors.New("restore: --initial-cluster needs --name: which of its members this one is")
		}
		for _, m := range strings.Split(initial, ",") {
			if n, u, ok := strings.Cut(m, "="); ok && n == name {
				peer = u
			}
		}
		if peer == "" {
			return fmt.Errorf("restore: --initial-cluster %q does not name this member (%s)", initial, name)
		}
	}
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{SnapshotPath: cfg.Snapshot, Name: name,
		OutputDataDir: data, PeerURLs: []string{peer}, InitialCluster: initial, InitialClusterToken: "etcd-cluster"})
	if err != nil {
		os.RemoveAll(data) // nothing half-written is left to start on
		return fmt.Errorf("restore %s: %w", cfg.Snapshot, err)
	}
	return nil
}
