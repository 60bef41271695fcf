package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
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
}

// startEmbedded starts etcd with its data in dir. Ports are chosen once and
// kept in dir so that a restarted member finds the peer URL it recorded.
func startEmbedded(ctx context.Context, dir string) (*embedded, *clientv3.Client, error) {
	return startMember(ctx, dir, 0)
}

// startMember starts the member; compactEvery > 0 has etcd compact its own
// history that often (no store in this process compacts it).
func startMember(ctx context.Context, dir string, compactEvery time.Duration) (*embedded, *clientv3.Client, error) {
	for attempt := 0; ; attempt++ {
		e, c, err := startEmbeddedOnce(ctx, dir, compactEvery)
		// Ports are picked free, then bound by etcd a moment later: another
		// process can take one between. New ones are picked.
		if errors.Is(err, syscall.EADDRINUSE) && attempt < 3 {
			os.Remove(filepath.Join(dir, "ports"))
			continue
		}
		return e, c, err
	}
}

func startEmbeddedOnce(ctx context.Context, dir string, compactEvery time.Duration) (*embedded, *clientv3.Client, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("etcd data dir: %w", err)
	}
	clientPort, peerPort, err := ports(filepath.Join(dir, "ports"))
	if err != nil {
		return nil, nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "capstan"
	cfg.Dir = filepath.Join(dir, "data")
	cu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(clientPort))
	pu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(peerPort))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// The store compacts the history itself (compact.go), behind what its
	// cache has applied; etcd's own periodic compaction is off.
	cfg.AutoCompactionRetention = "0"
	if compactEvery > 0 {
		cfg.AutoCompactionMode = embed.CompactorModePeriodic
		cfg.AutoCompactionRetention = compactEvery.String()
	}
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

func (e *embedded) close() { e.etcd.Close() }

// Member is an etcd member with the embedded one's settings, serving
// servers in other processes (the scale benchmark runs one to measure a
// server whose etcd is not in its process).
type Member struct {
	e      *embedded
	client *clientv3.Client
}

// StartMember starts a member with its data in dir. Its servers cannot
// compact it behind their caches, so etcd compacts its history every
// compactEvery itself.
func StartMember(ctx context.Context, dir string, compactEvery time.Duration) (*Member, error) {
	if compactEvery <= 0 {
		return nil, errors.New("store: a member needs a compaction period")
	}
	e, c, err := startMember(ctx, dir, compactEvery)
	if err != nil {
		return nil, err
	}
	return &Member{e: e, client: c}, nil
}

// ClientURL is where servers reach the member.
func (m *Member) ClientURL() string { return m.e.clientURL() }

// Close stops the member.
func (m *Member) Close() {
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
