package daemonnet

import (
	"fmt"
	"net/netip"
)

// DefaultSubnet is the instance's daemon network on a dedicated host, the
// one ECS uses; the daemons answer on its second address, 169.254.172.2.
var DefaultSubnet = netip.MustParsePrefix("169.254.172.0/24")

// candidates are the subnets tried, in order, when none is configured:
// 169.254.172.0/24 first, then the /24s above it, so several instances on
// one Docker host each get a namespace of their own. 169.254.169.0/24 and
// 169.254.170.0/24 (cloud metadata, the ECS agent endpoint) are never used.
func candidates() []netip.Prefix {
	var out []netip.Prefix
	for third := 172; third <= 254; third++ {
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{169, 254, byte(third), 0}), 24))
	}
	return out
}

// Gateway is the subnet's first address, which the host takes on the bridge.
func Gateway(subnet netip.Prefix) netip.Addr { return subnet.Addr().Next() }

// DefaultAddress is the subnet's second address.
func DefaultAddress(subnet netip.Prefix) netip.Addr { return subnet.Addr().Next().Next() }

// CheckSubnet says why subnet cannot hold a daemon namespace, or nil.
func CheckSubnet(subnet netip.Prefix) error {
	switch {
	case !subnet.Addr().Is4():
		return fmt.Errorf("must be an IPv4 subnet like %s", DefaultSubnet)
	case subnet.Masked() != subnet:
		return fmt.Errorf("must be a network address: %s, not %s", subnet.Masked(), subnet)
	case subnet.Bits() < 8 || subnet.Bits() > 30:
		return fmt.Errorf("must be a /8 to /30 subnet: it needs room for the gateway and the daemon address")
	}
	return nil
}

// CheckAddress says why addr cannot be the daemon address on subnet, or
// nil. The network and broadcast addresses are no host's, and the first
// address is the gateway.
func CheckAddress(subnet netip.Prefix, addr netip.Addr) error {
	if err := CheckSubnet(subnet); err != nil {
		return err
	}
	switch {
	case !addr.Is4() || !subnet.Contains(addr):
		return fmt.Errorf("must be an IPv4 address inside %s", subnet)
	case addr == subnet.Addr():
		return fmt.Errorf("is the network address of %s", subnet)
	case addr == Gateway(subnet):
		return fmt.Errorf("is the gateway of %s (the host's address on the bridge)", subnet)
	case addr == broadcast(subnet):
		return fmt.Errorf("is the broadcast address of %s", subnet)
	}
	return nil
}

func broadcast(subnet netip.Prefix) netip.Addr {
	a := subnet.Addr().As4()
	host := uint32(1)<<(32-subnet.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
