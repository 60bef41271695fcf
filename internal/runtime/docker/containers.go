package docker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

// Start starts a created or stopped container.
func (r *Runtime) Start(ctx context.Context, id string) error {
	_, err := r.c.ContainerStart(ctx, id, client.ContainerStartOptions{})
	return wrap(err, "start container %s", id)
}

// Stop sends the container's stop signal and SIGKILL after timeout
// (rounded up to seconds; negative uses the container's own stop timeout).
// A container that is not running counts as stopped. The call returns once
// the container has exited, so ctx must allow for timeout.
func (r *Runtime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	var opts client.ContainerStopOptions
	if timeout >= 0 {
		secs := seconds(timeout)
		opts.Timeout = &secs
	}
	// The engine answers 304 for a container that is not running, which
	// the client already treats as success.
	_, err := r.c.ContainerStop(ctx, id, opts)
	if err != nil && cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "is not running") {
		return nil
	}
	return wrap(err, "stop container %s", id)
}

// Remove deletes a container and its anonymous volumes, killing it first
// if it runs.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	_, err := r.c.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	return wrap(err, "remove container %s", id)
}

// Inspect returns the container's current state.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtime.Container, error) {
	res, err := r.c.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return runtime.Container{}, wrap(err, "inspect container %s", id)
	}
	return fromInspect(res.Container), nil
}

// listInspectors bounds concurrent inspects in List.
const listInspectors = 8

// List returns every container, in any state, that carries all labels.
// Each match is inspected, since the list answer lacks exit codes and
// times; one that vanishes meanwhile is left out. Sorted by creation.
func (r *Runtime) List(ctx context.Context, labels map[string]string) ([]runtime.Container, error) {
	f := client.Filters{}
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	res, err := r.c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, wrap(err, "list containers")
	}
	out := make([]runtime.Container, len(res.Items))
	found := make([]bool, len(res.Items))
	errs := make([]error, len(res.Items))
	sem := make(chan struct{}, listInspectors)
	var wg sync.WaitGroup
	for i, s := range res.Items {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := r.Inspect(ctx, s.ID)
			switch {
			case err == nil:
				out[i], found[i] = c, true
			case !isNotFound(err):
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("list containers: %w", err)
		}
	}
	var cs []runtime.Container
	for i, c := range out {
		if found[i] {
			cs = append(cs, c)
		}
	}
	slices.SortFunc(cs, func(a, b runtime.Container) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return cs, nil
}

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }

func fromInspect(in container.InspectResponse) runtime.Container {
	c := runtime.Container{
		ID:        in.ID,
		Name:      strings.TrimPrefix(in.Name, "/"),
		ImageID:   in.Image,
		CreatedAt: parseTime(in.Created),
	}
	if in.Config != nil {
		c.Image = in.Config.Image
		c.Labels = in.Config.Labels
	}
	if in.HostConfig != nil {
		c.NetworkMode = string(in.HostConfig.NetworkMode)
	}
	if st := in.State; st != nil {
		c.State = string(st.Status)
		c.ExitCode = st.ExitCode
		c.OOMKilled = st.OOMKilled
		c.Error = st.Error
		c.Pid = st.Pid
		c.StartedAt = parseTime(st.StartedAt)
		c.FinishedAt = parseTime(st.FinishedAt)
		if st.Health != nil && st.Health.Status != container.NoHealthcheck {
			c.Health = string(st.Health.Status)
		}
	}
	if ns := in.NetworkSettings; ns != nil {
		for port, bs := range ns.Ports {
			for _, b := range bs {
				hp, err := strconv.Atoi(b.HostPort)
				if err != nil {
					continue
				}
				pb := runtime.PortBinding{ContainerPort: int(port.Num()), HostPort: hp, Protocol: string(port.Proto())}
				if b.HostIP.IsValid() {
					pb.HostIP = b.HostIP.String()
				}
				c.Ports = append(c.Ports, pb)
			}
		}
		slices.SortFunc(c.Ports, func(a, b runtime.PortBinding) int {
			if a.ContainerPort != b.ContainerPort {
				return a.ContainerPort - b.ContainerPort
			}
			if a.Protocol != b.Protocol {
				return strings.Compare(a.Protocol, b.Protocol)
			}
			return strings.Compare(a.HostIP, b.HostIP)
		})
		c.IPAddress = ipAddress(ns)
	}
	return c
}

// ipAddress prefers the default bridge, else the first network by name
// that gave the container an address.
func ipAddress(ns *container.NetworkSettings) string {
	if ep := ns.Networks["bridge"]; ep != nil && ep.IPAddress.IsValid() {
		return ep.IPAddress.String()
	}
	names := make([]string, 0, len(ns.Networks))
	for n := range ns.Networks {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if ep := ns.Networks[n]; ep != nil && ep.IPAddress.IsValid() {
			return ep.IPAddress.String()
		}
	}
	return ""
}

// parseTime reads the engine's RFC 3339 times; its "never" (year 1) and
// anything unreadable become the zero time.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}
