package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/capstanhq/capstan/internal/store"
)

// runEtcd runs a single etcd member with the settings of the server's
// embedded one, in a process of its own: the server's memory, collector
// and cores are then its own (docs/performance-history.md, "Twenty-eighth round").
func runEtcd(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "ca":
			return runEtcdCA(args[1:])
		case "member":
			return runEtcdMember(ctx, args[1:])
		case "snapshot":
			return runEtcdSnapshot(ctx, args[1:])
		}
	}
	fs := flag.NewFlagSet("capstan etcd", flag.ContinueOnError)
	var dir, listen, peer, level string
	var name, initial, state, caDir string
	var advClient, advPeer string
	var defragMin int64
	fs.StringVar(&name, "name", "capstan", "the member's name in its cluster")
	fs.StringVar(&initial, "initial-cluster", "", "every member's NAME=https://PEER-IP:PORT, comma-separated, to form or join a cluster (needs --ca-dir)")
	fs.StringVar(&state, "initial-cluster-state", "new", "new to form the cluster, existing to join a running one (after 'capstan etcd member add')")
	fs.StringVar(&caDir, "ca-dir", "", "directory holding the cluster's CA (ca.crt, ca.key from 'capstan etcd ca'), the same on every member")
	fs.Int64Var(&defragMin, "defrag-min-bytes", store.DefragMinBytes, "smallest database the member defragments when quiet")
	fs.StringVar(&dir, "data-dir", defaultDir("etcd", "capstan-etcd"), "directory for the member's data")
	fs.StringVar(&listen, "listen", "127.0.0.1:2379", "IP:PORT servers reach the member on, over TLS with the client certificate it generates (capstan server --etcd-endpoints https://IP:PORT)")
	fs.StringVar(&peer, "peer-listen", "127.0.0.1:2380", "IP:PORT of the member's peer URL (TLS, client certificates of its CA only)")
	fs.StringVar(&advClient, "advertise-client-urls", "", "https://IP:PORT URLs servers and other members reach the member's --listen by, comma-separated (default: https://LISTEN)")
	fs.StringVar(&advPeer, "initial-advertise-peer-urls", "", "https://IP:PORT URLs peers reach the member's --peer-listen by, comma-separated; --initial-cluster names these (default: https://PEER-LISTEN)")
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
	if state != "new" && state != "existing" {
		return fmt.Errorf("--initial-cluster-state must be new or existing (got %q)", state)
	}
	if defragMin < 1 {
		return fmt.Errorf("--defrag-min-bytes must be at least 1 (got %d)", defragMin)
	}
	var clientURLs, peerURLs []string
	if advClient != "" {
		if clientURLs, err = store.ParseAdvertiseURLs(advClient); err != nil {
			return fmt.Errorf("--advertise-client-urls: %w", err)
		}
	}
	if advPeer != "" {
		if peerURLs, err = store.ParseAdvertiseURLs(advPeer); err != nil {
			return fmt.Errorf("--initial-advertise-peer-urls: %w", err)
		}
	}
	if initial != "" {
		if err := checkInitialCluster(initial, name, peer, peerURLs); err != nil {
			return fmt.Errorf("--initial-cluster: %w", err)
		}
		if caDir == "" {
			return errors.New("--initial-cluster needs --ca-dir: the members' certificates must come from one CA ('capstan etcd ca')")
		}
		// Peers and servers are told these addresses unless others are
		// advertised: an unspecified IP reaches nobody.
		for _, x := range []struct {
			flag, addr, adv string
			urls            []string
		}{{"--listen", listen, "--advertise-client-urls", clientURLs}, {"--peer-listen", peer, "--initial-advertise-peer-urls", peerURLs}} {
			if ap, err := netip.ParseAddrPort(x.addr); err == nil && ap.Addr().IsUnspecified() && len(x.urls) == 0 {
				return fmt.Errorf("%s: a member of a cluster listening on %s must say the IP others reach it on with %s", x.flag, ap.Addr(), x.adv)
			}
		}
	}
	// Absolute, for the flags printed below to work from anywhere.
	if dir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if caDir != "" {
		if caDir, err = filepath.Abs(caDir); err != nil {
			return fmt.Errorf("--ca-dir: %w", err)
		}
	}
	m, err := store.StartMember(ctx, store.MemberConfig{Dir: dir, Listen: listen, PeerListen: peer,
		CompactEvery: store.CompactEvery, DefragMinBytes: defragMin, Logger: log, EtcdLogLevel: etcdLogLevel(lvl),
		Name: name, InitialCluster: initial, InitialClusterState: state, CADir: caDir,
		AdvertiseClientURLs: clientURLs, AdvertisePeerURLs: peerURLs})
	if err != nil {
		return err
	}
	t := m.ClientTLS()
	log.Info("capstan etcd ready", "name", name, "client_url", m.ClientURL(), "data_dir", dir, "max_txn_ops", store.EmbeddedMaxTxnOps,
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

// checkInitialCluster says what is wrong with an --initial-cluster list:
// NAME=https://IP:PORT items, names unique, this member's among them with
// its advertised peer URLs (else its --peer-listen), as etcd requires.
func checkInitialCluster(list, name, peer string, peerURLs []string) error {
	seen := map[string]bool{}
	mine := false
	var listed []string // this member's peer URLs in the list
	for _, item := range strings.Split(list, ",") {
		n, u, ok := strings.Cut(item, "=")
		host, https := strings.CutPrefix(u, "https://")
		if !ok || n == "" || !https {
			return fmt.Errorf("each member must be NAME=https://IP:PORT (got %q)", item)
		}
		if err := store.CheckMemberAddr(host); err != nil {
			return fmt.Errorf("member %s: %w", n, err)
		}
		// A member advertising several peer URLs is named once for each.
		if seen[n] && (n != name || len(peerURLs) < 2) {
			return fmt.Errorf("member %s is named twice", n)
		}
		seen[n] = true
		if n == name {
			mine = true
			listed = append(listed, "https://"+host)
		}
	}
	if !mine {
		return fmt.Errorf("does not name this member (--name %s)", name)
	}
	if len(peerURLs) == 0 {
		if len(listed) != 1 || listed[0] != "https://"+peer {
			return fmt.Errorf("names this member (%s) with %s, but --peer-listen is %s", name, strings.Join(listed, ","), peer)
		}
		return nil
	}
	if !slices.Equal(slices.Sorted(slices.Values(listed)), slices.Sorted(slices.Values(peerURLs))) {
		return fmt.Errorf("names this member (%s) with %s, but --initial-advertise-peer-urls is %s", name, strings.Join(listed, ","), strings.Join(peerURLs, ","))
	}
	return nil
}

// runEtcdCA writes the CA the members of a cluster share.
func runEtcdCA(args []string) error {
	fs := flag.NewFlagSet("capstan etcd ca", flag.ContinueOnError)
	var dir string
	fs.StringVar(&dir, "dir", "", "directory to write ca.crt and ca.key into (required); copy it to every member's host, the key 0600")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if dir == "" {
		return &usageError{err: errors.New("--dir is required"), cmd: fs.Name()}
	}
	cert, key, err := store.WriteCA(dir)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s: start every member with --ca-dir %s (a copy of it on each host)\n", cert, key, dir)
	return nil
}

// memberConn parses the flags that reach a running cluster.
func memberConn(ctx context.Context, name string, args []string, extra func(*flag.FlagSet)) (*store.Members, *flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var dir, endpoints string
	var files store.TLSFiles
	fs.StringVar(&dir, "data-dir", defaultDir("etcd", "capstan-etcd"), "a member's data dir: its client certificate, and its address unless --endpoints")
	fs.StringVar(&endpoints, "endpoints", "", "members' client URLs (https://IP:PORT), comma-separated")
	fs.StringVar(&files.CACert, "cacert", "", "CA certificate (default: the data dir's)")
	fs.StringVar(&files.Cert, "cert", "", "client certificate (default: the data dir's)")
	fs.StringVar(&files.Key, "key", "", "client certificate's key (default: the data dir's)")
	if extra != nil {
		extra(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	if own := store.MemberTLSFiles(dir).Client; files.Empty() {
		// A server's embedded member, on its socket, has no certificates.
		if _, err := os.Stat(own.Cert); err == nil {
			files = own
		}
	}
	if endpoints == "" {
		b, err := os.ReadFile(filepath.Join(dir, "client-url"))
		if err != nil {
			return nil, nil, fmt.Errorf("--endpoints not given, and no member's address in --data-dir: %w", err)
		}
		endpoints = strings.TrimSpace(string(b))
	}
	m, err := store.DialMembers(ctx, strings.Split(endpoints, ","), files)
	return m, fs, err
}

// runEtcdMember lists, adds and removes a cluster's members.
func runEtcdMember(ctx context.Context, args []string) error {
	verb := ""
	if len(args) > 0 {
		verb = args[0]
	}
	switch verb {
	case "-h", "-help", "--help", "help":
		fmt.Print(etcdMemberUsage)
		return nil
	case "list":
		m, fs, err := memberConn(ctx, "capstan etcd member list", args[1:], nil)
		if err != nil {
			return err
		}
		defer m.Close()
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected argument %q", fs.Arg(0))
		}
		list, err := m.List(ctx)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tNAME\tPEER URL\tCLIENT URL\tLEADER")
		for _, x := range list {
			fmt.Fprintf(w, "%x\t%s\t%s\t%s\t%v\n", x.ID, x.Name, strings.Join(x.PeerURLs, ","), strings.Join(x.ClientURLs, ","), x.Leader)
		}
		return w.Flush()
	case "add":
		var name, peerURL string
		m, fs, err := memberConn(ctx, "capstan etcd member add", args[1:], func(fs *flag.FlagSet) {
			fs.StringVar(&name, "name", "", "the new member's --name (required)")
			fs.StringVar(&peerURL, "peer-url", "", "the new member's peer URL, https://IP:PORT of its --peer-listen (required)")
		})
		if err != nil {
			return err
		}
		defer m.Close()
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected argument %q", fs.Arg(0))
		}
		if name == "" || peerURL == "" {
			return &usageError{err: errors.New("--name and --peer-url are required"), cmd: fs.Name()}
		}
		initial, err := m.Add(ctx, name, peerURL)
		if err != nil {
			return err
		}
		fmt.Printf("added %s; start it, with a fresh data dir and the cluster's --ca-dir, with:\n\n  --name %s --initial-cluster %s --initial-cluster-state existing\n", name, name, initial)
		return nil
	case "remove":
		m, fs, err := memberConn(ctx, "capstan etcd member remove", args[1:], nil)
		if err != nil {
			return err
		}
		defer m.Close()
		if fs.NArg() != 1 {
			return &usageError{err: errors.New("name the member to remove (NAME or hex ID)"), cmd: fs.Name()}
		}
		x, err := m.Remove(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Printf("removed %s (%x)\n", x.Name, x.ID)
		return nil
	}
	return &usageError{err: fmt.Errorf("unknown verb %q: list, add or remove", verb), cmd: "capstan etcd member"}
}

const etcdMemberUsage = `Usage:
  capstan etcd member list [flags]
  capstan etcd member add [flags] --name NAME --peer-url https://IP:PORT
  capstan etcd member remove [flags] NAME|ID

Flags come before the member's name. Run 'capstan etcd member VERB --help'
for a verb's flags (how to reach the cluster: a member's --data-dir, or
--endpoints with certificate flags).
`

// runEtcdSnapshot saves a snapshot of a member's database, or restores
// one into a data dir.
func runEtcdSnapshot(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "restore" {
		return runEtcdRestore(args[1:])
	}
	if len(args) == 0 || args[0] != "save" {
		return &usageError{err: errors.New("capstan etcd snapshot save|restore FILE [flags]"), cmd: "capstan etcd snapshot"}
	}
	m, fs, err := memberConn(ctx, "capstan etcd snapshot save", args[1:], nil)
	if err != nil {
		return err
	}
	defer m.Close()
	if fs.NArg() != 1 {
		return &usageError{err: errors.New("name the file to write"), cmd: fs.Name()}
	}
	n, err := m.Snapshot(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (%d bytes)\n", fs.Arg(0), n)
	return nil
}

// runEtcdRestore writes a member's data dir from a snapshot, offline.
func runEtcdRestore(args []string) error {
	fs := flag.NewFlagSet("capstan etcd snapshot restore", flag.ContinueOnError)
	var cfg store.RestoreConfig
	fs.StringVar(&cfg.Dir, "data-dir", "", "the member's data dir to write (a server's DATA/etcd, or capstan etcd's --data-dir); its data must not exist yet (required)")
	fs.StringVar(&cfg.Name, "name", "", "the member's --name, with --initial-cluster (default: a server's embedded member)")
	fs.StringVar(&cfg.InitialCluster, "initial-cluster", "", "every member's NAME=https://PEER-IP:PORT of the restored cluster, as the members will be started with")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{err: errors.New("name the snapshot file to restore"), cmd: fs.Name()}
	}
	if cfg.Dir == "" {
		return &usageError{err: errors.New("--data-dir is required"), cmd: fs.Name()}
	}
	cfg.Snapshot = fs.Arg(0)
	if err := store.RestoreSnapshot(cfg); err != nil {
		return err
	}
	fmt.Printf("restored %s into %s\n", cfg.Snapshot, filepath.Join(cfg.Dir, "data"))
	return nil
}
