// Package sim provisions hollow instances: the real agent (registration,
// session, task engine, state, resources) running as goroutines of this
// process on the simulated runtime, each with its own websocket session,
// credential and bbolt state in a directory of its own (or in memory). Thousands fit in
// one process, which is what scale benchmarks and fault tests need. What a
// hollow agent does not need there (the task metadata endpoint, /metrics,
// fsync) is left out; see agent.Options.Hollow.
package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/agent"
	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/provision"
	simrt "github.com/capstanhq/capstan/internal/runtime/sim"
)

// Config sets up the provisioner.
type Config struct {
	// Dir holds one state directory per instance.
	Dir string
	// Delay is how long an instance takes to boot: its agent starts that
	// long after Launch returns.
	Delay time.Duration
	// Runtime is each instance's simulated host; its CPUs and memory come
	// from the launch request.
	Runtime simrt.Config
	// MemoryState keeps each instance's agent state in memory instead of
	// a bbolt file in its directory (it still survives the agent's
	// restarts, as a disk would, and goes with the instance).
	MemoryState bool
	// Log receives the agents' logs, each tagged with its instance; nil
	// discards them (thousands of agents are loud).
	Log *slog.Logger
	// ServerLog receives the provisioner's own lines; nil discards them.
	ServerLog *slog.Logger
}

// Provisioner runs hollow instances in this process.
type Provisioner struct {
	cfg    Config
	client *http.Client

	mu        sync.Mutex
	instances map[string]*instance
}

// instance is one hollow instance.
type instance struct {
	id     string
	dir    string
	rt     *simrt.Runtime
	db     *state.DB         // nil: a file in dir
	env    map[string]string // what the agent was configured from
	cancel context.CancelFunc
	done   chan struct{} // closed when the agent has returned

	mu   sync.Mutex
	arn  string
	dead bool  // killed, or its agent gave up
	err  error // why the agent returned
}

// New returns a provisioner keeping state under cfg.Dir.
func New(cfg Config) (*Provisioner, error) {
	if cfg.Dir == "" {
		return nil, errors.New("sim provisioner: Dir is required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("sim provisioner: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ServerLog == nil {
		cfg.ServerLog = slog.New(slog.DiscardHandler)
	}
	// One transport for all: registration connections are pooled, and each
	// session's websocket takes a connection of its own anyway.
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Provisioner{cfg: cfg, client: &http.Client{Transport: tr}, instances: map[string]*instance{}}, nil
}

func (p *Provisioner) Name() string { return "sim" }

// Launch starts a hollow instance whose agent boots after the delay.
func (p *Provisioner) Launch(_ context.Context, req provision.Request) (string, error) {
	if req.ID == "" || strings.ContainsAny(req.ID, "/.") {
		return "", fmt.Errorf("sim provisioner: bad instance id %q", req.ID)
	}
	dir := filepath.Join(p.cfg.Dir, req.ID)
	env := map[string]string{}
	for k, v := range req.Env {
		env[k] = v
	}
	env["ECS_DATADIR"] = dir
	if req.CPU > 0 {
		env["CAPSTAN_INSTANCE_CPU"] = strconv.Itoa(req.CPU)
	}
	if req.MemoryMiB > 0 {
		env["CAPSTAN_INSTANCE_MEMORY"] = strconv.Itoa(req.MemoryMiB)
	}
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, "")
	if err != nil {
		return "", fmt.Errorf("sim provisioner: %w", err)
	}
	rc := p.cfg.Runtime
	if req.CPU > 0 {
		rc.CPUs = max(1, req.CPU/1024)
	}
	if req.MemoryMiB > 0 {
		rc.MemoryBytes = int64(req.MemoryMiB) << 20
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{id: req.ID, dir: dir, env: env, rt: simrt.New(rc), cancel: cancel, done: make(chan struct{})}
	if p.cfg.MemoryState {
		in.db = state.OpenMemory()
	}
	p.mu.Lock()
	if _, ok := p.instances[req.ID]; ok {
		p.mu.Unlock()
		cancel()
		return "", fmt.Errorf("sim provisioner: instance %s exists", req.ID)
	}
	p.instances[req.ID] = in
	p.mu.Unlock()
	log := p.cfg.Log.With("instance", req.ID)
	go func() {
		defer close(in.done)
		if p.cfg.Delay > 0 {
			t := time.NewTimer(p.cfg.Delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		err := agent.Run(ctx, cfg, agent.Options{Runtime: in.rt, Log: log, HTTPClient: p.client,
			PauseImage: simrt.PauseImage, Hollow: true, State: in.db, Ready: func(e agent.Endpoints) {
				in.mu.Lock()
				in.arn = e.InstanceArn
				in.mu.Unlock()
			}})
		if ctx.Err() == nil {
			// The agent gave up on its own (a refused credential): the
			// instance is as good as gone.
			in.mu.Lock()
			in.dead, in.err = true, err
			in.mu.Unlock()
			p.cfg.ServerLog.Warn("hollow instance's agent stopped", "id", req.ID, "err", err)
		}
	}()
	return req.ID, nil
}

// LaunchBatch launches each instance as Launch does.
func (p *Provisioner) LaunchBatch(ctx context.Context, reqs []provision.Request) []provision.Launched {
	return provision.LaunchEach(ctx, p, reqs)
}

func (p *Provisioner) get(handle string) *instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.instances[handle]
}

// Alive reports whether the instance exists and has not been killed.
func (p *Provisioner) Alive(_ context.Context, handle string) (bool, error) {
	in := p.get(handle)
	if in == nil {
		return false, nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return !in.dead, nil
}

// Terminate stops the instance's agent and drops its containers and state.
func (p *Provisioner) Terminate(ctx context.Context, handle string) error {
	in := p.get(handle)
	if in == nil {
		return provision.ErrUnknown
	}
	in.cancel()
	select {
	case <-in.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	in.rt.Close()
	p.mu.Lock()
	delete(p.instances, handle)
	p.mu.Unlock()
	if err := os.RemoveAll(in.dir); err != nil {
		return fmt.Errorf("sim provisioner: %w", err)
	}
	return nil
}

// Kill makes the instance fail as a host does when it loses power: its
// agent and containers stop at once and Alive turns false, but it stays
// known until it is terminated.
func (p *Provisioner) Kill(handle string) error {
	in := p.get(handle)
	if in == nil {
		return provision.ErrUnknown
	}
	in.mu.Lock()
	in.dead = true
	in.mu.Unlock()
	in.cancel()
	in.rt.Close()
	<-in.done
	return nil
}

// Runtime returns the instance's simulated host, for crash injection.
func (p *Provisioner) Runtime(handle string) (*simrt.Runtime, bool) {
	in := p.get(handle)
	if in == nil {
		return nil, false
	}
	return in.rt, true
}

// Env is the environment the instance's agent was configured from, as a
// machine's agent reads its env file.
func (p *Provisioner) Env(handle string) (map[string]string, bool) {
	in := p.get(handle)
	if in == nil {
		return nil, false
	}
	return maps.Clone(in.env), true
}

// InstanceArn is the container instance the instance's agent registered
// as, "" until it has.
func (p *Provisioner) InstanceArn(handle string) string {
	in := p.get(handle)
	if in == nil {
		return ""
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.arn
}

// Handles lists the instances, sorted.
func (p *Provisioner) Handles() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.instances))
	for h := range p.instances {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// Close terminates every instance.
func (p *Provisioner) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, h := range p.Handles() {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := p.Terminate(ctx, h); err != nil && !errors.Is(err, provision.ErrUnknown) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	p.client.CloseIdleConnections()
	return errors.Join(errs...)
}

// Factory is a sim provisioner in the form server.Config.NewSimProvisioner
// takes.
func Factory(dir string, delay time.Duration, log *slog.Logger) (provision.Provisioner, error) {
	return New(Config{Dir: dir, Delay: delay, ServerLog: log})
}
