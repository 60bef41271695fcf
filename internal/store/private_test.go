package store

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// listeningTCP are the TCP sockets this process listens on, by inode.
func listeningTCP(t *testing.T) map[string]string {
	t.Helper()
	mine := map[string]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if inode, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			mine[strings.TrimSuffix(inode, "]")] = true
		}
	}
	out := map[string]string{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st ... inode
			fields := strings.Fields(sc.Text())
			if len(fields) > 9 && fields[3] == "0A" && mine[fields[9]] {
				out[fields[9]] = fields[1]
			}
		}
		f.Close()
	}
	return out
}

// asNobody runs curl as uid/gid 65534 (whoever else is on the host).
func asNobody(t *testing.T, args ...string) ([]byte, error) {
	cmd := exec.Command("curl", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd.CombinedOutput()
}

// The embedded member listens on no TCP port, only on a unix socket in
// its 0700 data dir: another local user can neither read nor write the
// state through it, as user nobody could through 127.0.0.1 before.
func TestEmbeddedMemberIsPrivate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := t.TempDir()
	// Open the test's own dirs, so that only the member's keep others out.
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(root, "etcd")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// An earlier version's record of its TCP ports.
	os.WriteFile(filepath.Join(dir, "ports"), []byte("2379 2380\n"), 0o644)

	before := listeningTCP(t)
	s, err := Open(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for inode, addr := range listeningTCP(t) {
		if _, ok := before[inode]; !ok {
			t.Errorf("the embedded member listens on TCP %s", addr)
		}
	}

	url := s.embedded.clientURL()
	sock, ok := strings.CutPrefix(url, "unix://")
	if !ok || filepath.Dir(sock) != dir {
		t.Fatalf("client URL %s, want a socket in %s", url, dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "client-url")); err != nil || strings.TrimSpace(string(b)) != url {
		t.Fatalf("client-url file: %q (%v), want %s", b, err, url)
	}
	if _, err := os.Stat(filepath.Join(dir, "ports")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old ports file is still there (%v)", err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, sock: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %04o", path, fi.Mode().Perm(), err, want)
		}
	}

	const key = "credentials/CSAGTEST"
	if _, err := s.Txn().Put(key, obj{"secret-value", 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The owner reaches the member through the socket, as etcdctl would.
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp, err := c.Get(ctx, s.prefix+key); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the owner through the socket: %v %v", resp, err)
	}

	// CI runs as root with curl installed (.ci/run): there the check must run.
	skip := t.Skip
	if os.Getenv("CI") != "" {
		skip = t.Fatal
	}
	if os.Geteuid() != 0 {
		skip("not root: cannot act as another user (the modes above are checked)")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		skip("no curl")
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	rangeBody := fmt.Sprintf(`{"key":%q,"range_end":%q}`, b64(s.prefix), b64(s.prefix[:len(s.prefix)-1]+"0"))
	putBody := fmt.Sprintf(`{"key":%q,"value":%q}`, b64(s.prefix+key), b64("overwritten"))
	curl := func(path, body string) []string {
		return []string{"-sS", "--max-time", "5", "--unix-socket", sock, "-XPOST", "http://localhost" + path, "-d", body}
	}
	if out, err := asNobody(t, curl("/v3/kv/range", rangeBody)...); err == nil || strings.Contains(string(out), b64(s.prefix+key)) {
		t.Errorf("user nobody read the state: %v %s", err, out)
	}
	if out, err := asNobody(t, curl("/v3/kv/put", putBody)...); err == nil {
		t.Errorf("user nobody wrote to the state: %s", out)
	}
	if it, err := Get[obj](ctx, s, key); err != nil || it.Value.Name != "secret-value" {
		t.Fatalf("after nobody's put: %+v %v", it, err)
	}
	// The same requests do reach the member once the modes let them:
	// it is the modes that keep nobody out.
	os.Chmod(dir, 0o755)
	os.Chmod(sock, 0o666)
	out, err := asNobody(t, curl("/v3/kv/range", rangeBody)...)
	os.Chmod(dir, 0o700)
	os.Chmod(sock, 0o600)
	if err != nil || !strings.Contains(string(out), b64(s.prefix+key)) {
		t.Fatalf("with the modes opened, nobody's range: %v %s", err, out)
	}
}

// A member on TCP serves TLS only, and only to clients presenting a
// certificate of the CA it generated into its data dir; restarted, it
// keeps its CA, and issues its certificate anew for a new address.
func TestMemberOnTCPRequiresClientCertificates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	listen, peer := freeLocal(t), freeLocal(t)
	m, err := StartMember(ctx, MemberConfig{Dir: dir, Listen: listen, PeerListen: peer, CompactEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	files := MemberTLSFiles(dir)
	if m.ClientTLS() != files.Client || m.ClientURL() != "https://"+listen {
		t.Fatalf("member at %s with %+v", m.ClientURL(), m.ClientTLS())
	}
	for path, want := range map[string]os.FileMode{filepath.Dir(files.CA): 0o700, files.CAKey: 0o600, files.ServerKey: 0o600, files.Client.Key: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %04o", path, fi.Mode().Perm(), err, want)
		}
	}
	s, err := Open(ctx, Config{Endpoints: []string{m.ClientURL()}, TLS: m.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn().Put("k", obj{"v", 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Without a client certificate: etcd's client, and plain HTTPS and
	// HTTP on the client and peer ports, are all refused.
	pool, err := LoadCAFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	noCert := &tls.Config{RootCAs: pool}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL()}, TLS: noCert, DialTimeout: 3 * time.Second, Logger: nopZap()})
	if err == nil {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		resp, gerr := c.Get(gctx, "/capstan/k")
		gcancel()
		c.Close()
		if gerr == nil {
			t.Fatalf("a client without a certificate read %v", resp.Kvs)
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: noCert}}
	for _, u := range []string{"https://" + listen + "/v3/kv/range", "https://" + peer + "/members", "http://" + listen + "/v3/kv/range"} {
		resp, err := hc.Post(u, "application/json", strings.NewReader(`{"key":"L2NhcHN0YW4vaw=="}`))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("%s without a client certificate: %s", u, resp.Status)
			}
		}
	}
	// A store without the certificate waits, saying why.
	defer func(was time.Duration) { awaitProbe = was }(awaitProbe)
	awaitProbe = 500 * time.Millisecond
	var logs lockedBuffer
	wctx, wcancel := context.WithCancel(ctx)
	opened := make(chan error, 1)
	go func() {
		_, err := Open(wctx, Config{Endpoints: []string{m.ClientURL()}, TLS: TLSFiles{CACert: files.CA},
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		opened <- err
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), "tls: certificate required"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the missing certificate in 20 s: %q", logs.String())
		}
	}
	wcancel()
	if err := <-opened; err == nil {
		t.Fatal("a store without a client certificate opened")
	}

	ca, _ := os.ReadFile(files.CA)
	m.Close()

	// On another address: the same CA, a certificate naming the address.
	listen2 := "127.0.0.2:" + strings.Split(listen, ":")[1]
	m, err = StartMember(ctx, MemberConfig{Dir: dir, Listen: listen2, PeerListen: peer, CompactEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if ca2, _ := os.ReadFile(files.CA); string(ca2) != string(ca) {
		t.Fatal("the member's CA changed on a restart")
	}
	s, err = Open(ctx, Config{Endpoints: []string{m.ClientURL()}, TLS: m.ClientTLS()})
	if err != nil {
		t.Fatalf("a store through %s: %v", m.ClientURL(), err)
	}
	defer s.Close()
	if it, err := Get[obj](ctx, s, "k"); err != nil || it.Value.Name != "v" {
		t.Fatalf("after the restart: %+v %v", it, err)
	}
}

// A store opened with TLS files refuses http:// endpoints rather than
// dropping the certificates.
func TestTLSFilesNeedHTTPS(t *testing.T) {
	_, err := Open(context.Background(), Config{Endpoints: []string{"http://127.0.0.1:2379"}, TLS: TLSFiles{CACert: "ca.crt"}})
	if err == nil || !strings.Contains(err.Error(), "not https://") {
		t.Fatalf("TLS files with an http:// endpoint: %v", err)
	}
}

// A data dir too deep for a socket's path gets its socket in a private
// dir of its own, named in client-url and removed on close.
func TestLongDataDirSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60), "etcd")
	s, err := Open(ctx, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	url := s.embedded.clientURL()
	sock := strings.TrimPrefix(url, "unix://")
	if b, _ := os.ReadFile(filepath.Join(dir, "client-url")); strings.TrimSpace(string(b)) != url || strings.HasPrefix(sock, dir) {
		t.Fatalf("client URL %s, recorded %q", url, b)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the socket's dir: %v %v", fi.Mode(), err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "x"); err != nil {
		t.Fatalf("through %s: %v", url, err)
	}
	c.Close()
	s.Close()
	if _, err := os.Stat(filepath.Dir(sock)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket's dir outlived the member: %v", err)
	}
}
