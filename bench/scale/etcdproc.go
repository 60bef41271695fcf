package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/store"
)

// etcdEnv marks the process as the benchmark's etcd member; its value is
// the member's data directory.
const etcdEnv = "CAPSTAN_SCALE_ETCD"

// serveEtcd runs a member with the embedded one's settings until stdin
// closes, having printed its client URL on stdout. It serves TLS with
// client certificates on loopback, as `capstan etcd` does.
func serveEtcd(dir string) error {
	client, err := freeLoopback()
	if err != nil {
		return err
	}
	peer, err := freeLoopback()
	if err != nil {
		return err
	}
	m, err := store.StartMember(context.Background(), store.MemberConfig{Dir: dir, Listen: client, PeerListen: peer,
		CompactEvery: store.CompactEvery})
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Println(m.ClientURL())
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// freeLoopback is a free address on 127.0.0.1 (free a moment ago).
func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// etcdProcess is the member in a child process: the server's RSS and CPU
// are then its own, as with an external etcd, while the member runs the
// embedded one's settings on the same cores.
type etcdProcess struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	url string
	tls store.TLSFiles // what the server presents to it
}

func startEtcdProcess(dir string) (*etcdProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), etcdEnv+"="+filepath.Join(dir, "etcd"))
	p := &etcdProcess{cmd: cmd, tls: store.MemberTLSFiles(filepath.Join(dir, "etcd")).Client}
	in, out, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	p.in = in
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			got <- strings.TrimSpace(sc.Text())
		}
		close(got)
		io.Copy(io.Discard, out)
	}()
	select {
	case p.url = <-got:
	case <-time.After(time.Minute):
	}
	if p.url == "" {
		p.stop()
		return nil, errors.New("etcd process: no client URL")
	}
	return p, nil
}

// stats reads the member's RSS (now, peak) in MiB and CPU seconds.
func (p *etcdProcess) stats() (now, peak, cpu float64) {
	pid := p.cmd.Process.Pid
	return float64(rss(pid)) / (1 << 20), float64(procStatus(pid, "VmHWM")) / (1 << 20), cpuSeconds(pid)
}

func (p *etcdProcess) stop() {
	p.in.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}
