// Package local provisions managed instances as `capstan agent` processes
// on this machine, each with its own data directory and resource budget,
// running tasks in the host's Docker. Instances outlive a server restart:
// their process IDs are kept in their directories and adopted again.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/provision"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/docker"
)

// Provisioner starts agents as child processes.
type Provisioner struct {
	// Binary is the capstan executable to run as `Binary agent`.
	Binary string
	// Dir holds one directory per instance.
	Dir     string
	Runtime *docker.Runtime
	Log     *slog.Logger
	// CABundle is the PEM file agents trust the server's certificate by
	// (CAPSTAN_CA_BUNDLE, unless the request sets it); "" for the system's.
	CABundle string

	mu    sync.Mutex
	procs map[string]*exec.Cmd // started by this process, to reap them
}

// New returns a provisioner; binary "" means this executable.
func New(binary, dir string, rt *docker.Runtime, log *slog.Logger) (*Provisioner, error) {
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local provisioner: %w", err)
		}
		binary = exe
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Provisioner{Binary: binary, Dir: dir, Runtime: rt, Log: log, procs: map[string]*exec.Cmd{}}, nil
}

func (p *Provisioner) Name() string { return "local" }

func (p *Provisioner) instanceDir(handle string) string { return filepath.Join(p.Dir, handle) }

// Launch starts `capstan agent` with the request's environment.
func (p *Provisioner) Launch(ctx context.Context, req provision.Request) (string, error) {
	if strings.ContainsAny(req.ID, "/.") || req.ID == "" {
		return "", fmt.Errorf("local provisioner: bad instance id %q", req.ID)
	}
	dir := p.instanceDir(req.ID)
	if pid, err := p.pid(req.ID); err == nil && running(pid) {
		// Launched already (the ID is stable across retries, as an EC2
		// client token is): a second agent would share its data dir.
		p.Log.Warn("local instance already runs; not launching it again", "id", req.ID, "pid", pid)
		return req.ID, nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return "", err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	cmd := exec.Command(p.Binary, "agent")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		cmd.Env = append(cmd.Env, "DOCKER_HOST="+h)
	}
	if _, set := req.Env["CAPSTAN_CA_BUNDLE"]; !set && p.CABundle != "" {
		cmd.Env = append(cmd.Env, "CAPSTAN_CA_BUNDLE="+p.CABundle)
	}
	for k, v := range req.Env {
		if k == "CAPSTAN_METADATA_ADDR" {
			v = metadataAddr(v)
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "ECS_DATADIR="+filepath.Join(dir, "data"),
		"CAPSTAN_INSTANCE_CPU="+strconv.Itoa(req.CPU), "CAPSTAN_INSTANCE_MEMORY="+strconv.Itoa(req.MemoryMiB))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C meant for the server does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start agent: %w", err)
	}
	if err := writePID(dir, cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		return "", err
	}
	p.mu.Lock()
	p.procs[req.ID] = cmd
	p.mu.Unlock()
	go cmd.Wait() // reap it; Alive reads /proc
	p.Log.Info("launched local instance", "id", req.ID, "pid", cmd.Process.Pid, "cpu", req.CPU, "memory_mib", req.MemoryMiB)
	return req.ID, nil
}

// metadataAddr narrows a metadata endpoint address on all interfaces (the
// instances controller asks for 0.0.0.0:0, a free port per agent) to the
// docker0 gateway, where bridge, daemon and host-network tasks all reach it,
// as the agent's own default does; without docker0, loopback, where the
// agent would point host-network tasks anyway.
func metadataAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return addr
	}
	return net.JoinHostPort(bridgeIP(), port)
}

// bridgeIP is docker0's IPv4 address, else 127.0.0.1; a variable for tests.
var bridgeIP = func() string {
	if ifc, err := net.InterfaceByName("docker0"); err == nil {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// pid is the instance's agent process ID: from its pid file, else from
// the agent process whose data dir is the instance's, noted for next time.
// The file is missing when a launcher was killed between starting the
// agent and writing it; without the search that agent ran on unknown,
// and its instance was found lost and launched again.
func (p *Provisioner) pid(handle string) (int, error) {
	dir := p.instanceDir(handle)
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			return pid, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	if _, err := os.Stat(dir); err != nil {
		return 0, provision.ErrUnknown
	}
	pid := agentServing(filepath.Join(dir, "data"))
	if pid == 0 {
		return 0, provision.ErrUnknown
	}
	if err := writePID(dir, pid); err != nil {
		p.Log.Warn("note a found agent's pid", "id", handle, "pid", pid, "err", err)
	}
	p.Log.Warn("found the agent of a local instance whose pid was not recorded", "id", handle, "pid", pid)
	return pid, nil
}

// writePID records an instance's agent process ID whole or not at all: a
// launcher killed mid-write leaves no file, never a truncated one.
func writePID(dir string, pid int) error {
	tmp := filepath.Join(dir, "pid.tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "pid"))
}

// agentServing is the ID of the running agent process whose ECS_DATADIR
// is data (compared as files: another server may reach the same
// instances through a symlink), or 0.
func agentServing(data string) int {
	want, err := os.Stat(data)
	if err != nil {
		return 0
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !running(pid) {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for kv := range strings.SplitSeq(string(env), "\x00") {
			if d, ok := strings.CutPrefix(kv, "ECS_DATADIR="); ok {
				if st, err := os.Stat(d); err == nil && os.SameFile(st, want) {
					return pid
				}
				break
			}
		}
	}
	return 0
}

// agentRetired is in the agent's last log line when it stopped because
// its instance was retired (internal/agent).
const agentRetired = "is being retired; stopping"

// Known reports whether the handle's instance directory is still there:
// Terminate removes it, so an instance terminated by anyone is unknown.
func (p *Provisioner) Known(handle string) bool {
	_, err := os.Stat(p.instanceDir(handle))
	return err == nil
}

// Find returns the handle of the instance launched for request ID id,
// if its directory is there (the handle is the ID): a server that stopped
// between Launch and recording the handle adopts it on its next pass.
func (p *Provisioner) Find(id string) (string, bool) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return "", false
	}
	return id, p.Known(id)
}

// Alive reports whether the instance's agent process runs.
func (p *Provisioner) Alive(_ context.Context, handle string) (bool, error) {
	pid, err := p.pid(handle)
	if errors.Is(err, provision.ErrUnknown) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return running(pid), nil
}

// running checks the process exists, is not a zombie, and is an agent.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), "agent")
}

// Terminate stops the agent, then removes everything that ran on the
// instance, as if the machine went away.
func (p *Provisioner) Terminate(ctx context.Context, handle string) error {
	dir := p.instanceDir(handle)
	if pid, err := p.pid(handle); err == nil && !running(pid) {
		// It ended on its own: keep its last words in the server's log. An
		// agent whose instance was retired (a rollout's replacement, a scale
		// in) stops by itself, as it should.
		last := tail(filepath.Join(dir, "agent.log"), 1500)
		lvl := slog.LevelWarn
		if strings.Contains(last, agentRetired) {
			lvl = slog.LevelInfo
		}
		p.Log.Log(ctx, lvl, "local instance had exited", "id", handle, "log_tail", last)
	} else if err == nil {
		syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(15 * time.Second)
		for running(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if running(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			for i := 0; running(pid) && i < 100; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	p.mu.Lock()
	delete(p.procs, handle)
	p.mu.Unlock()
	arn, err := p.removeContainers(ctx, dir)
	if err != nil {
		return err
	}
	if arn != "" {
		go p.sweepLate(arn)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p.Log.Info("terminated local instance", "id", handle)
	return nil
}

// removeContainers removes the containers labelled with the instance ARN
// the agent recorded in its database.
// It returns the ARN ("" for an instance that never registered).
func (p *Provisioner) removeContainers(ctx context.Context, dir string) (string, error) {
	dbPath := filepath.Join(dir, "data", state.FileName)
	if _, err := os.Stat(dbPath); err != nil {
		return "", nil // never registered
	}
	db, err := state.Open(dbPath)
	if err != nil {
		return "", fmt.Errorf("read instance state: %w", err)
	}
	arn, err := db.InstanceARN()
	db.Close()
	if err != nil || arn == "" {
		return "", err
	}
	if err := p.removeLabelled(ctx, arn); err != nil {
		return arn, err
	}
	// The instance's daemon network goes with it, freeing its subnet.
	nets, err := p.Runtime.Networks(ctx, map[string]string{"com.capstan.instance": arn})
	if err != nil {
		return arn, err
	}
	for _, n := range nets {
		for id := range n.Containers {
			if err := p.Runtime.DisconnectNetwork(ctx, n.ID, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				return arn, err
			}
		}
		if err := p.Runtime.RemoveNetwork(ctx, n.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return arn, fmt.Errorf("remove network %s: %w", n.Name, err)
		}
	}
	return arn, nil
}

// removeLabelled removes the containers labelled with the instance ARN.
func (p *Provisioner) removeLabelled(ctx context.Context, arn string) error {
	cs, err := p.Runtime.List(ctx, map[string]string{"com.capstan.instance": arn})
	if err != nil {
		return err
	}
	for _, c := range cs {
		if err := p.Runtime.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return fmt.Errorf("remove container %s: %w", c.ID, err)
		}
	}
	return nil
}

// A killed agent's requests to Docker still complete after it died (a
// create sent just before kill -9 can finish after the instance was
// terminated): the instance's containers are swept again for a minute.
const (
	lateSweeps     = 12
	lateSweepEvery = 5 * time.Second
)

func (p *Provisioner) sweepLate(arn string) {
	for range lateSweeps {
		time.Sleep(lateSweepEvery)
		ctx, cancel := context.WithTimeout(context.Background(), lateSweepEvery)
		err := p.removeLabelled(ctx, arn)
		cancel()
		if err != nil {
			p.Log.Warn("sweep a terminated instance's late containers", "instance", arn, "err", err)
		}
	}
}

// Handles lists the instances that have a directory (for cleanup).
func (p *Provisioner) Handles() ([]string, error) {
	entries, err := os.ReadDir(p.Dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// tail returns the end of a file, for logs.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(st.Size()-n, 0)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return string(b[:k])
}
