package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdProcess is `capstan etcd` started the way users start it.
type etcdProcess struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan error
}

func startCapstanEtcd(t *testing.T, dir, listen, peer string) *etcdProcess {
	t.Helper()
	cmd := exec.Command(capstanBinary(t), "etcd", "--data-dir", dir, "--listen", listen, "--peer-listen", peer)
	p := &etcdProcess{cmd: cmd}
	p.log, p.done = runProcess(t, cmd)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.log.String(), "capstan etcd ready") {
		select {
		case err := <-p.done:
			t.Fatalf("capstan etcd exited during start: %v\n%s", err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("capstan etcd not ready after 60s\n%s", p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *etcdProcess) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("capstan etcd on SIGTERM: %v\n%s", err, p.log)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("capstan etcd did not stop within 30s of SIGTERM\n%s", p.log)
	}
}

// A server keeps its state in a `capstan etcd` member, through the client
// certificate the member generated and printed the flags of, rides out
// the member's kill -9 and restart, and finds everything there after it;
// the member stops cleanly on SIGTERM. A client without the certificate
// is refused.
func TestServerOnCapstanEtcd(t *testing.T) {
	ctx := context.Background()
	dir, listen, peer := t.TempDir(), freeAddr(t), freeAddr(t)
	m := startCapstanEtcd(t, dir, listen, peer)
	tlsDir := filepath.Join(dir, "tls")
	flags := []string{"--etcd-endpoints", "https://" + listen, "--etcd-max-txn-ops", "1024", "--etcd-cacert", filepath.Join(tlsDir, "ca.crt"),
		"--etcd-cert", filepath.Join(tlsDir, "client.crt"), "--etcd-key", filepath.Join(tlsDir, "client.key")}
	if want := strings.Join(flags, " "); !strings.Contains(m.log.String(), want) {
		t.Fatalf("capstan etcd did not print how servers use it (%q):\n%s", want, m.log)
	}
	refusesUncertified(t, listen, filepath.Join(tlsDir, "ca.crt"))
	// A second member on the same data dir says so and exits.
	second := exec.Command(capstanBinary(t), "etcd", "--data-dir", dir, "--listen", freeAddr(t), "--peer-listen", freeAddr(t))
	second.WaitDelay = time.Second
	done := make(chan []byte, 1)
	go func() { out, _ := second.CombinedOutput(); done <- out }()
	select {
	case out := <-done:
		if second.ProcessState.Success() || !strings.Contains(string(out), "in use") {
			t.Fatalf("a second capstan etcd on the data dir: %v\n%s", second.ProcessState, out)
		}
	case <-time.After(30 * time.Second):
		second.Process.Kill()
		t.Fatal("a second capstan etcd on the data dir still running after 30s")
	}
	s := startServerProcess(t, freeAddr(t), append([]string{"--data-dir", t.TempDir()}, flags...)...)
	c := s.client()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("before")}); err != nil {
		t.Fatal(err)
	}

	// kill -9: what the member acknowledged is in its log.
	m.cmd.Process.Signal(syscall.SIGKILL)
	m.done <- <-m.done
	m = startCapstanEtcd(t, dir, listen, peer)
	// The server reconnects on its own; writes and reads go on.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("after")})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write through the server 30s after the member restarted: %v\n%s", err, s.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"before", "after"}})
	if err != nil || len(out.Clusters) != 2 || len(out.Failures) != 0 {
		t.Fatalf("clusters after the member's restart: %+v %v", out, err)
	}
	m.stop(t)
}

func TestCapstanEtcdRefusesBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--listen", "localhost:2379"}, []string{"--listen", "IP address"}},
		{[]string{"--peer-listen", "127.0.0.1"}, []string{"--peer-listen", "IP:PORT"}},
		{[]string{"--listen", "127.0.0.1:70000"}, []string{"--listen", "port from 1 to 65535"}},
		{[]string{"--listen", "127.0.0.1:2390", "--peer-listen", "127.0.0.1:2390"}, []string{"must differ"}},
		{[]string{"extra"}, []string{"unexpected argument"}},
	} {
		cmd := exec.Command(capstanBinary(t), append([]string{"etcd", "--data-dir", t.TempDir()}, c.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%v: started", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%v: output does not say %q:\n%s", c.args, w, out)
			}
		}
	}
}

// refusesUncertified checks that the member at addr answers no client
// without a certificate: etcd's own client, and curl as the issue's
// reproduction ran it, on HTTPS (with the CA, to be sure it is the client
// certificate that is missing) and plain HTTP.
func refusesUncertified(t *testing.T, addr, caFile string) {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + addr}, TLS: &tls.Config{RootCAs: pool},
		DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.Get(ctx, "/capstan/", clientv3.WithPrefix())
		cancel()
		c.Close()
		if err == nil {
			t.Fatalf("etcd's client without a certificate read %d keys", len(resp.Kvs))
		}
	}
	if _, err := exec.LookPath("curl"); err != nil {
		return
	}
	body := `{"key":"L2NhcHN0YW4v","range_end":"L2NhcHN0YW4w"}`
	for _, args := range [][]string{
		{"--cacert", caFile, "https://" + addr + "/v3/kv/range"},
		{"http://" + addr + "/v3/kv/range"},
	} {
		out, err := exec.Command("curl", append([]string{"-sS", "--fail", "--max-time", "5", "-XPOST", "-d", body}, args...)...).CombinedOutput()
		if err == nil {
			t.Errorf("curl %v without a client certificate: %s", args, out)
		}
	}
}

// The server's embedded member has no TCP port: a scan of the server's
// listening sockets finds the API's alone, and its unix socket refuses
// user nobody (the reproduction read every credential so).
func TestEmbeddedEtcdIsPrivate(t *testing.T) {
	root := t.TempDir()
	// Open the test's own dirs to others, so that only the server's keep them out.
	for _, d := range []string{filepath.Dir(root), root} {
		os.Chmod(d, 0o755)
	}
	dir := filepath.Join(root, "data")
	addr := freeAddr(t)
	p := startServerProcess(t, addr, "--data-dir", dir)
	_, port, _ := net.SplitHostPort(addr)
	for _, l := range listeningTCP(t, p.cmd.Process.Pid) {
		if !strings.HasSuffix(l, ":"+port) {
			t.Errorf("the server listens on TCP %s besides its API (%s)", l, addr)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "etcd", "client-url"))
	if err != nil {
		t.Fatal(err)
	}
	sock, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "unix://")
	if !ok {
		t.Fatalf("the embedded member's URL is %s, want a unix socket", b)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Dir(sock): 0o700, sock: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %04o", path, fi.Mode().Perm(), err, want)
		}
	}
	// CI runs as root with runuser and curl installed (.ci/run): there the
	// check must run.
	skip := t.Skip
	if os.Getenv("CI") != "" {
		skip = t.Fatal
	}
	if os.Geteuid() != 0 {
		skip("not root: cannot run as nobody")
	}
	for _, tool := range []string{"runuser", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("no " + tool)
		}
	}
	curl := func(user string) ([]byte, error) {
		args := []string{"curl", "-sS", "--fail", "--max-time", "5", "--unix-socket", sock, "-XPOST", "http://localhost/v3/kv/range",
			"-d", `{"key":"L2NhcHN0YW4vY3JlZGVudGlhbHMv","range_end":"L2NhcHN0YW4vY3JlZGVudGlhbHMw"}`}
		if user != "" {
			args = append([]string{"runuser", "-u", user, "--"}, args...)
		}
		return exec.Command(args[0], args[1:]...).CombinedOutput()
	}
	if out, err := curl("nobody"); err == nil {
		t.Fatalf("user nobody read the state: %s", out)
	}
	// The server's own user does reach it (etcdctl's way in).
	if out, err := curl(""); err != nil {
		t.Fatalf("the owner through the socket: %v %s", err, out)
	}
}

// listeningTCP are the addresses (hex, as /proc/net/tcp has them, with
// the port in decimal) process pid listens on over TCP.
func listeningTCP(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if inode, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 9 && f[3] == "0A" && inodes[f[9]] {
				host, hexPort, _ := strings.Cut(f[1], ":")
				port, _ := strconv.ParseUint(hexPort, 16, 16)
				out = append(out, fmt.Sprintf("%s:%d", host, port))
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("process %d listens on no TCP port: not even its API", pid)
	}
	return out
}
