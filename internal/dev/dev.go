// Package dev is `capstan dev`: a whole Capstan on one machine in one
// command. It runs the control plane in-process on a data directory with
// the local provisioner (instances are agent processes on the local Docker
// Engine), and a sample platform: a telemetry daemon on every instance and
// a two-task web service reporting to it. Then it tells the user what to
// try. Everything it started goes away on Ctrl-C; the state in the data
// directory stays for the next run.
package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/provision/agentenv"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/server"
)

// Defaults of the command line.
const (
	DefaultListen  = "127.0.0.1:8080"
	DefaultCluster = "dev"
)

// DefaultDataDir is ~/.capstan/dev, or a relative directory without a home.
func DefaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".capstan", "dev")
	}
	return "capstan-dev"
}

// Config is what `capstan dev` takes.
type Config struct {
	DataDir string
	Listen  string
	// Fresh wipes DataDir first (only one capstan dev made).
	Fresh bool
	// Out receives progress and the summary; nil discards them.
	Out io.Writer

	// Cluster defaults to DefaultCluster; tests pick their own so they
	// never touch a developer's dev environment on the same engine.
	Cluster string
	// SourceDir is the Capstan source tree the sample programs are built
	// from; default: found upwards from the working directory.
	SourceDir string
	// AgentEnv is added to every instance's agent environment.
	AgentEnv map[string]string
	// Ready, when set, is called once everything runs.
	Ready func(Status)
	// Timeout bounds the wait for the sample to run; default 3 minutes.
	Timeout time.Duration
}

// Run brings the environment up, reports it, and tears down what it
// started when ctx ends. It returns early with an error if bringing it up
// fails or the server stops.
func Run(ctx context.Context, cfg Config) (err error) {
	if err := cfg.defaults(); err != nil {
		return err
	}
	d := &env{cfg: cfg, out: newPrinter(cfg.Out), names: namesFor(cfg.Cluster)}
	defer func() { err = errors.Join(err, d.close()) }()
	if err := d.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while starting: not a failure
		}
		return err
	}
	st, err := d.status(ctx, true)
	if err != nil {
		return err
	}
	d.out.summary(st)
	if err := d.writeState(); err != nil {
		return err
	}
	if cfg.Ready != nil {
		cfg.Ready(st)
	}
	// Tasks are replaced (a daemon update replaces the instance, a
	// deployment the web tasks): the URLs printed above go stale, so the
	// new ones are printed as they change.
	urls := webURLs(st)
	tick := time.NewTicker(urlsEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			d.out.step("stopping")
			return nil
		case err := <-d.srv.Wait():
			return fmt.Errorf("server stopped: %w", err)
		case <-tick.C:
			st, err := d.status(ctx, false)
			if now := webURLs(st); err == nil && len(now) > 0 && !slices.Equal(now, urls) {
				urls = now
				d.out.step("service %s URLs are now %s (capstan dev urls prints them)", d.names.service, strings.Join(urls, " "))
			}
		}
	}
}

// urlsEvery is how often a running dev looks for changed URLs.
var urlsEvery = 2 * time.Second

func (c *Config) defaults() error {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir()
	}
	dir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	c.DataDir = dir
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Cluster == "" {
		c.Cluster = DefaultCluster
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Timeout == 0 {
		c.Timeout = 3 * time.Minute
	}
	return nil
}

// env is one run and what it started, so close can undo it.
type env struct {
	cfg    Config
	out    *printer
	names  names
	began  time.Time
	rt     *docker.Runtime
	log    *os.File // the server's
	logger *slog.Logger
	agent  string // the binary instances run
	srv    *server.Server
	ecs    *ecs.Client
	// endpoint, keyID and secret reach the API (the summary shows them).
	endpoint, keyID, secret string
	lock                    *server.DataDirLock // of the data directory, held until close ends
	// stopping quiets the server's warnings on the terminal (see warnings).
	stopping atomic.Bool
}

// names are the sample's resources.
type names struct {
	cluster, capacityProvider, daemon, service string
	daemonFamily, webFamily                    string
}

func namesFor(cluster string) names {
	return names{
		cluster:          cluster,
		capacityProvider: cluster + "-local",
		daemon:           "telemetry",
		service:          "web",
		daemonFamily:     "telemetry",
		webFamily:        "web",
	}
}

func (d *env) start(ctx context.Context) error {
	d.began = time.Now()
	// What needs no server is checked first: a missing prerequisite should
	// cost nothing to find out.
	src, err := sourceTree(d.cfg.SourceDir)
	if err != nil {
		return err
	}
	goTool, err := goToolchain()
	if err != nil {
		return err
	}
	if err := d.lockDataDir(); err != nil {
		return err
	}
	if d.rt, err = connectDocker(ctx); err != nil {
		return err
	}
	if err := d.prepareDataDir(ctx); err != nil {
		return err
	}
	if d.agent, err = agentBinary(ctx, goTool, src, d.cfg.DataDir, d.out); err != nil {
		return err
	}
	if n, err := removeDaemonNetworks(ctx, d.rt, d.names.cluster); err != nil {
		return err
	} else if n > 0 {
		d.out.step("removed %d daemon network(s) left by an earlier run", n)
	}

	if d.log, err = os.OpenFile(d.serverLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return err
	}
	d.logger = slog.New(&warnings{Handler: slog.NewJSONHandler(d.log, nil), out: d.out, stopping: &d.stopping})
	agentEnv := map[string]string{
		// The sample images exist only in the local engine: pulling them
		// would fail, and a cleaned-up one could never come back.
		"ECS_IMAGE_PULL_BEHAVIOR":   "prefer-cached",
		"ECS_DISABLE_IMAGE_CLEANUP": "true",
	}
	for k, v := range d.cfg.AgentEnv {
		agentEnv[k] = v
	}
	d.srv, err = server.Start(ctx, server.Config{
		Listen:      d.cfg.Listen,
		DataDir:     d.cfg.DataDir,
		Provisioner: "local",
		AgentBinary: d.agent,
		AgentEnv:    agentEnv,
		Log:         d.logger,
		// Capacity providers' agent settings judged as capstan server does.
		CheckAgentSettings: agentenv.Check,
	})
	if err != nil {
		return fmt.Errorf("start the server: %w", err)
	}
	d.out.step("server listening on http://%s (state and logs in %s)", d.srv.Addr, d.cfg.DataDir)
	d.connect("http://"+d.srv.Addr, d.srv.Admin.AccessKeyID, d.srv.Admin.SecretAccessKey)

	imgs, err := buildImages(ctx, d.rt, goTool, src, d.out)
	if err != nil {
		return err
	}
	if err := d.ensureCluster(ctx); err != nil {
		return err
	}
	if err := d.ensureResources(ctx, imgs); err != nil {
		return err
	}
	return d.waitRunning(ctx)
}

// close stops the server, then the instances it provisioned and their
// containers. In that order: a running server would replace instances that
// go away. It runs on a context of its own, the caller's being over.
func (d *env) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	var arns []string
	if d.srv != nil {
		arns, _ = d.instanceArns(ctx) // for the safety net below; best effort
		d.stopping.Store(true)
		if err := d.srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop the server: %w", err))
		}
		d.out.step("server stopped")
	}
	if d.agent != "" && d.rt != nil {
		n, err := terminateInstances(ctx, d.cfg.DataDir, d.agent, d.rt, d.logger)
		errs = append(errs, err)
		if n > 0 {
			d.out.step("terminated %d instance(s) and their containers", n)
		}
		n, err = removeContainers(ctx, d.rt, d.names.cluster, arns)
		errs = append(errs, err)
		if n > 0 {
			d.out.step("removed %d leftover container(s)", n)
		}
		_, err = removeDaemonNetworks(ctx, d.rt, d.names.cluster)
		errs = append(errs, err)
	}
	if d.endpoint != "" {
		os.Remove(filepath.Join(d.cfg.DataDir, stateFile))
	}
	if d.log != nil {
		d.log.Close()
	}
	if d.rt != nil {
		d.rt.Close()
	}
	errs = append(errs, d.lock.Release())
	return errors.Join(errs...)
}

// serverRegion is the server's default region, which dev keeps.
const serverRegion = "us-east-1"

func (d *env) serverLog() string { return filepath.Join(d.cfg.DataDir, "server.log") }
func (d *env) agentLogs() string { return filepath.Join(instanceDir(d.cfg.DataDir), "*", "agent.log") }

func connectDocker(ctx context.Context) (*docker.Runtime, error) {
	rt, err := docker.New(docker.Options{})
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rt.Ping(pctx); err != nil {
		rt.Close()
		return nil, fmt.Errorf("capstan dev runs its tasks on Docker, which is not reachable (start dockerd or set DOCKER_HOST): %w", err)
	}
	return rt, nil
}

// markerFile tells a data directory made by capstan dev from any other,
// so --fresh never wipes a directory it did not make.
const markerFile = "capstan-dev"

// lockDataDir takes the data directory's lock, after checking it is one
// dev may use. Nothing is touched before the lock is ours: a second
// capstan dev on the same directory would otherwise end the first one's
// instances.
func (d *env) lockDataDir() error {
	if d.lock != nil {
		return nil
	}
	dir := d.cfg.DataDir
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data dir: %w", err)
	}
	own := ownDataDir(dir, entries)
	// A directory with a lock file is Capstan's: one in use is said to be.
	if _, err := os.Stat(filepath.Join(dir, server.LockFile)); own || err == nil {
		if d.lock, err = server.LockDataDir(dir, "capstan dev"); err != nil {
			return err
		}
	}
	if !own {
		d.lock.Release()
		d.lock = nil
		if d.cfg.Fresh {
			return fmt.Errorf("--fresh: refusing to wipe %s: capstan dev did not create it (no %s file)", dir, markerFile)
		}
		return fmt.Errorf("data dir %s holds files capstan dev did not create; choose another with --data-dir", dir)
	}
	return nil
}

// prepareDataDir wipes the data directory for --fresh and marks it as
// dev's, under its lock.
func (d *env) prepareDataDir(ctx context.Context) error {
	if err := d.lockDataDir(); err != nil {
		return err
	}
	dir := d.cfg.DataDir
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if d.cfg.Fresh && len(entries) > 0 {
		// Instances of a run that was killed may still be running; their
		// state is about to go, so they go first.
		if _, err := terminateInstances(ctx, dir, "", d.rt, slog.New(slog.DiscardHandler)); err != nil {
			return fmt.Errorf("--fresh: %w", err)
		}
		// The lock file stays, and with it the lock.
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("--fresh: %w", err)
		}
		for _, e := range entries {
			if e.Name() == server.LockFile {
				continue
			}
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("--fresh: %w", err)
			}
		}
	}
	marker := filepath.Join(dir, markerFile)
	if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
		return os.WriteFile(marker, []byte("This directory holds the state of `capstan dev`; `capstan dev --fresh` wipes it.\n"), 0o600)
	}
	return nil
}

// ownDataDir reports whether dir is one capstan dev may use: missing,
// empty but for a lock file, or marked as made by capstan dev.
func ownDataDir(dir string, entries []os.DirEntry) bool {
	if _, err := os.Stat(filepath.Join(dir, markerFile)); err == nil {
		return true
	}
	for _, e := range entries {
		if e.Name() != server.LockFile {
			return false
		}
	}
	return true
}
