package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// EmbeddedMaxTxnOps is how many operations one transaction may hold on
// the embedded member; DefaultMaxTxnOps is etcd's default, assumed of an
// external cluster.
const (
	EmbeddedMaxTxnOps = 1024
	DefaultMaxTxnOps  = 128
)

// embedded is a single-member etcd running inside this process.
type embedded struct {
	etcd *embed.Etcd
	lock *os.File // the data dir's, held while etcd runs
	// sockDir holds the client socket when the data dir's path is too
	// long for one; removed on close.
	sockDir string
}

// memberOpts say where a member keeps its data and listens.
type memberOpts struct {
	dir string
	// listen and peerListen (IP:PORT), if set, serve clients and peers
	// over TLS that requires a certificate of the member's CA (tls.go);
	// without them the member serves clients on a unix socket in dir and
	// has no peer listener: a single member has no peers to hear.
	listen, peerListen string
	// etcdLog takes etcd's own log (nil: none).
	etcdLog *zap.Logger
	log     *slog.Logger
	// quota is the database's quota (0: etcd's default).
	quota int64
	// name, initialCluster and clusterState place the member in a
	// cluster (empty: a cluster of its own, named "capstan"); caDir, if
	// set, holds the CA its certificates are issued by, shared by every
	// member of the cluster.
	name, initialCluster, clusterState string
	caDir                              string
	// advertiseClient and advertisePeer (https://IP:PORT URLs) are what
	// the member tells clients and peers (empty: its listen addresses).
	advertiseClient, advertisePeer []string
}

// startMember starts etcd with its data in o.dir. The server talks to it
// in process; other clients (etcdctl) reach the embedded member on a unix
// socket in the dir, which only the dir's owner may enter: it has no TCP
// port, for whoever else is on the host to read and write the state
// through.
func startMember(ctx context.Context, o memberOpts) (*embedded, *clientv3.Client, error) {
	dir := o.dir
	if err := privateDir(dir); err != nil {
		return nil, nil, err
	}
	lock, err := lockDir(ctx, dir, o.log)
	if err != nil {
		return nil, nil, err
	}
	e, c, err := startLocked(ctx, o)
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	e.lock = lock
	return e, c, nil
}

// privateDir makes dir, or finds it, owned by this process's user and
// closed to everyone else: whoever may enter it may connect to the
// member's socket.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("etcd data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("etcd data dir: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("etcd data dir %s belongs to uid %d, not to this process's user (uid %d)", dir, st.Uid, os.Geteuid())
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("etcd data dir: %w", err)
	}
	return nil
}

// lockWait is how long a member waits for its data dir's lock: long
// enough for a process being restarted to finish exiting.
var lockWait = 10 * time.Second

// lockDir takes the data dir's lock, waiting at most lockWait. etcd waits
// for ever on its database's lock, so a second server or member started on
// a data dir in use hung, deaf to signals, instead of saying so.
func lockDir(ctx context.Context, dir string, log *slog.Logger) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("etcd data dir: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	for try := 0; ; try++ {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock etcd data dir %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("etcd data dir %s is in use by another process (a server or capstan etcd on the same data dir)", dir)
		}
		if try == 0 {
			log.Warn("etcd data dir in use; waiting for it", "dir", dir, "for", lockWait)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func startLocked(ctx context.Context, o memberOpts) (*embedded, *clientv3.Client, error) {
	dir := o.dir
	cfg := embed.NewConfig()
	cfg.Name = cmp.Or(o.name, "capstan")
	cfg.Dir = filepath.Join(dir, "data")
	e := &embedded{}
	if o.listen == "" {
		sock, sockDir, err := socketPath(dir)
		if err != nil {
			return nil, nil, err
		}
		e.sockDir = sockDir
		cu := url.URL{Scheme: "unix", Path: sock}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		// Named for the member's identity in a new cluster; nothing
		// listens there (a restarted member keeps the one it recorded).
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = nil, []url.URL{{Scheme: "unix", Path: filepath.Join(dir, "peer.sock")}}
		// Ports kept by earlier versions, which listened on 127.0.0.1.
		os.Remove(filepath.Join(dir, "ports"))
	} else {
		if o.caDir != "" {
			if err := adoptCA(dir, o.caDir); err != nil {
				return nil, nil, err
			}
		}
		f, err := ensureMemberTLS(dir, memberIPs(append([]string{o.listen, o.peerListen}, advertisedHosts(o)...)...))
		if err != nil {
			return nil, nil, err
		}
		cu, pu := url.URL{Scheme: "https", Host: o.listen}, url.URL{Scheme: "https", Host: o.peerListen}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		if err := setAdvertised(cfg, o); err != nil {
			return nil, nil, err
		}
		info := transport.TLSInfo{CertFile: f.Server, KeyFile: f.ServerKey, TrustedCAFile: f.CA, ClientCertAuth: true}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
	}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	clustered := o.initialCluster != ""
	if clustered {
		cfg.InitialCluster = o.initialCluster
		cfg.ClusterState = cmp.Or(o.clusterState, embed.ClusterStateFlagNew)
	}
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(cmp.Or(o.etcdLog, zap.NewNop()))
	// The history is compacted by compactLoop (compact.go), then the
	// database defragmented when quiet; etcd's own compaction is off.
	cfg.AutoCompactionRetention = "0"
	// A single member has no follower to catch up: keep fewer raft entries
	// (whole transactions) in memory. etcd snapshots to memory every 100
	// entries and keeps SnapshotCatchUpEntries behind it: 1,000 of the
	// fleet's transactions were ~30 MiB of live heap at 5,000 instances.
	cfg.SnapshotCount = 5000
	cfg.SnapshotCatchUpEntries = 100
	if clustered {
		// Followers that fall behind catch up from these entries rather
		// than from a whole snapshot of the database.
		cfg.SnapshotCatchUpEntries = 1000
	}
	// Bigger transactions than etcd's defaults (128 operations, 1.5 MiB):
	// placing thousands of tasks is bound by commits in sequence, not by
	// their size.
	cfg.MaxTxnOps = EmbeddedMaxTxnOps
	cfg.MaxRequestBytes = 8 << 20
	cfg.QuotaBackendBytes = o.quota
	var err error
	e.etcd, err = embed.StartEtcd(cfg)
	if err != nil {
		e.removeSockDir()
		return nil, nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.etcd.Server.ReadyNotify():
	case err := <-e.etcd.Err():
		e.close()
		return nil, nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(60 * time.Second):
		e.close()
		return nil, nil, errors.New("embedded etcd: not ready after 60s")
	case <-ctx.Done():
		e.close()
		return nil, nil, ctx.Err()
	}
	if o.listen == "" {
		// etcd makes the socket as the umask has it; the dir already
		// keeps others out, this says so twice.
		if err := os.Chmod(cfg.ListenClientUrls[0].Path, 0o600); err != nil {
			e.close()
			return nil, nil, fmt.Errorf("embedded etcd socket: %w", err)
		}
	}
	// Where etcdctl and tests find the member (the socket's path, or
	// the TCP one).
	if err := os.WriteFile(filepath.Join(dir, "client-url"), []byte(e.clientURL()+"\n"), 0o600); err != nil {
		e.close()
		return nil, nil, fmt.Errorf("record etcd client URL: %w", err)
	}
	return e, v3client.New(e.etcd.Server), nil
}

// socketPath is where the member's client socket goes: in dir, or, when
// dir's path is too long for a socket's, in a private dir of its own
// (sockDir, to remove on close).
func socketPath(dir string) (sock, sockDir string, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	sock = filepath.Join(abs, "etcd.sock")
	if len(sock) < len(syscall.RawSockaddrUnix{}.Path) {
		return sock, "", nil
	}
	sockDir, err = os.MkdirTemp("", "capstan-etcd-")
	if err != nil {
		return "", "", fmt.Errorf("etcd socket dir: %w", err)
	}
	sock = filepath.Join(sockDir, "etcd.sock")
	if len(sock) >= len(syscall.RawSockaddrUnix{}.Path) {
		os.Remove(sockDir)
		return "", "", fmt.Errorf("etcd socket: neither %s nor %s is short enough for a unix socket's path", dir, sockDir)
	}
	return sock, sockDir, nil
}

func (e *embedded) removeSockDir() {
	if e.sockDir != "" {
		os.RemoveAll(e.sockDir)
	}
}

func (e *embedded) close() {
	e.etcd.Close()
	e.removeSockDir()
	if e.lock != nil {
		e.lock.Close()
	}
}

// Member is an etcd member with the embedded one's settings, serving
// servers in other processes: `capstan etcd`, and the scale benchmark's
// member in a process of its own.
type Member struct {
	e         *embedded
	client    *clientv3.Client
	log       *slog.Logger
	tls       TLSFiles
	defrags   defragger
	compacted atomic.Int64
	etcdLevel *zap.AtomicLevel // nil: etcd's log is off
	stop      context.CancelFunc
	done      chan struct{}
	// clustered: the member has peers, and defragments only while it
	// holds the cluster's defragmentation lock (defrag.go).
	clustered bool
}

// MemberConfig says where a member keeps its data and listens.
type MemberConfig struct {
	Dir string
	// Listen and PeerListen (IP:PORT) are where it serves servers and
	// peers, over TLS requiring a client certificate of a CA it generates
	// into Dir/tls on first start (MemberTLSFiles; ClientTLS names what
	// servers present). Without them it serves on a unix socket in Dir
	// only, as the embedded member does.
	Listen, PeerListen string
	// CompactEvery is how often the member compacts its own history:
	// its servers cannot compact it behind their caches. Required.
	CompactEvery time.Duration
	// DefragMinBytes is the smallest database the member defragments
	// when quiet (0: DefragMinBytes).
	DefragMinBytes int64
	Logger         *slog.Logger
	// EtcdLogLevel, if set (debug, info, warn or error), writes etcd's
	// own log at that level to stderr: slow disks, long applies, alarms.
	EtcdLogLevel string
	// Name, InitialCluster (name=https://IP:PORT,... of every member's
	// peer URL) and InitialClusterState (new, or existing to join a
	// running cluster) make the member one of a cluster; they need
	// Listen and PeerListen. CADir holds the CA (ca.crt, ca.key from
	// WriteCA) every member's certificates are issued by, copied into
	// Dir/tls on first start.
	Name, InitialCluster, InitialClusterState string
	CADir                                     string
	// AdvertiseClientURLs and AdvertisePeerURLs (https://IP:PORT each)
	// are what the member tells clients and peers, for a member that
	// listens on an address others do not reach it by (empty: the
	// listen addresses). They need Listen (advertise.go).
	AdvertiseClientURLs, AdvertisePeerURLs []string
}

// StartMember starts a member. Until Close it compacts its history every
// CompactEvery, keeping one to two periods of it as the embedded member
// does, and defragments its database by the same rules (defrag.go).
func StartMember(ctx context.Context, cfg MemberConfig) (*Member, error) {
	if cfg.CompactEvery <= 0 {
		return nil, errors.New("store: a member needs a compaction period")
	}
	o := memberOpts{dir: cfg.Dir, listen: cfg.Listen, peerListen: cfg.PeerListen,
		name: cfg.Name, initialCluster: cfg.InitialCluster, clusterState: cfg.InitialClusterState, caDir: cfg.CADir,
		advertiseClient: cfg.AdvertiseClientURLs, advertisePeer: cfg.AdvertisePeerURLs}
	if cfg.InitialCluster != "" && cfg.Listen == "" {
		return nil, errors.New("store: a member of a cluster needs client and peer addresses")
	}
	if cfg.InitialCluster != "" && cfg.CADir == "" {
		return nil, errors.New("store: the members of a cluster need a CA they share (CADir)")
	}
	switch cfg.InitialClusterState {
	case "", embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting:
	default:
		return nil, fmt.Errorf("store: the initial cluster state must be new or existing (got %q)", cfg.InitialClusterState)
	}
	var etcdLevel *zap.AtomicLevel
	if cfg.EtcdLogLevel != "" {
		lvl, err := zapcore.ParseLevel(cfg.EtcdLogLevel)
		if err != nil {
			return nil, fmt.Errorf("store: etcd's log level: %w", err)
		}
		zc := zap.NewProductionConfig()
		zc.Level = zap.NewAtomicLevelAt(lvl)
		etcdLevel = &zc.Level
		zc.Sampling = nil
		if o.etcdLog, err = zc.Build(); err != nil {
			return nil, fmt.Errorf("store: etcd's log: %w", err)
		}
	}
	if (cfg.Listen == "") != (cfg.PeerListen == "") {
		return nil, errors.New("store: a member's client and peer addresses go together")
	}
	var files TLSFiles
	if cfg.Listen != "" {
		if err := CheckMemberAddr(cfg.Listen); err != nil {
			return nil, fmt.Errorf("store: the member's client address: %w", err)
		}
		if err := CheckMemberAddr(cfg.PeerListen); err != nil {
			return nil, fmt.Errorf("store: the member's peer address: %w", err)
		}
		files = MemberTLSFiles(cfg.Dir).Client
	}
	if err := checkAdvertised(cfg); err != nil {
		return nil, err
	}
	o.log = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	e, c, err := startMember(ctx, o)
	if err != nil {
		return nil, err
	}
	m := &Member{e: e, client: c, log: o.log, tls: files, etcdLevel: etcdLevel, done: make(chan struct{}), clustered: cfg.InitialCluster != ""}
	m.defrags.minBytes = cmp.Or(cfg.DefragMinBytes, DefragMinBytes)
	run, stop := context.WithCancel(context.Background())
	m.stop = stop
	go func() { defer close(m.done); m.maintain(run, cfg.CompactEvery) }()
	return m, nil
}

// CheckMemberAddr says why addr cannot be a member's listen address:
// etcd binds to an IP and a port, not a name.
func CheckMemberAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be IP:PORT (got %q)", addr)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Errorf("must name an IP address, not %q", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("needs a port from 1 to 65535 (got %q)", port)
	}
	return nil
}

// maintain compacts the member's history and defragments its database
// as the store does its embedded member's.
func (m *Member) maintain(ctx context.Context, every time.Duration) {
	srv := m.e.etcd.Server
	compactLoop(ctx, every, m.client, srv.KV().Rev, m.compacted.Store, func(revs int64) {
		if m.clustered {
			defragOneAtATime(ctx, srv, m.client, &m.defrags, revs, every, m.log)
			return
		}
		defragIfDue(srv, &m.defrags, revs, every, m.log)
	}, m.log)
}

// Compacted is the revision the member last compacted its history to.
func (m *Member) Compacted() int64 { return m.compacted.Load() }

// ClientURL is where servers reach the member: https://IP:PORT, or the
// unix:// URL of its socket.
func (m *Member) ClientURL() string { return m.e.clientURL() }

// ClientTLS names the files a server presents to a member on TCP
// (store.Config.TLS); empty for one on a socket.
func (m *Member) ClientTLS() TLSFiles { return m.tls }

// Err reports the member stopping on its own.
func (m *Member) Err() <-chan error { return m.e.etcd.Err() }

// Defrags are the member's defragmentations so far.
func (m *Member) Defrags() []Defrag { return m.defrags.list() }

// Close stops the member.
func (m *Member) Close() {
	if m.etcdLevel != nil {
		// etcd logs its listeners' closing as errors.
		m.etcdLevel.SetLevel(zapcore.FatalLevel)
	}
	m.stop()
	<-m.done
	m.client.Close()
	m.e.close()
}

// clientURL is where etcdctl can reach the member.
func (e *embedded) clientURL() string { return e.etcd.Config().AdvertiseClientUrls[0].String() }
