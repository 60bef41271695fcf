package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/runtime"
)

// imageID is a stable ID for a reference, so every host agrees on it.
func imageID(ref string) string {
	h := sha256.Sum256([]byte(ref))
	return "sha256:" + hex.EncodeToString(h[:])
}

// present reports whether image ref can be used; r.mu is held.
func (r *Runtime) present(ref string) bool {
	if !r.cfg.PullRequired {
		return true
	}
	_, ok := r.images[ref]
	if !ok {
		_, ok = r.byID(ref)
	}
	return ok
}

func (r *Runtime) byID(id string) (runtime.Image, bool) {
	for _, img := range r.images {
		if img.ID == id {
			return img, true
		}
	}
	return runtime.Image{}, false
}

func (r *Runtime) imageOf(ref string) runtime.Image {
	id := imageID(ref)
	return runtime.Image{ID: id, RepoTags: []string{ref}, RepoDigests: []string{repo(ref) + "@" + id}, Size: 1 << 20, Created: r.cfg.Now()}
}

// repo is the reference without its tag.
func repo(ref string) string {
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		return ref[:i]
	}
	return ref
}

// Pull makes the image present after PullLatency, or fails with the
// image's PullError.
func (r *Runtime) Pull(ctx context.Context, ref string, _ *runtime.RegistryAuth) error {
	if err := wait(ctx, r.cfg.PullLatency); err != nil {
		return fmt.Errorf("sim: pull %s: %w", ref, err)
	}
	if msg := r.cfg.Images[ref].PullError; msg != "" {
		return fmt.Errorf("sim: pull %s: %s", ref, msg)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.images[ref]; !ok {
		r.images[ref] = r.imageOf(ref)
	}
	return nil
}

// Image inspects an image by reference or ID.
func (r *Runtime) Image(_ context.Context, ref string) (runtime.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if img, ok := r.images[ref]; ok {
		return img, nil
	}
	if img, ok := r.byID(ref); ok {
		return img, nil
	}
	if !r.cfg.PullRequired {
		return r.imageOf(ref), nil
	}
	return runtime.Image{}, notFound("image", ref)
}

// Images lists the images pulled or imported (the ones every host has
// without pulling are not listed: there is nothing to clean up).
func (r *Runtime) Images(context.Context) ([]runtime.Image, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]runtime.Image, 0, len(r.images))
	for _, img := range r.images {
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b runtime.Image) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// RemoveImage deletes a pulled image, refusing while a container uses it.
func (r *Runtime) RemoveImage(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	img, ok := r.images[id]
	if !ok {
		if img, ok = r.byID(id); !ok {
			return notFound("image", id)
		}
	}
	for _, c := range r.containers {
		if imageID(c.image) == img.ID {
			return fmt.Errorf("sim: remove image %s: in use by container %s (Conflict)", id, c.id[:12])
		}
	}
	for ref, o := range r.images {
		if o.ID == img.ID {
			delete(r.images, ref)
		}
	}
	return nil
}

// ImportImage reads the root filesystem to its end and records image ref.
func (r *Runtime) ImportImage(ctx context.Context, rootfs io.Reader, ref string, _ []string) error {
	if _, err := io.Copy(io.Discard, rootfs); err != nil {
		return fmt.Errorf("sim: import image %s: %w", ref, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.images[ref] = r.imageOf(ref)
	return ctx.Err()
}

// network is a simulated user network; r.mu guards it.
type network struct {
	id, name string
	subnet   netip.Prefix
	gateway  netip.Addr
	labels   map[string]string
	attached map[string]netip.Addr // container ID → address
}

// free returns the lowest address not taken on n.
func (n *network) free() netip.Addr {
	taken := map[netip.Addr]bool{n.gateway: true}
	for _, a := range n.attached {
		taken[a] = true
	}
	for a := n.subnet.Addr().Next(); n.subnet.Contains(a); a = a.Next() {
		if !taken[a] {
			return a
		}
	}
	return netip.Addr{}
}

func (n *network) view() runtime.Network {
	out := runtime.Network{ID: n.id, Name: n.name, Subnet: n.subnet, Gateway: n.gateway, Labels: copyMap(n.labels),
		Containers: make(map[string]netip.Addr, len(n.attached))}
	for id, a := range n.attached {
		out.Containers[id] = a
	}
	return out
}

func netipMust(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a
}

// userNetwork finds a network by name or ID; r.mu is held.
func (r *Runtime) userNetwork(ref string) *network {
	if ref == "" {
		return nil
	}
	if n := r.networks[ref]; n != nil {
		return n
	}
	for _, n := range r.networks {
		if n.name == ref {
			return n
		}
	}
	return nil
}

// CreateNetwork makes a network; a subnet overlapping another network's
// fails with runtime.ErrAddressInUse.
func (r *Runtime) CreateNetwork(_ context.Context, spec runtime.NetworkSpec) (string, error) {
	if spec.Name == "" || !spec.Subnet.IsValid() {
		return "", fmt.Errorf("sim: create network: name and subnet are required")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.networks {
		if n.name == spec.Name {
			return "", fmt.Errorf("sim: create network %s: the name is already in use (Conflict)", spec.Name)
		}
		if n.subnet.Overlaps(spec.Subnet) {
			return "", fmt.Errorf("sim: create network %s on %s: %w", spec.Name, spec.Subnet, runtime.ErrAddressInUse)
		}
	}
	gw := spec.Gateway
	if !gw.IsValid() {
		gw = spec.Subnet.Addr().Next()
	}
	n := &network{id: newID(), name: spec.Name, subnet: spec.Subnet, gateway: gw, labels: copyMap(spec.Labels), attached: map[string]netip.Addr{}}
	r.networks[n.id] = n
	return n.id, nil
}

// Networks returns the networks carrying all labels.
func (r *Runtime) Networks(_ context.Context, labels map[string]string) ([]runtime.Network, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []runtime.Network
	for _, n := range r.networks {
		if matches(n.labels, labels) {
			out = append(out, n.view())
		}
	}
	slices.SortFunc(out, func(a, b runtime.Network) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Network inspects a network by name or ID.
func (r *Runtime) Network(_ context.Context, id string) (runtime.Network, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.userNetwork(id)
	if n == nil {
		return runtime.Network{}, notFound("network", id)
	}
	return n.view(), nil
}

// RemoveNetwork deletes a network; it refuses while a running container
// is attached.
func (r *Runtime) RemoveNetwork(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.userNetwork(id)
	if n == nil {
		return notFound("network", id)
	}
	for cid := range n.attached {
		if c := r.containers[cid]; c != nil && c.state == runtime.StateRunning {
			return fmt.Errorf("sim: remove network %s: has active endpoints (Conflict)", n.name)
		}
	}
	for _, c := range r.containers {
		if c.network == n.id {
			c.network = ""
		}
	}
	delete(r.networks, n.id)
	return nil
}

// DisconnectNetwork detaches a container from a network.
func (r *Runtime) DisconnectNetwork(_ context.Context, networkID, containerID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.userNetwork(networkID)
	if n == nil {
		return notFound("network", networkID)
	}
	if _, ok := n.attached[containerID]; !ok {
		if c := r.lookup(containerID); c == nil || c.network != n.id {
			return notFound("container", containerID)
		}
	}
	delete(n.attached, containerID)
	if c := r.containers[containerID]; c != nil && c.network == n.id {
		c.network, c.ip = "", ""
	}
	return nil
}

// CreateWithAddress is Create on the user network spec.NetworkMode names,
// at addr on it.
func (r *Runtime) CreateWithAddress(ctx context.Context, spec runtime.ContainerSpec, addr netip.Addr) (string, error) {
	r.mu.Lock()
	n := r.userNetwork(spec.NetworkMode)
	var err error
	switch {
	case n == nil:
		err = fmt.Errorf("sim: create container %q: network %s: %w", spec.Name, spec.NetworkMode, runtime.ErrNotFound)
	case !n.subnet.Contains(addr):
		err = fmt.Errorf("sim: create container %q: address %s is not in %s", spec.Name, addr, n.subnet)
	default:
		for cid, a := range n.attached {
			if a == addr {
				if c := r.containers[cid]; c != nil && c.state == runtime.StateRunning {
					err = fmt.Errorf("sim: create container %q: address %s is in use (Conflict)", spec.Name, addr)
				}
			}
		}
	}
	r.mu.Unlock()
	if err != nil {
		return "", err
	}
	return r.create(ctx, spec, addr.String())
}
