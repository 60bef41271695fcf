package docker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

// Create makes a container from spec without starting it.
func (r *Runtime) Create(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	opts, err := createOptions(spec)
	if err != nil {
		return "", fmt.Errorf("create container %q: %w", spec.Name, err)
	}
	res, err := r.c.ContainerCreate(ctx, opts)
	if err != nil {
		return "", wrap(err, "create container %q", spec.Name)
	}
	return res.ID, nil
}

// createOptions translates a spec into the engine's create request. It
// rejects values the engine would misread rather than fail on.
func createOptions(s runtime.ContainerSpec) (client.ContainerCreateOptions, error) {
	if s.Image == "" {
		return client.ContainerCreateOptions{}, errors.New("image: must not be empty")
	}
	cfg := &container.Config{
		Image:      s.Image,
		Labels:     s.Labels,
		Entrypoint: s.Entrypoint,
		Cmd:        s.Cmd,
		Env:        s.Env,
		WorkingDir: s.WorkingDir,
		User:       s.User,
		Hostname:   s.Hostname,
		StopSignal: s.StopSignal,
	}
	if s.StopTimeout > 0 {
		secs := seconds(s.StopTimeout)
		cfg.StopTimeout = &secs
	}
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode(s.NetworkMode),
		ExtraHosts:     s.ExtraHosts,
		Privileged:     s.Privileged,
		CapAdd:         s.CapAdd,
		CapDrop:        s.CapDrop,
		ReadonlyRootfs: s.ReadonlyRootfs,
		Sysctls:        s.Sysctls,
		PidMode:        container.PidMode(s.PidMode),
		IpcMode:        container.IpcMode(s.IpcMode),
		ShmSize:        s.ShmSizeBytes,
		Resources: container.Resources{
			CPUShares:         s.CPUShares,
			Memory:            s.MemoryLimit,
			MemoryReservation: s.MemoryReservation,
		},
	}
	if s.Init {
		// Only when asked: false leaves the engine's own default alone.
		t := true
		hc.Init = &t
	}
	if s.LogDriver != "" || len(s.LogOptions) > 0 {
		hc.LogConfig = container.LogConfig{Type: s.LogDriver, Config: s.LogOptions}
	}

	if err := addPorts(cfg, hc, s.Ports); err != nil {
		return client.ContainerCreateOptions{}, err
	}
	for i, d := range s.DNS {
		a, err := netip.ParseAddr(d)
		if err != nil {
			return client.ContainerCreateOptions{}, fmt.Errorf("dns[%d]: %q is not an IP address", i, d)
		}
		hc.DNS = append(hc.DNS, a)
	}
	for i, m := range s.Mounts {
		// Binds (not Mounts) so a missing host directory is created, as
		// ECS host volumes expect; the string form cannot carry a colon.
		if m.Source == "" || m.Target == "" {
			return client.ContainerCreateOptions{}, fmt.Errorf("mounts[%d]: source and target must not be empty", i)
		}
		if strings.Contains(m.Source, ":") || strings.Contains(m.Target, ":") {
			return client.ContainerCreateOptions{}, fmt.Errorf("mounts[%d]: paths must not contain ':'", i)
		}
		b := m.Source + ":" + m.Target
		if m.ReadOnly {
			b += ":ro"
		}
		hc.Binds = append(hc.Binds, b)
	}
	for i, t := range s.Tmpfs {
		if t.Target == "" {
			return client.ContainerCreateOptions{}, fmt.Errorf("tmpfs[%d]: target must not be empty", i)
		}
		if hc.Tmpfs == nil {
			hc.Tmpfs = map[string]string{}
		}
		opts := t.Options
		if t.SizeBytes > 0 {
			opts = append([]string{"size=" + strconv.FormatInt(t.SizeBytes, 10)}, opts...)
		}
		hc.Tmpfs[t.Target] = strings.Join(opts, ",")
	}
	for i, d := range s.Devices {
		if d.HostPath == "" {
			return client.ContainerCreateOptions{}, fmt.Errorf("devices[%d]: host path must not be empty", i)
		}
		m := container.DeviceMapping{PathOnHost: d.HostPath, PathInContainer: d.ContainerPath, CgroupPermissions: d.Permissions}
		if m.PathInContainer == "" {
			m.PathInContainer = d.HostPath
		}
		if m.CgroupPermissions == "" {
			m.CgroupPermissions = "rwm"
		}
		hc.Devices = append(hc.Devices, m)
	}
	for _, u := range s.Ulimits {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: u.Name, Soft: u.Soft, Hard: u.Hard})
	}
	if s.Healthcheck != nil {
		h, err := healthConfig(s.Healthcheck)
		if err != nil {
			return client.ContainerCreateOptions{}, err
		}
		cfg.Healthcheck = h
	}
	return client.ContainerCreateOptions{Name: s.Name, Config: cfg, HostConfig: hc}, nil
}

// addPorts exposes and publishes ports; the engine ignores a binding whose
// port is not also exposed.
func addPorts(cfg *container.Config, hc *container.HostConfig, ports []runtime.PortBinding) error {
	for i, p := range ports {
		proto := strings.ToLower(p.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		if p.ContainerPort < 1 || p.ContainerPort > math.MaxUint16 {
			return fmt.Errorf("ports[%d]: container port %d is out of range 1-65535", i, p.ContainerPort)
		}
		if p.HostPort < 0 || p.HostPort > math.MaxUint16 {
			return fmt.Errorf("ports[%d]: host port %d is out of range 0-65535", i, p.HostPort)
		}
		port, ok := network.PortFrom(uint16(p.ContainerPort), network.IPProtocol(proto))
		if !ok || (proto != "tcp" && proto != "udp" && proto != "sctp") {
			return fmt.Errorf("ports[%d]: protocol %q is not tcp, udp or sctp", i, p.Protocol)
		}
		var b network.PortBinding
		if p.HostPort != 0 {
			b.HostPort = strconv.Itoa(p.HostPort) // empty: the engine picks one
		}
		if p.HostIP != "" {
			a, err := netip.ParseAddr(p.HostIP)
			if err != nil {
				return fmt.Errorf("ports[%d]: host IP %q is not an IP address", i, p.HostIP)
			}
			b.HostIP = a
		}
		if cfg.ExposedPorts == nil {
			cfg.ExposedPorts = network.PortSet{}
			hc.PortBindings = network.PortMap{}
		}
		cfg.ExposedPorts[port] = struct{}{}
		hc.PortBindings[port] = append(hc.PortBindings[port], b)
	}
	return nil
}

// healthConfig maps the ECS-style test (which is already the engine's
// form) and checks its shape, since the engine accepts nonsense silently.
func healthConfig(h *runtime.Healthcheck) (*container.HealthConfig, error) {
	hc := &container.HealthConfig{
		Interval:    h.Interval,
		Timeout:     h.Timeout,
		StartPeriod: h.StartPeriod,
		Retries:     h.Retries,
	}
	if len(h.Test) == 0 {
		return hc, nil // keep the image's test, with these timings
	}
	switch h.Test[0] {
	case "NONE":
		hc.Test = []string{"NONE"}
	case "CMD":
		if len(h.Test) < 2 {
			return nil, errors.New("healthcheck.test: CMD needs a command")
		}
		hc.Test = h.Test
	case "CMD-SHELL":
		if len(h.Test) < 2 {
			return nil, errors.New("healthcheck.test: CMD-SHELL needs a command")
		}
		// The engine runs only Test[1]; join the rest as the shell would read it.
		hc.Test = []string{"CMD-SHELL", strings.Join(h.Test[1:], " ")}
	default:
		return nil, fmt.Errorf("healthcheck.test: must start with CMD, CMD-SHELL or NONE, not %q", h.Test[0])
	}
	return hc, nil
}

// seconds rounds d up to whole seconds, the engine's unit for stop timeouts.
func seconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}
