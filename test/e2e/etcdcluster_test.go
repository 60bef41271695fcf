package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// clusterMember is one `capstan etcd` of a cluster under test.
type clusterMember struct {
	name, dir, listen, peer string
	p                       *etcdProcess
}

func (m *clusterMember) start(t *testing.T, caDir, initial, state string) {
	t.Helper()
	cmd := exec.Command(capstanBinary(t), "etcd", "--name", m.name, "--data-dir", m.dir, "--listen", m.listen, "--peer-listen", m.peer,
		"--initial-cluster", initial, "--initial-cluster-state", state, "--ca-dir", caDir, "--defrag-min-bytes", "1")
	m.p = &etcdProcess{cmd: cmd}
	m.p.log, m.p.done = runProcess(t, cmd)
}

func (m *clusterMember) awaitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(m.p.log.String(), "capstan etcd ready") {
		select {
		case err := <-m.p.done:
			m.p.done <- err
			t.Fatalf("member %s exited during start: %v\n%s", m.name, err, m.p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %s not ready after 90s\n%s", m.name, m.p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// capstanOut runs the capstan binary and returns its standard output,
// failing the test when it fails.
func capstanOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(capstanBinary(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("capstan %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// defragSpan is one member's defragmentation, from its log.
type defragSpan struct {
	member     string
	start, end time.Time
}

// defragSpans reads the defragmentations a member's log records.
func defragSpans(t *testing.T, log string) []defragSpan {
	t.Helper()
	var spans []defragSpan
	var open *defragSpan
	for _, line := range strings.Split(log, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var rec struct {
			Msg, Member, Start, End string
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec.Msg {
		case "defragmenting etcd":
			at, err := time.Parse(time.RFC3339Nano, rec.Start)
			if err != nil {
				t.Fatalf("defragmentation start %q: %v", rec.Start, err)
			}
			open = &defragSpan{member: rec.Member, start: at}
		case "defragmentation over":
			at, err := time.Parse(time.RFC3339Nano, rec.End)
			if err != nil || open == nil {
				t.Fatalf("defragmentation end %q without a start: %v", rec.End, err)
			}
			open.end = at
			spans = append(spans, *open)
			open = nil
		}
	}
	return spans
}

// Three `capstan etcd` members form a cluster with certificates from one
// CA; a server on all three serves writes while the leader member is
// killed; the dead member is removed and a new one added, which catches
// up; and the members defragment one at a time, never two at once.
func TestThreeMemberCapstanEtcd(t *testing.T) {
	ctx := context.Background()
	caDir := filepath.Join(t.TempDir(), "ca")
	capstanOut(t, "etcd", "ca", "--dir", caDir)
	if out, err := exec.Command(capstanBinary(t), "etcd", "ca", "--dir", caDir).CombinedOutput(); err == nil || !strings.Contains(string(out), "exists") {
		t.Fatalf("a second CA over the first: %v\n%s", err, out)
	}
	var members []*clusterMember
	var initial []string
	for _, n := range []string{"a", "b", "c"} {
		m := &clusterMember{name: n, dir: t.TempDir(), listen: freeAddr(t), peer: freeAddr(t)}
		members = append(members, m)
		initial = append(initial, n+"=https://"+m.peer)
	}
	for _, m := range members {
		m.start(t, caDir, strings.Join(initial, ","), "new")
	}
	for _, m := range members {
		m.awaitReady(t)
	}
	tlsDir := filepath.Join(members[0].dir, "tls")
	tlsFlags := []string{"--etcd-cacert", filepath.Join(tlsDir, "ca.crt"), "--etcd-cert", filepath.Join(tlsDir, "client.crt"), "--etcd-key", filepath.Join(tlsDir, "client.key")}
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, "https://"+m.listen)
	}
	// Some weight for the defragmentations to copy, so that two at once
	// would overlap in time.
	ec := etcdClient(t, tlsDir, endpoints...)
	for i := range 24 {
		b := make([]byte, 1<<20)
		rand.Read(b)
		if _, err := ec.Put(ctx, fmt.Sprintf("capstan-test/blob/%02d", i), string(b)); err != nil {
			t.Fatal(err)
		}
	}

	s := startServerProcess(t, freeAddr(t), append([]string{"--data-dir", t.TempDir(), "--etcd-endpoints", strings.Join(endpoints, ","), "--etcd-max-txn-ops", "1024"}, tlsFlags...)...)
	c := s.client()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("before")}); err != nil {
		t.Fatal(err)
	}

	list := capstanOut(t, "etcd", "member", "list", "--data-dir", members[0].dir)
	leader := regexp.MustCompile(`(?m)^[0-9a-f]+\s+(\w+)\s+.*\btrue$`).FindStringSubmatch(list)
	if leader == nil || strings.Count(list, "https://") != 6 {
		t.Fatalf("member list without three members and a leader:\n%s", list)
	}
	var dead *clusterMember
	var live []*clusterMember
	for _, m := range members {
		if m.name == leader[1] {
			dead = m
		} else {
			live = append(live, m)
		}
	}
	// Kill the leader: a new one is elected, and writes go on.
	dead.p.cmd.Process.Signal(syscall.SIGKILL)
	dead.p.done <- <-dead.p.done
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("after-kill")})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write 30s after the leader member's kill: %v\n%s", err, s.log)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Replace it: remove the dead member, add a new one, start it.
	liveEP := "https://" + live[0].listen + ",https://" + live[1].listen
	if out := capstanOut(t, "etcd", "member", "remove", "--data-dir", live[0].dir, "--endpoints", liveEP, dead.name); !strings.Contains(out, "removed "+dead.name) {
		t.Fatalf("member remove: %s", out)
	}
	if out, err := exec.Command(capstanBinary(t), "etcd", "member", "remove", "--data-dir", live[0].dir, "--endpoints", liveEP, "nosuch").CombinedOutput(); err == nil || !strings.Contains(string(out), "no member named nosuch") {
		t.Fatalf("removing a member that is not there: %v\n%s", err, out)
	}
	d := &clusterMember{name: "d", dir: t.TempDir(), listen: freeAddr(t), peer: freeAddr(t)}
	out := capstanOut(t, "etcd", "member", "add", "--name", "d", "--peer-url", "https://"+d.peer, "--data-dir", live[0].dir, "--endpoints", liveEP)
	m := regexp.MustCompile(`--initial-cluster (\S+) --initial-cluster-state existing`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(m[1], "d=https://"+d.peer) || strings.Contains(m[1], dead.name+"=") {
		t.Fatalf("member add printed no usable --initial-cluster:\n%s", out)
	}
	d.start(t, caDir, m[1], "existing")
	d.awaitReady(t)
	// The new member holds what was written before it joined: a read
	// from its own copy (serializable), not forwarded to the leader.
	dc := etcdClient(t, tlsDir, "https://"+d.listen)
	deadline = time.Now().Add(30 * time.Second)
	for {
		r, err := dc.Get(ctx, "/capstan/clusters/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithCountOnly())
		if err == nil && r.Count >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new member has not caught up after 30s: %v %v\n%s", r, err, d.p.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("after-replace")}); err != nil {
		t.Fatal(err)
	}
	// A snapshot of the new member holds the blobs written before it joined.
	snap := filepath.Join(t.TempDir(), "backup.db")
	if out := capstanOut(t, "etcd", "snapshot", "save", "--data-dir", d.dir, snap); !strings.Contains(out, "wrote "+snap) {
		t.Fatalf("snapshot save: %s", out)
	}
	if fi, err := os.Stat(snap); err != nil || fi.Size() < 24<<20 {
		t.Fatalf("snapshot %v, %v: want the 24 MiB of blobs in it", fi, err)
	}
	list = capstanOut(t, "etcd", "member", "list", "--data-dir", d.dir)
	if strings.Count(list, "https://") != 6 || !strings.Contains(list, " d ") || strings.Contains(list, " "+dead.name+" ") {
		t.Fatalf("member list after the replacement:\n%s", list)
	}

	// Every member defragments once (--defrag-min-bytes 1), each in a
	// span of time no other member's overlaps.
	now := append(live, d)
	deadline = time.Now().Add(2 * time.Minute)
	var spans []defragSpan
	for {
		spans = spans[:0]
		done := map[string]bool{}
		for _, m := range append(now, dead) {
			for _, sp := range defragSpans(t, m.p.log.String()) {
				spans = append(spans, sp)
				done[sp.member] = true
			}
		}
		if done[live[0].name] && done[live[1].name] && done[d.name] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every live member defragmented in 2 minutes: %v\n%s\n%s\n%s", spans, live[0].p.log, live[1].p.log, d.p.log)
		}
		time.Sleep(time.Second)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start.Before(spans[i-1].end) {
			t.Fatalf("%s defragmented from %s while %s did until %s", spans[i].member, spans[i].start.Format(time.StampMicro),
				spans[i-1].member, spans[i-1].end.Format(time.StampMicro))
		}
	}
	for _, sp := range spans {
		t.Logf("%s defragmented %s to %s (%s)", sp.member, sp.start.Format(time.StampMicro), sp.end.Format(time.StampMicro), sp.end.Sub(sp.start))
	}
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("after-defrag")}); err != nil {
		t.Fatal(err)
	}
	for _, m := range now {
		m.p.stop(t)
	}
}

// etcdClient dials endpoints with the client certificate in tlsDir.
func etcdClient(t *testing.T, tlsDir string, endpoints ...string) *clientv3.Client {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(tlsDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(filepath.Join(tlsDir, "client.crt"), filepath.Join(tlsDir, "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Bad cluster flags are refused before anything starts, naming the flag.
func TestCapstanEtcdRefusesBadClusterFlags(t *testing.T) {
	caDir := filepath.Join(t.TempDir(), "ca")
	capstanOut(t, "etcd", "ca", "--dir", caDir)
	peer := freeAddr(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--initial-cluster", "a=https://" + peer}, "needs --ca-dir"},
		{[]string{"--initial-cluster", "a=http://" + peer, "--ca-dir", caDir}, "NAME=https://IP:PORT"},
		{[]string{"--initial-cluster", "b=https://" + peer, "--ca-dir", caDir}, "does not name this member"},
		{[]string{"--initial-cluster", "a=https://127.0.0.1:1", "--ca-dir", caDir}, "but --peer-listen is"},
		{[]string{"--initial-cluster", "a=https://" + peer + ",a=https://127.0.0.1:1", "--ca-dir", caDir}, "named twice"},
		{[]string{"--initial-cluster-state", "old"}, "new or existing"},
		{[]string{"--initial-cluster", "a=https://" + peer, "--ca-dir", t.TempDir()}, "capstan etcd ca writes one"},
	} {
		args := append([]string{"etcd", "--name", "a", "--data-dir", t.TempDir(), "--listen", freeAddr(t), "--peer-listen", peer}, c.args...)
		out, err := exec.Command(capstanBinary(t), args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: %v, output does not say %q:\n%s", c.args, err, c.want, out)
		}
	}
}
