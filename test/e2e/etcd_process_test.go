package e2e

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
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

// A server keeps its state in a `capstan etcd` member, rides out the
// member's kill -9 and restart, and finds everything there after it; the
// member stops cleanly on SIGTERM.
func TestServerOnCapstanEtcd(t *testing.T) {
	ctx := context.Background()
	dir, listen, peer := t.TempDir(), freeAddr(t), freeAddr(t)
	m := startCapstanEtcd(t, dir, listen, peer)
	if want := "--etcd-endpoints http://" + listen + " --etcd-max-txn-ops 1024"; !strings.Contains(m.log.String(), want) {
		t.Fatalf("capstan etcd did not print how servers use it (%q):\n%s", want, m.log)
	}
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
	s := startServerProcess(t, freeAddr(t), "--data-dir", t.TempDir(), "--etcd-endpoints", "http://"+listen, "--etcd-max-txn-ops", "1024")
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
