package fault

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/capstanhq/capstan/internal/testenv"
)

// etcdMember is one `capstan etcd` process of a three-member cluster, as
// an operator starts it (docs/operations.md).
type etcdMember struct {
	name, dir, listen, peer string
	args                    []string
	cmd                     *exec.Cmd
	done                    chan struct{}
	log                     *lockedBuffer
}

func (m *etcdMember) start(t *testing.T, bin string) {
	t.Helper()
	m.cmd = exec.Command(bin, m.args...)
	m.log = &lockedBuffer{}
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.done = make(chan struct{})
	cmd, done := m.cmd, m.done
	go func() { cmd.Wait(); close(done) }()
}

// awaitReady waits for the member's ready line (a quorum is up).
func (m *etcdMember) awaitReady(t *testing.T) {
	t.Helper()
	eventually(t, 90*time.Second, "member "+m.name+" ready", func() bool {
		select {
		case <-m.done:
			t.Fatalf("member %s exited during start:\n%s", m.name, m.log)
		default:
		}
		return strings.Contains(m.log.String(), "capstan etcd ready")
	})
}

func (m *etcdMember) kill9() {
	m.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies too
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
}

func (m *etcdMember) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := m.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s to member %s: %v", sig, m.name, err)
	}
}

// etcdCluster is three `capstan etcd` members with TLS from one CA.
type etcdCluster struct {
	t       *testing.T
	bin     string
	members []*etcdMember
	tlsDir  string // a member's: its client certificate serves any server
	client  *clientv3.Client
}

func startEtcdCluster(t *testing.T, bin string) *etcdCluster {
	t.Helper()
	caDir := filepath.Join(t.TempDir(), "ca")
	if out, err := exec.Command(bin, "etcd", "ca", "--dir", caDir).CombinedOutput(); err != nil {
		t.Fatalf("capstan etcd ca: %v\n%s", err, out)
	}
	c := &etcdCluster{t: t, bin: bin}
	var initial []string
	for _, n := range []string{"e1", "e2", "e3"} {
		m := &etcdMember{name: n, dir: t.TempDir(), listen: freeAddr(t), peer: freeAddr(t)}
		c.members = append(c.members, m)
		initial = append(initial, n+"=https://"+m.peer)
	}
	for _, m := range c.members {
		m.args = []string{"etcd", "--name", m.name, "--data-dir", m.dir, "--listen", m.listen, "--peer-listen", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--ca-dir", caDir}
		m.start(t, bin)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.kill9()
		}
	})
	for _, m := range c.members {
		m.awaitReady(t)
	}
	c.tlsDir = filepath.Join(c.members[0].dir, "tls")
	c.client = c.dial(c.endpoints()...)
	return c
}

func (c *etcdCluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, "https://"+m.listen)
	}
	return eps
}

// serverFlags are a server's flags to reach the members at endpoints.
func (c *etcdCluster) serverFlags(endpoints []string) []string {
	return []string{"--etcd-endpoints", strings.Join(endpoints, ","), "--etcd-max-txn-ops", "1024",
		"--etcd-cacert", filepath.Join(c.tlsDir, "ca.crt"), "--etcd-cert", filepath.Join(c.tlsDir, "client.crt"),
		"--etcd-key", filepath.Join(c.tlsDir, "client.key")}
}

func (c *etcdCluster) dial(endpoints ...string) *clientv3.Client {
	c.t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(c.tlsDir, "ca.crt"))
	if err != nil {
		c.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(filepath.Join(c.tlsDir, "client.crt"), filepath.Join(c.tlsDir, "client.key"))
	if err != nil {
		c.t.Fatal(err)
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// leader asks each member for its status (the maintenance API) and
// returns the member the live ones agree leads.
func (c *etcdCluster) leader() *etcdMember {
	c.t.Helper()
	var lead *etcdMember
	eventually(c.t, 30*time.Second, "an etcd leader", func() bool {
		for _, m := range c.members {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := c.client.Status(ctx, "https://"+m.listen)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				lead = m
				return true
			}
		}
		return false
	})
	return lead
}

// etcdProxy forwards TCP to one member and can cut every connection
// through it at once, holding their bytes (a partition: nothing is closed
// or lost, TCP would retransmit), until healed.
type etcdProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	cut    bool
	closed bool
	conns  []net.Conn
}

func startEtcdProxy(t *testing.T, target string) *etcdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &etcdProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *etcdProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *etcdProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.cut && !p.closed {
			p.cond.Wait()
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setCut partitions (true) or heals (false) every connection through p.
// New connections are accepted and dialled while cut, as SYNs would be
// by a peer whose later packets are lost.
func (p *etcdProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	p.cond.Broadcast()
}

func (p *etcdProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// etcdFleet is a fleet whose state is in a three-member `capstan etcd`
// cluster, served by two `capstan server` processes sharing the local
// provisioner's machines. Server a starts first and leads; b stands by.
type etcdFleet struct {
	*fleet
	etcd      *etcdCluster
	a, b      *serverProcess
	urlA      string
	urlB      string
	proxies   []*etcdProxy // between a and the members, with partitionA
	endpoints string       // both servers, for agents and the CLI
}

// newEtcdFleet starts the members, the servers and a standard fleet of n
// instances. With partitionA, server a reaches the members only through
// proxies the test can cut. The test talks to server b with viaB, to a
// otherwise.
func newEtcdFleet(t *testing.T, n int, partitionA, viaB bool) *etcdFleet {
	t.Helper()
	if *hollowFlag {
		t.Skip("etcd faults need agent processes on Docker")
	}
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	e := &etcdFleet{etcd: startEtcdCluster(t, bin)}
	addrA, addrB := freeAddr(t), freeAddr(t)
	e.urlA, e.urlB = "http://"+addrA, "http://"+addrB
	e.endpoints = e.urlA + "," + e.urlB
	dirA, dirB := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(dirA, "instances"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dirA, "instances"), filepath.Join(dirB, "instances")); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	common := []string{"--secrets-key-file", keyFile, "--advertise-url", e.endpoints}
	epsA := e.etcd.endpoints()
	if partitionA {
		epsA = nil
		for _, m := range e.etcd.members {
			p := startEtcdProxy(t, m.listen)
			e.proxies = append(e.proxies, p)
			epsA = append(epsA, "https://"+p.ln.Addr().String())
		}
	}
	e.a = startSharedServer(t, bin, addrA, dirA, append(e.etcd.serverFlags(epsA), common...)...)
	eventually(t, 30*time.Second, "server a leading", func() bool { return strings.Contains(e.a.log.String(), `"leading"`) })
	e.b = startSharedServer(t, bin, addrB, dirB, append(e.etcd.serverFlags(e.etcd.endpoints()), common...)...)
	url := e.urlA
	if viaB {
		url = e.urlB
	}
	e.fleet = &fleet{t: t, url: url, rt: rt, bin: bin, dataDir: dirA,
		creds: aws.Credentials{AccessKeyID: processKey, SecretAccessKey: processSecret}}
	t.Cleanup(func() {
		e.a.kill9()
		e.b.kill9()
		e.terminateAll()
	})
	e.init()
	e.setup(n, false)
	return e
}

// logLine is one JSON line of a server's log.
type logLine struct {
	Time time.Time `json:"time"`
	Msg  string    `json:"msg"`
	Role string    `json:"role"`
}

// logged returns the times at which a server's log says msg.
func logged(p *serverProcess, msg string) []time.Time {
	var out []time.Time
	for _, l := range strings.Split(p.log.String(), "\n") {
		var x logLine
		if json.Unmarshal([]byte(l), &x) == nil && x.Msg == msg {
			out = append(out, x.Time)
		}
	}
	return out
}
