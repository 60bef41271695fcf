package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/capstanhq/capstan/internal/store"
)

// runEtcd runs a single etcd member with the settings of the server's
// embedded one, in a process of its own: the server's memory, collector
// and cores are then its own (docs/performance-history.md, "Twenty-eighth round").
func runEtcd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capstan etcd", flag.ContinueOnError)
	var dir, listen, peer, level string
	fs.StringVar(&dir, "data-dir", defaultDir("etcd", "capstan-etcd"), "directory for the member's data")
	fs.StringVar(&listen, "listen", "127.0.0.1:2379", "IP:PORT servers reach the member on, over TLS with the client certificate it generates (capstan server --etcd-endpoints https://IP:PORT)")
	fs.StringVar(&peer, "peer-listen", "127.0.0.1:2380", "IP:PORT of the member's peer URL (TLS, client certificates of its CA only)")
	fs.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	log, lvl, err := jsonLogger(level)
	if err != nil {
		return err
	}
	if err := store.CheckMemberAddr(listen); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if err := store.CheckMemberAddr(peer); err != nil {
		return fmt.Errorf("--peer-listen: %w", err)
	}
	if listen == peer {
		return fmt.Errorf("--listen and --peer-listen must differ (both %s)", listen)
	}
	// Absolute, for the flags printed below to work from anywhere.
	if dir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	m, err := store.StartMember(ctx, store.MemberConfig{Dir: dir, Listen: listen, PeerListen: peer,
		CompactEvery: store.CompactEvery, Logger: log, EtcdLogLevel: etcdLogLevel(lvl)})
	if err != nil {
		return err
	}
	t := m.ClientTLS()
	log.Info("capstan etcd ready", "client_url", m.ClientURL(), "data_dir", dir, "max_txn_ops", store.EmbeddedMaxTxnOps,
		"ca_cert", t.CACert, "client_cert", t.Cert)
	fmt.Fprintf(os.Stderr, "\nServers use it with (on other hosts, with copies of the three files; the key 0600):\n\n"+
		"  capstan server --etcd-endpoints %s --etcd-max-txn-ops %d --etcd-cacert %s --etcd-cert %s --etcd-key %s\n\n",
		m.ClientURL(), store.EmbeddedMaxTxnOps, t.CACert, t.Cert, t.Key)
	select {
	case <-ctx.Done():
		log.Info("shutting down")
		m.Close()
		return nil
	case err := <-m.Err():
		m.Close()
		return fmt.Errorf("etcd stopped: %w", err)
	}
}

// etcdLogLevel is the level of etcd's own log: its info is a line per
// raft step and request, so below warn only when asked for debug.
func etcdLogLevel(l slog.Level) string {
	switch {
	case l <= slog.LevelDebug:
		return "info"
	case l >= slog.LevelError:
		return "error"
	}
	return "warn"
}
