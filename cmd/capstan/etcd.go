package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/capstanhq/capstan/internal/store"
)

// runEtcd runs a single etcd member with the settings of the server's
// embedded one, in a process of its own: the server's memory, collector
// and cores are then its own (docs/performance-history.md, "Twenty-eighth round").
func runEtcd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capstan etcd", flag.ContinueOnError)
	var dir, listen, peer, level string
	fs.StringVar(&dir, "data-dir", defaultDir("etcd", "capstan-etcd"), "directory for the member's data")
	fs.StringVar(&listen, "listen", "127.0.0.1:2379", "IP:PORT servers reach the member on (capstan server --etcd-endpoints http://IP:PORT)")
	fs.StringVar(&peer, "peer-listen", "127.0.0.1:2380", "IP:PORT of the member's peer URL")
	fs.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	log, lvl, err := jsonLogger(level)
	if err != nil {
		return err
	}
	if _, err := store.CheckMemberURL("http://" + listen); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if _, err := store.CheckMemberURL("http://" + peer); err != nil {
		return fmt.Errorf("--peer-listen: %w", err)
	}
	if listen == peer {
		return fmt.Errorf("--listen and --peer-listen must differ (both %s)", listen)
	}
	m, err := store.StartMember(ctx, store.MemberConfig{Dir: dir, ClientURL: "http://" + listen, PeerURL: "http://" + peer,
		CompactEvery: store.CompactEvery, Logger: log, EtcdLogLevel: etcdLogLevel(lvl)})
	if err != nil {
		return err
	}
	log.Info("capstan etcd ready", "client_url", m.ClientURL(), "data_dir", dir, "max_txn_ops", store.EmbeddedMaxTxnOps)
	fmt.Fprintf(os.Stderr, "\nServers use it with:\n\n  capstan server --etcd-endpoints %s --etcd-max-txn-ops %d\n\n", m.ClientURL(), store.EmbeddedMaxTxnOps)
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
