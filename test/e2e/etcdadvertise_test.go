package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// freePortOn is a port free on ip (0.0.0.0: on every address).
func freePortOn(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// Three members as on three hosts: each on an address of its own
// (127.0.0.2, .3, .4), telling peers and servers the URL it is reached
// by. The third listens on every address and advertises one: what a
// member on a host with several interfaces does.
func TestCapstanEtcdAdvertisedURLs(t *testing.T) {
	ctx := context.Background()
	caDir := filepath.Join(t.TempDir(), "ca")
	capstanOut(t, "etcd", "ca", "--dir", caDir)
	type member struct {
		m                  *clusterMember
		ip, listen, peer   string
		clientURL, peerURL string
	}
	var ms []*member
	var initial []string
	for i, n := range []string{"a", "b", "c"} {
		ip := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}[i]
		bind := ip
		if n == "c" {
			bind = "0.0.0.0"
		}
		cp, pp := freePortOn(t, bind), freePortOn(t, bind)
		x := &member{m: &clusterMember{name: n, dir: t.TempDir()}, ip: ip,
			listen: net.JoinHostPort(bind, cp), peer: net.JoinHostPort(bind, pp),
			clientURL: "https://" + net.JoinHostPort(ip, cp), peerURL: "https://" + net.JoinHostPort(ip, pp)}
		ms = append(ms, x)
		initial = append(initial, n+"="+x.peerURL)
	}
	for _, x := range ms {
		cmd := exec.Command(capstanBinary(t), "etcd", "--name", x.m.name, "--data-dir", x.m.dir,
			"--listen", x.listen, "--peer-listen", x.peer,
			"--advertise-client-urls", x.clientURL, "--initial-advertise-peer-urls", x.peerURL,
			"--initial-cluster", strings.Join(initial, ","), "--ca-dir", caDir)
		x.m.p = &etcdProcess{cmd: cmd}
		x.m.p.log, x.m.p.done = runProcess(t, cmd)
	}
	var endpoints []string
	for _, x := range ms {
		x.m.awaitReady(t)
		endpoints = append(endpoints, x.clientURL)
		// The member records and prints the URL it advertises.
		if b, err := os.ReadFile(filepath.Join(x.m.dir, "client-url")); err != nil || strings.TrimSpace(string(b)) != x.clientURL {
			t.Fatalf("member %s's client-url is %q (%v), want %s", x.m.name, b, err, x.clientURL)
		}
		if !strings.Contains(x.m.p.log.String(), "--etcd-endpoints "+x.clientURL+" ") {
			t.Fatalf("member %s does not print its advertised URL for servers:\n%s", x.m.name, x.m.p.log)
		}
	}
	list := capstanOut(t, "etcd", "member", "list", "--data-dir", ms[2].m.dir)
	for _, x := range ms {
		if !strings.Contains(list, x.clientURL) || !strings.Contains(list, x.peerURL) {
			t.Fatalf("member list does not show %s's advertised %s and %s:\n%s", x.m.name, x.clientURL, x.peerURL, list)
		}
	}
	if strings.Contains(list, "0.0.0.0") {
		t.Fatalf("a member advertises the unspecified address:\n%s", list)
	}

	// A server on the advertised URLs, with the certificates of one member:
	// every member's certificate names the IP it advertises.
	tlsDir := filepath.Join(ms[0].m.dir, "tls")
	s := startServerProcess(t, freeAddr(t), "--data-dir", t.TempDir(), "--etcd-endpoints", strings.Join(endpoints, ","),
		"--etcd-max-txn-ops", "1024", "--etcd-cacert", filepath.Join(tlsDir, "ca.crt"),
		"--etcd-cert", filepath.Join(tlsDir, "client.crt"), "--etcd-key", filepath.Join(tlsDir, "client.key"))
	c := s.client()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("advertised")}); err != nil {
		t.Fatalf("CreateCluster through the advertised members: %v\n%s", err, s.log)
	}
	for _, x := range ms {
		r, err := etcdClient(t, tlsDir, x.clientURL).Get(ctx, "/capstan/clusters/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithCountOnly())
		if err != nil || r.Count < 1 {
			t.Fatalf("member %s at %s: %v %v", x.m.name, x.clientURL, r, err)
		}
	}
	for _, x := range ms {
		x.m.p.stop(t)
	}
}

// Bad advertised URLs are refused before anything starts, naming the flag.
func TestCapstanEtcdRefusesBadAdvertisedURLs(t *testing.T) {
	caDir := filepath.Join(t.TempDir(), "ca")
	capstanOut(t, "etcd", "ca", "--dir", caDir)
	peer := freeAddr(t)
	allPort := freePortOn(t, "0.0.0.0")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--advertise-client-urls", "http://127.0.0.2:2379"}, "--advertise-client-urls: each URL must be https://IP:PORT"},
		{[]string{"--advertise-client-urls", "https://etcd.example:2379"}, "--advertise-client-urls: https://etcd.example:2379: must name an IP address"},
		{[]string{"--advertise-client-urls", "https://127.0.0.2"}, "--advertise-client-urls: https://127.0.0.2: must be IP:PORT"},
		{[]string{"--advertise-client-urls", "https://0.0.0.0:2379"}, "--advertise-client-urls: https://0.0.0.0:2379: cannot advertise 0.0.0.0"},
		{[]string{"--initial-advertise-peer-urls", "https://[::]:2380"}, "--initial-advertise-peer-urls: https://[::]:2380: cannot advertise ::"},
		{[]string{"--initial-advertise-peer-urls", "https://127.0.0.2:2380/x"}, "--initial-advertise-peer-urls: each URL must be https://IP:PORT"},
		// The list must name this member by the peer URLs it advertises.
		{[]string{"--initial-advertise-peer-urls", "https://127.0.0.2:2380", "--initial-cluster", "a=https://" + peer, "--ca-dir", caDir},
			"but --initial-advertise-peer-urls is https://127.0.0.2:2380"},
		// Listening on every address, a member of a cluster must say which one it is reached by.
		{[]string{"--listen", "0.0.0.0:" + allPort, "--initial-cluster", "a=https://" + peer, "--ca-dir", caDir},
			"--listen: a member of a cluster listening on 0.0.0.0 must say the IP others reach it on with --advertise-client-urls"},
	} {
		args := append([]string{"etcd", "--name", "a", "--data-dir", t.TempDir(), "--listen", freeAddr(t), "--peer-listen", peer}, c.args...)
		out, err := exec.Command(capstanBinary(t), args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: %v, output does not say %q:\n%s", c.args, err, c.want, out)
		}
	}
}
