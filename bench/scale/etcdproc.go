package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
// closes, having printed its client URL on stdout.
func serveEtcd(dir string) error {
	m, err := store.StartMember(context.Background(), store.MemberConfig{Dir: dir, CompactEvery: store.CompactEvery})
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Println(m.ClientURL())
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// etcdProcess is the member in a child process: the server's RSS and CPU
// are then its own, as with an external etcd, while the member runs the
// embedded one's settings on the same cores.
type etcdProcess struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	url string
}

func startEtcdProcess(dir string) (*etcdProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), etcdEnv+"="+filepath.Join(dir, "etcd"))
	in, out, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	p := &etcdProcess{cmd: cmd, in: in}
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
