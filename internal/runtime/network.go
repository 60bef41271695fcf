package runtime

import (
	"errors"
	"net/netip"
)

// Network is a user-defined container network. Networks are not part of
// Runtime: only the Docker implementation has them, and the agent's daemon
// networking asks for them through an interface of its own.
type Network struct {
	ID      string
	Name    string
	Subnet  netip.Prefix // the first IPv4 subnet
	Gateway netip.Addr
	Labels  map[string]string
	// Bridge is the host's interface for a bridge network (docker0,
	// br-<id>); "" when the runtime has none.
	Bridge string
	// Containers maps the ID of each attached container to its address.
	Containers map[string]netip.Addr
}

// NetworkSpec is what CreateNetwork makes: a bridge network on one subnet.
type NetworkSpec struct {
	Name    string
	Subnet  netip.Prefix
	Gateway netip.Addr
	Labels  map[string]string
}

// ErrAddressInUse means a network's subnet overlaps one that exists.
var ErrAddressInUse = errors.New("runtime: address space in use")
