package sim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// container is a simulated container. Its fields are guarded by r.mu.
type container struct {
	id, name    string
	image       string
	labels      map[string]string
	spec        runtime.ContainerSpec
	b           Behaviour
	state       string
	exitCode    int
	errText     string
	health      string
	oom         bool
	created     time.Time
	started     time.Time
	finished    time.Time
	ports       []runtime.PortBinding
	ip          string
	network     string // user network ID, if on one
	fixedIP     string // address asked for on the user network
	runs        int    // starts so far: a timer of an earlier run is stale
	exitTimer   *time.Timer
	healthTimer *time.Timer
}

func (c *container) stopTimers() {
	if c.exitTimer != nil {
		c.exitTimer.Stop()
		c.exitTimer = nil
	}
	if c.healthTimer != nil {
		c.healthTimer.Stop()
		c.healthTimer = nil
	}
}

func (c *container) hasHealthCheck() bool {
	h := c.spec.Healthcheck
	return h != nil && len(h.Test) > 0 && h.Test[0] != "NONE"
}

func (c *container) view() runtime.Container {
	return runtime.Container{ID: c.id, Name: c.name, Image: c.image, ImageID: imageID(c.image), Labels: copyMap(c.labels),
		State: c.state, ExitCode: c.exitCode, OOMKilled: c.oom, Error: c.errText, Health: c.health,
		CreatedAt: c.created, StartedAt: c.started, FinishedAt: c.finished, Ports: slices.Clone(c.ports),
		IPAddress: c.ip, NetworkMode: c.spec.NetworkMode, Pid: c.pid()}
}

func (c *container) pid() int {
	if c.state != runtime.StateRunning {
		return 0
	}
	return 1000 + c.runs
}

// lookup finds a container by ID or name; r.mu is held.
func (r *Runtime) lookup(ref string) *container {
	if c := r.containers[ref]; c != nil {
		return c
	}
	if id, ok := r.names[strings.TrimPrefix(ref, "/")]; ok {
		return r.containers[id]
	}
	return nil
}

// Create makes a container in state created. The image must be present
// (every image is, unless PullRequired); a name in use fails as in Docker.
func (r *Runtime) Create(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	return r.create(ctx, spec, "")
}

func (r *Runtime) create(ctx context.Context, spec runtime.ContainerSpec, fixedIP string) (string, error) {
	if err := wait(ctx, r.cfg.CreateLatency); err != nil {
		return "", fmt.Errorf("sim: create container %q: %w", spec.Name, err)
	}
	b, err := r.behaviour(spec)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return "", errClosed
	}
	if !r.present(spec.Image) {
		return "", fmt.Errorf("sim: create container %q: no such image %s: %w", spec.Name, spec.Image, runtime.ErrNotFound)
	}
	id := newID()
	name := spec.Name
	if name == "" {
		name = "sim_" + id[:12]
	}
	if _, taken := r.names[name]; taken {
		return "", fmt.Errorf("sim: create container %q: the name is already in use (Conflict)", name)
	}
	c := &container{id: id, name: name, image: spec.Image, labels: copyMap(spec.Labels), spec: spec, b: b,
		state: runtime.StateCreated, created: r.cfg.Now(), fixedIP: fixedIP}
	c.spec.Labels = nil // kept once, in c.labels
	if n := r.userNetwork(spec.NetworkMode); n != nil {
		c.network = n.id
	} else if isUserNetworkMode(spec.NetworkMode) {
		return "", fmt.Errorf("sim: create container %q: network %s: %w", name, spec.NetworkMode, runtime.ErrNotFound)
	}
	r.containers[id] = c
	r.names[name] = id
	r.emit(c, runtime.EventCreate, nil)
	return id, nil
}

// isUserNetworkMode tells a user network name from the built-in modes.
func isUserNetworkMode(mode string) bool {
	switch {
	case mode == "", mode == "bridge", mode == "host", mode == "none", mode == "default", strings.HasPrefix(mode, "container:"):
		return false
	}
	return true
}

// Start runs a created or exited container. A StartError behaviour fails
// it the way an engine does for a command that cannot run: created, with
// exit code 128 and the error recorded.
func (r *Runtime) Start(ctx context.Context, id string) error {
	if err := wait(ctx, r.cfg.StartLatency); err != nil {
		return fmt.Errorf("sim: start container %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errClosed
	}
	c := r.lookup(id)
	if c == nil {
		return notFound("container", id)
	}
	if c.state == runtime.StateRunning {
		return nil
	}
	if joined, ok := strings.CutPrefix(c.spec.NetworkMode, "container:"); ok {
		if o := r.lookup(joined); o == nil || o.state != runtime.StateRunning {
			c.errText, c.exitCode = "cannot join network of a non running container: "+joined, 128
			return fmt.Errorf("sim: start container %s: cannot join network of a non running container %s", id, joined)
		}
	}
	if c.b.StartError != "" {
		c.errText, c.exitCode = c.b.StartError, 128
		return fmt.Errorf("sim: start container %s: %s", id, c.b.StartError)
	}
	now := r.cfg.Now()
	c.runs++
	c.state, c.exitCode, c.errText, c.oom = runtime.StateRunning, 0, "", false
	c.started, c.finished = now, time.Time{}
	c.ip = r.address(c)
	c.ports = c.ports[:0]
	for _, p := range c.spec.Ports {
		hp := p.HostPort
		if hp == 0 {
			hp = r.nextPort
			r.nextPort++
		}
		ip := p.HostIP
		if ip == "" {
			ip = "0.0.0.0"
		}
		proto := p.Protocol
		if proto == "" {
			proto = "tcp"
		}
		c.ports = append(c.ports, runtime.PortBinding{ContainerPort: p.ContainerPort, HostPort: hp, HostIP: ip, Protocol: proto})
	}
	c.health = runtime.HealthNone
	if c.hasHealthCheck() {
		c.health = runtime.HealthStarting
	}
	r.emit(c, runtime.EventStart, nil)
	run := c.runs
	if c.b.Exit {
		if c.b.ExitAfter <= 0 {
			r.exit(c, c.b.ExitCode)
			return nil
		}
		c.exitTimer = time.AfterFunc(c.b.ExitAfter, func() { r.exitLater(c.id, run, c.b.ExitCode) })
	}
	if c.hasHealthCheck() {
		c.healthTimer = time.AfterFunc(c.healthAfter(), func() { r.reportHealth(c.id, run) })
	}
	return nil
}

// address is the container's IP for this run; r.mu is held.
func (r *Runtime) address(c *container) string {
	switch {
	case c.network != "":
		n := r.networks[c.network]
		if n == nil {
			return ""
		}
		if c.fixedIP != "" {
			n.attached[c.id] = netipMust(c.fixedIP)
		} else if _, ok := n.attached[c.id]; !ok {
			n.attached[c.id] = n.free()
		}
		return n.attached[c.id].String()
	case c.spec.NetworkMode == "" || c.spec.NetworkMode == "bridge" || c.spec.NetworkMode == "default":
		return r.bridgeIP()
	}
	return "" // host, none, or another container's namespace
}

// healthAfter is when the first check reports, as an engine times it.
func (c *container) healthAfter() time.Duration {
	if c.b.HealthAfter > 0 {
		return c.b.HealthAfter
	}
	h := c.spec.Healthcheck
	switch {
	case h.StartPeriod > 0 && h.Interval > 0:
		return min(h.StartPeriod, h.Interval)
	case h.Interval > 0:
		return h.Interval
	}
	return 30 * time.Second
}

// reportHealth delivers the check's verdict for run, if it still runs.
func (r *Runtime) reportHealth(id string, run int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.containers[id]
	if r.closed || c == nil || c.runs != run || c.state != runtime.StateRunning {
		return
	}
	c.healthTimer = nil
	h := c.b.Health
	if h == "" {
		h = runtime.HealthHealthy
	}
	r.setHealth(c, h)
}

// setHealth records and reports a health change; r.mu is held.
func (r *Runtime) setHealth(c *container, h string) {
	if c.health == h {
		return
	}
	c.health = h
	r.emit(c, runtime.EventHealth, func(ev *runtime.Event) { ev.Health = h })
}

func (r *Runtime) exitLater(id string, run, code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.containers[id]
	if r.closed || c == nil || c.runs != run {
		return
	}
	c.exitTimer = nil
	r.exit(c, code)
}

// exit ends a running container with code; r.mu is held.
func (r *Runtime) exit(c *container, code int) {
	if c.state != runtime.StateRunning {
		return
	}
	c.stopTimers()
	c.state, c.exitCode = runtime.StateExited, code
	// Finish strictly after start, however coarse the clock.
	c.finished = r.cfg.Now()
	if !c.finished.After(c.started) {
		c.finished = c.started.Add(time.Microsecond)
	}
	if c.health != runtime.HealthNone {
		c.health = runtime.HealthUnhealthy
	}
	if code == 137 {
		r.emit(c, runtime.EventKill, nil)
	}
	r.emit(c, runtime.EventDie, func(ev *runtime.Event) { ev.ExitCode = code })
}

// Stop ends a running container: 143 after StopLatency, or, for one that
// ignores its stop signal, 137 once timeout has passed. Stopping one that
// does not run is a no-op.
func (r *Runtime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	r.mu.Lock()
	c := r.lookup(id)
	if c == nil {
		r.mu.Unlock()
		return notFound("container", id)
	}
	if c.state != runtime.StateRunning {
		r.mu.Unlock()
		return nil
	}
	run, ignore := c.runs, c.b.IgnoreStop
	if timeout < 0 {
		timeout = c.spec.StopTimeout
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
	}
	r.mu.Unlock()
	delay, code := r.cfg.StopLatency, 143
	if ignore {
		delay, code = timeout, 137
	}
	if err := wait(ctx, delay); err != nil {
		return fmt.Errorf("sim: stop container %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.containers[c.id]; c != nil && c.runs == run {
		r.exit(c, code)
		r.emit(c, runtime.EventStop, nil)
	}
	return nil
}

// Remove deletes a container, killing it first if it runs.
func (r *Runtime) Remove(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.lookup(id)
	if c == nil {
		return notFound("container", id)
	}
	r.exit(c, 137)
	c.stopTimers()
	if n := r.networks[c.network]; n != nil {
		delete(n.attached, c.id)
	}
	c.state = runtime.StateRemoving
	r.emit(c, runtime.EventDestroy, nil)
	delete(r.containers, c.id)
	delete(r.names, c.name)
	return nil
}

func (r *Runtime) Inspect(_ context.Context, id string) (runtime.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.lookup(id)
	if c == nil {
		return runtime.Container{}, notFound("container", id)
	}
	return c.view(), nil
}

// List returns the containers carrying all labels, oldest first.
func (r *Runtime) List(_ context.Context, labels map[string]string) ([]runtime.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errClosed
	}
	var out []runtime.Container
	for _, c := range r.containers {
		if matches(c.labels, labels) {
			out = append(out, c.view())
		}
	}
	slices.SortFunc(out, func(a, b runtime.Container) int {
		if d := a.CreatedAt.Compare(b.CreatedAt); d != 0 {
			return d
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Stats makes up a sample: memory at the container's reservation (or a
// small default), CPU time growing with its age.
func (r *Runtime) Stats(_ context.Context, id string) (runtime.Stats, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.lookup(id)
	if c == nil {
		return runtime.Stats{}, notFound("container", id)
	}
	if c.state != runtime.StateRunning {
		return runtime.Stats{}, fmt.Errorf("sim: stats of container %s: not running", id)
	}
	now := r.cfg.Now()
	mem := uint64(c.spec.MemoryReservation)
	if mem == 0 {
		mem = 16 << 20
	}
	limit := uint64(c.spec.MemoryLimit)
	if limit == 0 {
		limit = uint64(r.cfg.MemoryBytes)
	}
	cpu := uint64(now.Sub(c.started) / 100) // 1% of one CPU
	s := runtime.Stats{Time: now, CPUTotalNanos: cpu, SystemCPUNanos: uint64(now.UnixNano()), OnlineCPUs: r.cfg.CPUs,
		MemoryUsageBytes: mem, MemoryLimitBytes: limit, Pids: 1}
	s.Raw = fmt.Appendf(nil, `{"read":%q,"name":"/%s","id":%q,"pids_stats":{"current":1},"cpu_stats":{"cpu_usage":{"total_usage":%d},"system_cpu_usage":%d,"online_cpus":%d},"memory_stats":{"usage":%d,"limit":%d}}`,
		now.UTC().Format(time.RFC3339Nano), c.name, c.id, cpu, s.SystemCPUNanos, r.cfg.CPUs, mem, limit)
	return s, nil
}

// Logs returns the container's Output, then a line saying how it exited.
func (r *Runtime) Logs(_ context.Context, id string, tail int) (io.ReadCloser, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.lookup(id)
	if c == nil {
		return nil, notFound("container", id)
	}
	var lines []string
	if c.b.Output != "" {
		lines = append(lines, strings.Split(strings.TrimRight(c.b.Output, "\n"), "\n")...)
	}
	if c.state == runtime.StateExited {
		lines = append(lines, "sim: exited with code "+strconv.Itoa(c.exitCode))
	}
	if tail > 0 && len(lines) > tail {
		lines = lines[len(lines)-tail:]
	}
	text := strings.Join(lines, "\n")
	if text != "" {
		text += "\n"
	}
	return io.NopCloser(strings.NewReader(text)), nil
}

// Exec runs nothing: in a running container every command succeeds with
// no output, unless it is `exit N`, which returns N.
func (r *Runtime) Exec(_ context.Context, id string, cmd []string) (int, []byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.lookup(id)
	if c == nil {
		return 0, nil, notFound("container", id)
	}
	if c.state != runtime.StateRunning {
		return 0, nil, fmt.Errorf("sim: exec in container %s: container is not running (Conflict)", id)
	}
	if len(cmd) == 2 && cmd[0] == "exit" {
		code, err := strconv.Atoi(cmd[1])
		if err == nil {
			return code, nil, nil
		}
	}
	return 0, nil, nil
}

// Crash makes a running container exit with code now, as a crash would
// (137 reads as killed, e.g. by the OOM killer when oom is set).
func (r *Runtime) Crash(id string, code int, oom bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.lookup(id)
	if c == nil {
		return notFound("container", id)
	}
	if c.state != runtime.StateRunning {
		return fmt.Errorf("sim: crash container %s: not running", id)
	}
	if oom {
		r.emit(c, runtime.EventOOM, nil)
	}
	r.exit(c, code)
	c.oom = oom
	return nil
}

// SetHealth changes what a running container's health check reports.
func (r *Runtime) SetHealth(id, health string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.lookup(id)
	if c == nil {
		return notFound("container", id)
	}
	if c.state != runtime.StateRunning || !c.hasHealthCheck() {
		return fmt.Errorf("sim: set health of container %s: not running with a health check", id)
	}
	if c.healthTimer != nil {
		c.healthTimer.Stop()
		c.healthTimer = nil
	}
	c.b.Health = health
	r.setHealth(c, health)
	return nil
}
