package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type agentConfig struct {
	binary, dir, logPath string
	env                  map[string]string
	extra                []string
}

type agentProc struct {
	cmd     *exec.Cmd
	metrics string
	log     *os.File
	logPath string
	exited  chan struct{}
	waitErr error
}

// startAgent runs `capstan agent` with a clean environment (so variables of
// the caller's shell cannot change it) and waits until its session to the
// server is connected.
func startAgent(ctx context.Context, c agentConfig) (*agentProc, error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	metrics := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// An empty env file keeps a host's /etc/capstan/agent.env out of the run.
	envFile := filepath.Join(c.dir, "agent.env")
	if err := os.WriteFile(envFile, nil, 0o600); err != nil {
		return nil, err
	}
	logPath := c.logPath
	if logPath == "" {
		logPath = filepath.Join(c.dir, "agent.log")
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	env := []string{"ECS_DATADIR=" + filepath.Join(c.dir, "data"), "CAPSTAN_METRICS_ADDR=" + metrics}
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "DOCKER_HOST", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "DOCKER_API_VERSION"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range c.env {
		env = append(env, k+"="+v)
	}
	env = append(env, c.extra...) // last wins
	cmd := exec.Command(c.binary, "agent", "--config", envFile)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	// The agent must not outlive the benchmark, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start agent: %w", err)
	}
	a := &agentProc{cmd: cmd, metrics: metrics, log: logf, logPath: logPath, exited: make(chan struct{})}
	go func() { a.waitErr = cmd.Wait(); close(a.exited) }()

	deadline := time.Now().Add(90 * time.Second)
	for !a.connected() {
		select {
		case <-a.exited:
			return nil, fmt.Errorf("agent exited during start (%v); its log:\n%s", a.waitErr, tail(logPath, 30))
		case <-ctx.Done():
			a.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			a.stop()
			return nil, fmt.Errorf("agent session not connected after 90s; its log:\n%s", tail(logPath, 30))
		}
	}
	return a, nil
}

func (a *agentProc) pid() int { return a.cmd.Process.Pid }

// connected reads the agent's own session gauge.
func (a *agentProc) connected() bool {
	resp, err := http.Get("http://" + a.metrics + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	bs, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(bs), "\ncapstan_agent_session_connected 1")
}

// alive fails once the agent has exited.
func (a *agentProc) alive() error {
	select {
	case <-a.exited:
		return fmt.Errorf("agent exited (%v); its log:\n%s", a.waitErr, tail(a.logPath, 30))
	default:
		return nil
	}
}

// stop ends the agent with SIGTERM (it leaves its containers), then SIGKILL.
func (a *agentProc) stop() {
	select {
	case <-a.exited:
	default:
		a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(15 * time.Second):
			a.cmd.Process.Kill()
			<-a.exited
		}
	}
	a.log.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail is the last n lines of a file, for error messages.
func tail(path string, n int) string {
	bs, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(bs), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
