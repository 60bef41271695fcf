package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

// Networks, static addresses and imported images are not in
// runtime.Runtime: only the agent's daemon networking needs them, and it
// declares the interface it uses.

// CreateNetwork makes a bridge network on spec.Subnet. A subnet that
// overlaps another network's fails with runtime.ErrAddressInUse.
func (r *Runtime) CreateNetwork(ctx context.Context, spec runtime.NetworkSpec) (string, error) {
	if spec.Name == "" || !spec.Subnet.IsValid() {
		return "", errors.New("create network: name and subnet are required")
	}
	ipam := network.IPAMConfig{Subnet: spec.Subnet, Gateway: spec.Gateway}
	res, err := r.c.NetworkCreate(ctx, spec.Name, client.NetworkCreateOptions{
		Driver: "bridge",
		IPAM:   &network.IPAM{Driver: "default", Config: []network.IPAMConfig{ipam}},
		Labels: spec.Labels,
	})
	if err != nil {
		// The engine has no error type for it; its IPAM says "overlaps".
		if strings.Contains(err.Error(), "overlaps") {
			return "", fmt.Errorf("create network %s on %s: %w: %w", spec.Name, spec.Subnet, runtime.ErrAddressInUse, err)
		}
		return "", wrap(err, "create network %s on %s", spec.Name, spec.Subnet)
	}
	return res.ID, nil
}

// Networks returns the networks carrying all labels, each with the
// containers attached to it.
func (r *Runtime) Networks(ctx context.Context, labels map[string]string) ([]runtime.Network, error) {
	f := client.Filters{}
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	res, err := r.c.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return nil, wrap(err, "list networks")
	}
	var out []runtime.Network
	for _, s := range res.Items {
		// The list answer leaves out the attached containers.
		n, err := r.Network(ctx, s.ID)
		if errors.Is(err, runtime.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// Network inspects a network by name or ID (runtime.ErrNotFound).
func (r *Runtime) Network(ctx context.Context, id string) (runtime.Network, error) {
	res, err := r.c.NetworkInspect(ctx, id, client.NetworkInspectOptions{})
	if err != nil {
		return runtime.Network{}, wrap(err, "inspect network %s", id)
	}
	in := res.Network
	n := runtime.Network{ID: in.ID, Name: in.Name, Labels: in.Labels, Containers: map[string]netip.Addr{}}
	if in.Driver == "bridge" {
		// The engine names a bridge br-<first 12 of the ID> unless told.
		n.Bridge = in.Options["com.docker.network.bridge.name"]
		if n.Bridge == "" && len(in.ID) >= 12 {
			n.Bridge = "br-" + in.ID[:12]
		}
	}
	for _, c := range in.IPAM.Config {
		if c.Subnet.Addr().Is4() {
			n.Subnet, n.Gateway = c.Subnet, c.Gateway
			break
		}
	}
	for cid, ep := range in.Containers {
		n.Containers[cid] = ep.IPv4Address.Addr()
	}
	return n, nil
}

// RemoveNetwork deletes a network; the engine refuses while a running
// container is attached (see DisconnectNetwork).
func (r *Runtime) RemoveNetwork(ctx context.Context, id string) error {
	_, err := r.c.NetworkRemove(ctx, id, client.NetworkRemoveOptions{})
	return wrap(err, "remove network %s", id)
}

// DisconnectNetwork detaches a container from a network, forcibly.
func (r *Runtime) DisconnectNetwork(ctx context.Context, networkID, containerID string) error {
	_, err := r.c.NetworkDisconnect(ctx, networkID, client.NetworkDisconnectOptions{Container: containerID, Force: true})
	return wrap(err, "disconnect container %s from network %s", containerID, networkID)
}

// CreateWithAddress is Create for a container on the user-defined network
// spec.NetworkMode names, at a fixed IPv4 address on it.
func (r *Runtime) CreateWithAddress(ctx context.Context, spec runtime.ContainerSpec, addr netip.Addr) (string, error) {
	opts, err := createOptions(spec)
	if err != nil {
		return "", fmt.Errorf("create container %q: %w", spec.Name, err)
	}
	opts.NetworkingConfig = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		spec.NetworkMode: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr}},
	}}
	res, err := r.c.ContainerCreate(ctx, opts)
	if err != nil {
		return "", wrap(err, "create container %q", spec.Name)
	}
	return res.ID, nil
}

// ImportImage makes image ref from a root filesystem tar, applying
// Dockerfile instructions such as ENTRYPOINT and LABEL.
func (r *Runtime) ImportImage(ctx context.Context, rootfs io.Reader, ref string, changes []string) error {
	res, err := r.c.ImageImport(ctx, client.ImageImportSource{Source: rootfs, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: changes})
	if err != nil {
		return wrap(err, "import image %s", ref)
	}
	defer res.Close()
	dec := json.NewDecoder(res)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("import image %s: %w", ref, err)
		}
		if m.Error != nil {
			return fmt.Errorf("import image %s: %s", ref, m.Error.Message)
		}
	}
}
