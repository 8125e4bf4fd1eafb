package dataplane

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IPNet converts p to the library's form, keeping the host bits.
func IPNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}

// HostPrefix is a as a single-address prefix: /32 or /128.
func HostPrefix(a netip.Addr) netip.Prefix {
	return netip.PrefixFrom(a, a.BitLen())
}

// PrefixOf converts a library IPNet back; ok is false for nil or junk.
func PrefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a.Unmap(), ones), true
}

// AddAddr adds p (host bits kept) to the link with index. IPv6
// addresses get IFA_F_NODAD: an address that waits for duplicate
// address detection is unusable for a second, and podnet's IPAM already
// guarantees uniqueness. An address that is already there is fine.
func AddAddr(h *netlink.Handle, index int, p netip.Prefix) error {
	a := &netlink.Addr{IPNet: IPNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: index}}, a); err != nil && !isExist(err) {
		return fmt.Errorf("add address %s to link %d: %w", p, index, err)
	}
	return nil
}

// Addrs lists the addresses of the link with index, both families,
// skipping IPv6 link-local ones.
func Addrs(h *netlink.Handle, index int) ([]netip.Prefix, error) {
	list, err := h.AddrList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: index}}, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses of link %d: %w", index, err)
	}
	var out []netip.Prefix
	for _, a := range list {
		p, ok := PrefixOf(a.IPNet)
		if !ok || p.Addr().IsLinkLocalUnicast() && p.Addr().Is6() {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}
