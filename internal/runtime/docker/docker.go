// Package docker implements runtime.Runtime on the Docker Engine API with
// the official moby client. The client negotiates the API version with the
// engine on first use, so engines from API 1.40 on work.
package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

// Options configures the connection to the engine.
type Options struct {
	// Host is the engine address, e.g. "unix:///var/run/docker.sock".
	// Empty means DOCKER_HOST, then the platform default.
	Host string
}

// Runtime talks to one Docker Engine. It is safe for concurrent use.
type Runtime struct {
	c *client.Client
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a runtime for the engine described by opts and the standard
// DOCKER_* environment variables. It does not contact the engine: use Ping.
func New(opts Options) (*Runtime, error) {
	o := []client.Opt{client.FromEnv}
	if opts.Host != "" {
		o = append(o, client.WithHost(opts.Host))
	}
	c, err := client.New(o...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return &Runtime{c: c}, nil
}

// Close releases the client's idle connections.
func (r *Runtime) Close() error { return r.c.Close() }

// Client exposes the underlying moby client for what the runtime interface
// does not cover (test helpers importing or saving images).
func (r *Runtime) Client() *client.Client { return r.c }

// Ping checks the engine is reachable and settles the API version.
func (r *Runtime) Ping(ctx context.Context) error {
	if _, err := r.c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Errorf("docker ping %s: %w", r.c.DaemonHost(), err)
	}
	return nil
}

// Info describes the engine and the host it runs on.
func (r *Runtime) Info(ctx context.Context) (runtime.Info, error) {
	v, err := r.c.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return runtime.Info{}, fmt.Errorf("docker version: %w", err)
	}
	res, err := r.c.Info(ctx, client.InfoOptions{})
	if err != nil {
		return runtime.Info{}, fmt.Errorf("docker info: %w", err)
	}
	i := res.Info
	return runtime.Info{
		Name:          "docker",
		Version:       v.Version,
		APIVersion:    v.APIVersion,
		CPUs:          i.NCPU,
		MemoryBytes:   i.MemTotal,
		OS:            v.Os,
		Arch:          v.Arch,
		KernelVersion: i.KernelVersion,
	}, nil
}

// wrap prefixes err with what was being done and, for the engine's "not
// found" answers, makes it match runtime.ErrNotFound as well.
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	if cerrdefs.IsNotFound(err) && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("%s: %w: %w", what, runtime.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
