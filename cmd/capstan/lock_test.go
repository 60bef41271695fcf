package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// capstanBinary builds this command once per test process, static as a
// release build is, so that dev uses it for its instances as it is.
func capstanBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "capstan-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "capstan")
		cmd := exec.Command("go", "build", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// syncBuffer collects a process's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a capstan process the test started; the cleanup interrupts it
// as Ctrl-C would and waits for it.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

func start(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(capstanBinary(t), args...), out: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.done:
		case <-time.After(90 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("capstan %s output:\n%s", strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// running fails the test if p has ended.
func (p *proc) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("capstan %v ended: %v\n%s", p.cmd.Args[1:], err, p.out.String())
	default:
	}
}

// waitFor waits until p's output holds want.
func (p *proc) waitFor(t *testing.T, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.out.String(), want) {
		p.running(t)
		if time.Now().After(deadline) {
			t.Fatalf("no %q from capstan %v within %v:\n%s", want, p.cmd.Args[1:], within, p.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// second runs a capstan command that must fail because the data dir is
// locked, naming the holder and its pid, within seconds.
func second(t *testing.T, holder *proc, what string, args ...string) {
	t.Helper()
	cmd := exec.Command(capstanBinary(t), args...)
	cmd.Dir = holder.cmd.Dir
	began := time.Now()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a second capstan %v on a data dir in use succeeded:\n%s", args, out)
	}
	want := fmt.Sprintf("is used by %s (pid %d)", what, holder.cmd.Process.Pid)
	if !strings.Contains(string(out), want) {
		t.Fatalf("capstan %v: want %q in:\n%s", args, want, out)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("the second process took %v to give up", d)
	}
	holder.running(t)
}

// TestServerDataDirLock: a second `capstan server` on a data dir in use
// stops before it opens anything there, and names the first one; once the
// first has stopped, the dir is free again.
func TestServerDataDirLock(t *testing.T) {
	data := t.TempDir()
	args := []string{"server", "--data-dir", data, "--listen", "127.0.0.1:0", "--provisioner", "none"}
	// In the source tree, where capstan dev runs.
	src, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	first := start(t, src, args...)
	first.waitFor(t, "capstan server ready", time.Minute)
	second(t, first, "capstan server", args...)
	// capstan dev is refused too, naming the server.
	second(t, first, "capstan server", "dev", "--data-dir", data, "--listen", "127.0.0.1:0")

	first.cmd.Process.Signal(syscall.SIGINT)
	if err := <-first.done; err != nil {
		t.Fatalf("first server: %v\n%s", err, first.out.String())
	}
	first.done <- nil
	third := start(t, t.TempDir(), args...)
	third.waitFor(t, "capstan server ready", time.Minute)
}

// TestDevDataDirLock: a second `capstan dev` on the data dir of a running
// one, even with --fresh, fails naming the first, and leaves the first's
// instance (its agent process and directory) and state alone.
func TestDevDataDirLock(t *testing.T) {
	testenv.RequireDocker(t)
	src, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	cluster := "devlock-" + hex.EncodeToString(b)
	data := t.TempDir()
	args := []string{"dev", "--data-dir", data, "--listen", "127.0.0.1:0", "--cluster", cluster}
	first := start(t, src, args...)

	// Wait for the first's instance: its agent is what a careless second
	// run would end.
	// The pid file appears just after the agent starts: wait for a whole pid.
	var agent int
	var pidFile string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		first.running(t)
		if m, _ := filepath.Glob(filepath.Join(data, "instances", "*", "pid")); len(m) > 0 {
			if b, err := os.ReadFile(m[0]); err == nil {
				if pid, err := strconv.Atoi(string(b)); err == nil && pid > 0 {
					agent, pidFile = pid, m[0]
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no instance with a pid within 3 minutes:\n%s", first.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	before, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}

	second(t, first, "capstan dev", args...)
	second(t, first, "capstan dev", append(args, "--fresh")...)
	second(t, first, "capstan dev", "server", "--data-dir", data, "--listen", "127.0.0.1:0", "--provisioner", "none")

	if err := syscall.Kill(agent, 0); err != nil {
		t.Errorf("the first run's agent (pid %d) is gone: %v", agent, err)
	}
	if _, err := os.Stat(pidFile); err != nil {
		t.Errorf("the first run's instance directory is gone: %v", err)
	}
	after, _ := os.ReadDir(data)
	if len(after) < len(before) {
		t.Errorf("the data dir lost entries: before %v, after %v", before, after)
	}
	if b, _ := os.ReadFile(filepath.Join(data, server.LockFile)); !strings.HasPrefix(string(b), strconv.Itoa(first.cmd.Process.Pid)+" ") {
		t.Errorf("lock file says %q, want the first run's pid %d", b, first.cmd.Process.Pid)
	}
}

// TestDevURLsNotRunning: `capstan dev urls` on a data dir no dev runs on
// says so.
func TestDevURLsNotRunning(t *testing.T) {
	dir := t.TempDir()
	out, err := exec.Command(capstanBinary(t), "dev", "urls", "--data-dir", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "capstan dev is not running on "+dir) {
		t.Fatalf("dev urls: %v\n%s", err, out)
	}
}
