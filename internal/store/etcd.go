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
	"strings"
	"sync/atomic"
	"syscall"
	"time"

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
}

// startEmbedded starts etcd with its data in dir. Ports are chosen once and
// kept in dir so that a restarted member finds the peer URL it recorded.
func startEmbedded(ctx context.Context, dir string, log *slog.Logger) (*embedded, *clientv3.Client, error) {
	return startMember(ctx, memberOpts{dir: dir, log: log})
}

// memberOpts say where a member keeps its data and listens; without URLs
// it takes the ports recorded in dir, or free ones.
type memberOpts struct {
	dir                string
	clientURL, peerURL *url.URL
	// etcdLog takes etcd's own log (nil: none, as when embedded: the
	// server reports what matters through its store).
	etcdLog *zap.Logger
	log     *slog.Logger
}

func startMember(ctx context.Context, o memberOpts) (*embedded, *clientv3.Client, error) {
	for attempt := 0; ; attempt++ {
		e, c, err := startEmbeddedOnce(ctx, o)
		// Ports are picked free, then bound by etcd a moment later: another
		// process can take one between. New ones are picked; ports the
		// caller chose are its to fix.
		if errors.Is(err, syscall.EADDRINUSE) && o.clientURL == nil && attempt < 3 {
			os.Remove(filepath.Join(o.dir, "ports"))
			continue
		}
		return e, c, err
	}
}

func startEmbeddedOnce(ctx context.Context, o memberOpts) (*embedded, *clientv3.Client, error) {
	dir := o.dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("etcd data dir: %w", err)
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
	cu, pu := o.clientURL, o.peerURL
	if cu == nil {
		clientPort, peerPort, err := ports(filepath.Join(dir, "ports"))
		if err != nil {
			return nil, nil, err
		}
		cu, _ = url.Parse("http://127.0.0.1:" + strconv.Itoa(clientPort))
		pu, _ = url.Parse("http://127.0.0.1:" + strconv.Itoa(peerPort))
	}
	cfg := embed.NewConfig()
	cfg.Name = "capstan"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
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
	// Bigger transactions than etcd's defaults (128 operations, 1.5 MiB):
	// placing thousands of tasks is bound by commits in sequence, not by
	// their size.
	cfg.MaxTxnOps = EmbeddedMaxTxnOps
	cfg.MaxRequestBytes = 8 << 20
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, nil, errors.New("embedded etcd: not ready after 60s")
	case <-ctx.Done():
		e.Close()
		return nil, nil, ctx.Err()
	}
	return &embedded{etcd: e}, v3client.New(e.Server), nil
}

func (e *embedded) close() {
	e.etcd.Close()
	e.lock.Close()
}

// Member is an etcd member with the embedded one's settings, serving
// servers in other processes: `capstan etcd`, and the scale benchmark's
// member in a process of its own.
type Member struct {
	e         *embedded
	client    *clientv3.Client
	log       *slog.Logger
	defrags   defragger
	compacted atomic.Int64
	etcdLevel *zap.AtomicLevel // nil: etcd's log is off
	stop      context.CancelFunc
	done      chan struct{}
}

// MemberConfig says where a member keeps its data and listens.
type MemberConfig struct {
	Dir string
	// ClientURL and PeerURL (http://IP:PORT) are where it listens; without
	// them it takes ports on 127.0.0.1 picked once and kept in Dir.
	ClientURL, PeerURL string
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
}

// StartMember starts a member. Until Close it compacts its history every
// CompactEvery, keeping one to two periods of it as the embedded member
// does, and defragments its database by the same rules (defrag.go).
func StartMember(ctx context.Context, cfg MemberConfig) (*Member, error) {
	if cfg.CompactEvery <= 0 {
		return nil, errors.New("store: a member needs a compaction period")
	}
	o := memberOpts{dir: cfg.Dir}
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
	if (cfg.ClientURL == "") != (cfg.PeerURL == "") {
		return nil, errors.New("store: a member's client and peer URLs go together")
	}
	if cfg.ClientURL != "" {
		var err error
		if o.clientURL, err = memberURL("client", cfg.ClientURL); err != nil {
			return nil, err
		}
		if o.peerURL, err = memberURL("peer", cfg.PeerURL); err != nil {
			return nil, err
		}
	}
	o.log = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	e, c, err := startMember(ctx, o)
	if err != nil {
		return nil, err
	}
	m := &Member{e: e, client: c, log: o.log, etcdLevel: etcdLevel, done: make(chan struct{})}
	m.defrags.minBytes = cmp.Or(cfg.DefragMinBytes, DefragMinBytes)
	run, stop := context.WithCancel(context.Background())
	m.stop = stop
	go func() { defer close(m.done); m.maintain(run, cfg.CompactEvery) }()
	return m, nil
}

// memberURL checks a listen URL.
func memberURL(what, raw string) (*url.URL, error) {
	u, err := CheckMemberURL(raw)
	if err != nil {
		return nil, fmt.Errorf("store: the member's %s URL: %w", what, err)
	}
	return u, nil
}

// CheckMemberURL says why raw cannot be a member's listen URL: etcd binds
// to an IP and a port, not a name.
func CheckMemberURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("must be http://IP:PORT (got %q)", raw)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("must be http://IP:PORT (got %q)", raw)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return nil, fmt.Errorf("must name an IP address, not %q", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("needs a port from 1 to 65535 (got %q)", port)
	}
	return &url.URL{Scheme: "http", Host: u.Host}, nil
}

// maintain compacts the member's history and defragments its database
// as the store does its embedded member's.
func (m *Member) maintain(ctx context.Context, every time.Duration) {
	srv := m.e.etcd.Server
	compactLoop(ctx, every, m.client, srv.KV().Rev, m.compacted.Store, func(revs int64) {
		defragIfDue(srv, &m.defrags, revs, every, m.log)
	}, m.log)
}

// Compacted is the revision the member last compacted its history to.
func (m *Member) Compacted() int64 { return m.compacted.Load() }

// ClientURL is where servers reach the member.
func (m *Member) ClientURL() string { return m.e.clientURL() }

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

// ClientURL is where etcdctl can reach the embedded member.
func (e *embedded) clientURL() string { return e.etcd.Config().AdvertiseClientUrls[0].String() }

// ports reads the recorded client and peer ports, or picks free ones.
func ports(path string) (int, int, error) {
	if b, err := os.ReadFile(path); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 {
			c, err1 := strconv.Atoi(f[0])
			p, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && free(c) && free(p) {
				return c, p, nil
			}
		}
	}
	c, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	p, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%d %d\n", c, p)), 0o600); err != nil {
		return 0, 0, fmt.Errorf("record etcd ports: %w", err)
	}
	return c, p, nil
}

func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick etcd port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
