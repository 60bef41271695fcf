package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/provision"
	simprov "github.com/capstanhq/capstan/internal/provision/sim"
)

// host runs hollow instances: in this process (tests), or in a child
// process so that the server's memory and CPU are measured alone.
type host interface {
	Launch(id string, cpu, mem int, env map[string]string) error
	// LaunchAll launches many at once; one error (or nil) each.
	LaunchAll(reqs []provision.Request) []error
	Kill(id string) error
	// Terminate stops the instance and forgets it.
	Terminate(id string) error
	// Arn is the container instance the instance registered as.
	Arn(id string) (string, error)
	Stats() (hostStats, error)
	// CPUProfile starts (on) or stops the hollow agents' CPU profile of a
	// phase (-agent-cpuprofile with -profile-phase).
	CPUProfile(on bool) error
	Close() error
}

// hostStats describe the process the hollow instances run in.
type hostStats struct {
	RSSBytes   int64 `json:"rss"`
	HeapBytes  int64 `json:"heap"`
	StackBytes int64 `json:"stacks"`
	// HeapFree is heap memory free but not yet given back to the system.
	HeapFree int64 `json:"heap_free"`
	// HeapLive is what the last collection marked: HeapBytes less the
	// free slots of the spans in use.
	HeapLive   int64   `json:"heap_live"`
	Goroutines int     `json:"goroutines"`
	CPUSeconds float64 `json:"cpu"`
}

// localHost runs instances through a sim provisioner in this process.
type localHost struct{ p *simprov.Provisioner }

func newLocalHost(dir string, memoryState bool, delay time.Duration, log *slog.Logger) (*localHost, error) {
	p, err := simprov.New(simprov.Config{Dir: dir, MemoryState: memoryState, Delay: delay, Log: log})
	if err != nil {
		return nil, err
	}
	return &localHost{p: p}, nil
}

func (h *localHost) Launch(id string, cpu, mem int, env map[string]string) error {
	_, err := h.p.Launch(context.Background(), provision.Request{ID: id, CPU: cpu, MemoryMiB: mem, Env: env})
	return err
}

func (h *localHost) LaunchAll(reqs []provision.Request) []error {
	errs := make([]error, len(reqs))
	for i, l := range h.p.LaunchBatch(context.Background(), reqs) {
		errs[i] = l.Err
	}
	return errs
}

func (h *localHost) Kill(id string) error { return h.p.Kill(id) }
func (h *localHost) Terminate(id string) error {
	err := h.p.Terminate(context.Background(), id)
	if errors.Is(err, provision.ErrUnknown) {
		return nil
	}
	return err
}
func (h *localHost) Arn(id string) (string, error) { return h.p.InstanceArn(id), nil }
func (h *localHost) Close() error                  { return h.p.Close() }

// CPUProfile does nothing: in-process instances are in the server's profile.
func (h *localHost) CPUProfile(bool) error { return nil }
func (h *localHost) Stats() (hostStats, error) {
	return selfStats(), nil
}

// selfStats measures this process, after a collection so the heap is live
// data only.
func selfStats() hostStats {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return hostStats{RSSBytes: rss(os.Getpid()), HeapBytes: int64(ms.HeapInuse), StackBytes: int64(ms.StackInuse),
		HeapFree: int64(ms.HeapIdle - ms.HeapReleased), HeapLive: heapLive(), Goroutines: runtime.NumGoroutine(), CPUSeconds: cpuSeconds(os.Getpid())}
}

func heapLive() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// rss reads a process's resident set from /proc (0 elsewhere).
func rss(pid int) int64 { return procStatus(pid, "VmRSS") }

// procStatus reads one kB field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuSeconds is a process's user and system CPU time from /proc.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// childEnv marks the process as the hollow host.
const childEnv = "CAPSTAN_SCALE_HOLLOW_HOST"

// request and response are the child's protocol, one JSON line each. The
// child serves requests side by side and answers each, with its Seq, when
// it is done: a provisioner's calls overlap, as a cloud's API calls do (one
// at a time, a rollout's 5,000 terminations queued behind each other's
// agent shutdowns, a cost no real provisioner has).
type request struct {
	Seq uint64            `json:"seq"`
	Op  string            `json:"op"` // launch, launches, kill, terminate, arn, stats
	ID  string            `json:"id,omitempty"`
	CPU int               `json:"cpu,omitempty"`
	Mem int               `json:"mem,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Launches are the instances of one "launches" call.
	Launches []provision.Request `json:"launches,omitempty"`
}

type response struct {
	Seq uint64 `json:"seq"`
	Err string `json:"err,omitempty"`
	Arn string `json:"arn,omitempty"`
	// Errs are a "launches" call's, one for each instance ("": launched).
	Errs  []string  `json:"errs,omitempty"`
	Stats hostStats `json:"stats"`
}

// childHost runs instances in a child process of this executable.
type childHost struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	wmu sync.Mutex // one request line at a time

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]chan response
	readErr error // once the child's output ended
}

// newChildHost starts the child at niceness nice (0: as this process):
// started under nice(1), so every thread of it inherits the priority. With
// a profile path, the child writes its CPU profile there when it exits, or,
// with phased, from CPUProfile(true) to CPUProfile(false). gogc > 0 sets the
// child's GOGC.
func newChildHost(dir, logPath, profile string, phased bool, nice, gogc int, memoryState bool, delay time.Duration) (*childHost, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	if nice != 0 {
		cmd = exec.Command("nice", "-n", strconv.Itoa(nice), exe)
	}
	cmd.Env = append(os.Environ(), childEnv+"="+dir, "CAPSTAN_SCALE_AGENT_LOG="+logPath, "CAPSTAN_SCALE_AGENT_CPUPROFILE="+profile)
	if phased {
		cmd.Env = append(cmd.Env, "CAPSTAN_SCALE_AGENT_CPUPROFILE_PHASED=1")
	}
	if gogc > 0 {
		cmd.Env = append(cmd.Env, "GOGC="+strconv.Itoa(gogc))
	}
	if memoryState {
		cmd.Env = append(cmd.Env, "CAPSTAN_SCALE_AGENT_STATE=memory")
	}
	cmd.Env = append(cmd.Env, "CAPSTAN_SCALE_PROVISION_DELAY="+delay.String())
	in, out, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	h := talkTo(in, out)
	h.cmd = cmd
	return h, nil
}

// talkTo is the parent's end of the protocol over in and out.
func talkTo(in io.WriteCloser, out io.Reader) *childHost {
	h := &childHost{in: in, pending: map[uint64]chan response{}}
	go h.read(out)
	return h
}

// read hands each response to the call waiting for it, until the child's
// output ends; then every call waiting or to come fails.
func (h *childHost) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	ended := errors.New("hollow host exited")
	for sc.Scan() {
		var resp response
		if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
			// Whose answer it was is unknown: every call fails rather
			// than one waiting for ever.
			ended = fmt.Errorf("hollow host: %w", err)
			break
		}
		h.mu.Lock()
		ch := h.pending[resp.Seq]
		delete(h.pending, resp.Seq)
		h.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	h.mu.Lock()
	if err := sc.Err(); err != nil {
		ended = fmt.Errorf("hollow host exited: %w", err)
	}
	h.readErr = ended
	for seq, ch := range h.pending {
		close(ch)
		delete(h.pending, seq)
	}
	h.mu.Unlock()
}

// startChild starts a child process of the benchmark, talking over its
// stdin and stdout, killed if the benchmark dies.
func startChild(cmd *exec.Cmd) (io.WriteCloser, io.ReadCloser, error) {
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return in, out, nil
}

func (h *childHost) call(r request) (response, error) {
	ch := make(chan response, 1)
	h.mu.Lock()
	if h.readErr != nil {
		h.mu.Unlock()
		return response{}, h.readErr
	}
	h.seq++
	r.Seq = h.seq
	h.pending[r.Seq] = ch
	h.mu.Unlock()
	b, _ := json.Marshal(r)
	h.wmu.Lock()
	_, err := h.in.Write(append(b, '\n'))
	h.wmu.Unlock()
	if err != nil {
		h.mu.Lock()
		delete(h.pending, r.Seq)
		h.mu.Unlock()
		return response{}, fmt.Errorf("hollow host: %w", err)
	}
	resp, ok := <-ch
	if !ok {
		h.mu.Lock()
		defer h.mu.Unlock()
		return response{}, h.readErr
	}
	if resp.Err != "" {
		return resp, errors.New(resp.Err)
	}
	return resp, nil
}

func (h *childHost) Launch(id string, cpu, mem int, env map[string]string) error {
	_, err := h.call(request{Op: "launch", ID: id, CPU: cpu, Mem: mem, Env: env})
	return err
}

// LaunchAll is one call for all of reqs, as a cloud's run-instances call
// with a count.
func (h *childHost) LaunchAll(reqs []provision.Request) []error {
	errs := make([]error, len(reqs))
	resp, err := h.call(request{Op: "launches", Launches: reqs})
	for i := range errs {
		switch {
		case err != nil:
			errs[i] = err
		case i < len(resp.Errs) && resp.Errs[i] != "":
			errs[i] = errors.New(resp.Errs[i])
		case i >= len(resp.Errs):
			errs[i] = errors.New("hollow host: no answer for this instance")
		}
	}
	return errs
}

func (h *childHost) Kill(id string) error {
	_, err := h.call(request{Op: "kill", ID: id})
	return err
}

func (h *childHost) Terminate(id string) error {
	_, err := h.call(request{Op: "terminate", ID: id})
	return err
}

func (h *childHost) Arn(id string) (string, error) {
	r, err := h.call(request{Op: "arn", ID: id})
	return r.Arn, err
}

func (h *childHost) Stats() (hostStats, error) {
	r, err := h.call(request{Op: "stats"})
	return r.Stats, err
}

func (h *childHost) CPUProfile(on bool) error {
	op := "stop"
	if on {
		op = "start"
	}
	_, err := h.call(request{Op: "cpuprofile", ID: op})
	return err
}

func (h *childHost) Close() error {
	h.in.Close() // the child terminates its instances and exits
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		h.cmd.Process.Kill()
		return errors.New("hollow host did not exit in 2m; killed")
	}
}

// serveHost is the child's main: it serves requests until stdin closes.
func serveHost(dir string) error {
	log := slog.New(slog.DiscardHandler)
	if path := os.Getenv("CAPSTAN_SCALE_AGENT_LOG"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		log = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	prof := &childProfile{path: os.Getenv("CAPSTAN_SCALE_AGENT_CPUPROFILE")}
	if prof.path != "" && os.Getenv("CAPSTAN_SCALE_AGENT_CPUPROFILE_PHASED") == "" {
		if err := prof.set(true); err != nil {
			return err
		}
	}
	defer prof.set(false)
	delay, _ := time.ParseDuration(os.Getenv("CAPSTAN_SCALE_PROVISION_DELAY"))
	h, err := newLocalHost(dir, os.Getenv("CAPSTAN_SCALE_AGENT_STATE") == "memory", delay, log)
	if err != nil {
		return err
	}
	defer h.Close()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	var (
		wmu      sync.Mutex
		inFlight sync.WaitGroup
	)
	answer := func(resp response) {
		b, _ := json.Marshal(resp)
		wmu.Lock()
		defer wmu.Unlock()
		out.Write(append(b, '\n'))
		out.Flush()
	}
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			answer(response{Seq: r.Seq, Err: err.Error()})
			continue
		}
		if r.Op == "cpuprofile" {
			resp := response{Seq: r.Seq}
			if err := prof.set(r.ID == "start"); err != nil {
				resp.Err = err.Error()
			}
			answer(resp)
			continue
		}
		inFlight.Go(func() { answer(serveRequest(h, r)) })
	}
	// The instances are terminated (h.Close) once no request is in flight.
	inFlight.Wait()
	return in.Err()
}

// childProfile is the child's CPU profile, started and stopped in turn.
type childProfile struct {
	path string
	f    *os.File
}

func (p *childProfile) set(on bool) error {
	switch {
	case p.path == "" || on == (p.f != nil):
		return nil
	case on:
		f, err := os.Create(p.path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		p.f = f
		return nil
	default:
		pprof.StopCPUProfile()
		err := p.f.Close()
		p.f = nil
		return err
	}
}

// serveRequest carries out one request of the parent.
func serveRequest(h *localHost, r request) response {
	resp := response{Seq: r.Seq}
	var err error
	switch r.Op {
	case "launch":
		err = h.Launch(r.ID, r.CPU, r.Mem, r.Env)
	case "launches":
		for _, e := range h.LaunchAll(r.Launches) {
			msg := ""
			if e != nil {
				msg = e.Error()
			}
			resp.Errs = append(resp.Errs, msg)
		}
	case "kill":
		err = h.Kill(r.ID)
	case "terminate":
		err = h.Terminate(r.ID)
	case "arn":
		resp.Arn, err = h.Arn(r.ID)
	case "stats":
		resp.Stats, err = h.Stats()
	default:
		err = fmt.Errorf("unknown op %q", r.Op)
	}
	if err != nil {
		resp.Err = err.Error()
	}
	return resp
}

// hostProvisioner is the server's provisioner in a -provisioned run: the
// instances it launches are hollow instances of the host, outside the
// server's process. It knows which it launched and terminated, so Alive,
// asked for every instance on every pass, costs no call.
type hostProvisioner struct {
	h host

	mu    sync.Mutex
	alive map[string]bool
}

func newHostProvisioner(h host) *hostProvisioner {
	return &hostProvisioner{h: h, alive: map[string]bool{}}
}

func (p *hostProvisioner) Name() string { return "sim" }

// Launch asks the host, whose instances boot after -sim-provision-delay.
func (p *hostProvisioner) Launch(_ context.Context, req provision.Request) (string, error) {
	if err := p.h.Launch(req.ID, req.CPU, req.MemoryMiB, req.Env); err != nil {
		return "", err
	}
	p.mu.Lock()
	p.alive[req.ID] = true
	p.mu.Unlock()
	return req.ID, nil
}

// LaunchBatch asks the host for all of reqs in one call.
func (p *hostProvisioner) LaunchBatch(_ context.Context, reqs []provision.Request) []provision.Launched {
	out := make([]provision.Launched, len(reqs))
	for i, err := range p.h.LaunchAll(reqs) {
		out[i].Err = err
		if err == nil {
			out[i].Handle = reqs[i].ID
			p.mu.Lock()
			p.alive[reqs[i].ID] = true
			p.mu.Unlock()
		}
	}
	return out
}

func (p *hostProvisioner) Terminate(_ context.Context, handle string) error {
	p.mu.Lock()
	_, known := p.alive[handle]
	delete(p.alive, handle)
	p.mu.Unlock()
	if !known {
		return provision.ErrUnknown
	}
	return p.h.Terminate(handle)
}

func (p *hostProvisioner) Alive(_ context.Context, handle string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.alive[handle], nil
}

// handles are the instances launched and not terminated, sorted.
func (p *hostProvisioner) handles() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.alive))
}

// launched counts the instances launched and not terminated.
func (p *hostProvisioner) launched() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.alive)
}
