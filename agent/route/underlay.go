package route

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane"
)

type underlay struct {
	name  string
	index int
	mtu   int
	addr  netip.Addr
	// linkLocal6 is the interface's IPv6 link-local address, zero when
	// it has none (IPv6 off).
	linkLocal6 netip.Addr
}

// findUnderlay returns the named interface, or that of the IPv4 default
// route (the first hop's of a multipath one), with its first global
// unicast IPv4 address.
func findUnderlay(h *netlink.Handle, name string) (underlay, error) {
	var l netlink.Link
	var err error
	if name != "" {
		if l, err = h.LinkByName(name); err != nil {
			return underlay{}, fmt.Errorf("underlay interface %q: %w", name, err)
		}
	} else {
		routes, err := h.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return underlay{}, fmt.Errorf("list routes: %w", err)
		}
		_, links, ok := dataplane.DefaultRoute(routes)
		if !ok {
			return underlay{}, errors.New("no IPv4 default route to find the underlay interface by: set --underlay-interface")
		}
		if l, err = h.LinkByIndex(links[0]); err != nil {
			return underlay{}, fmt.Errorf("default route's interface (link %d): %w", links[0], err)
		}
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return underlay{}, fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
	}
	u := underlay{name: l.Attrs().Name, index: l.Attrs().Index, mtu: l.Attrs().MTU}
	for _, ad := range addrs {
		ip, ok := netip.AddrFromSlice(ad.IP)
		if ok && ip.Unmap().IsGlobalUnicast() {
			u.addr = ip.Unmap()
			break
		}
	}
	if !u.addr.IsValid() {
		return underlay{}, fmt.Errorf("underlay interface %s has no global unicast IPv4 address", l.Attrs().Name)
	}
	// Without IPv6 on the interface (or in the kernel) there is none.
	addrs6, _ := h.AddrList(l, netlink.FAMILY_V6)
	for _, ad := range addrs6 {
		if ip, ok := netip.AddrFromSlice(ad.IP); ok && ip.IsLinkLocalUnicast() {
			u.linkLocal6 = ip
			break
		}
	}
	return u, nil
}

// connectedSubnets are the IPv4 subnets of the underlay's addresses.
func connectedSubnets(h *netlink.Handle, index int) ([]netip.Prefix, error) {
	l, err := h.LinkByIndex(index)
	if err != nil {
		return nil, fmt.Errorf("underlay link %d: %w", index, err)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
	}
	var out []netip.Prefix
	for _, ad := range addrs {
		if p, ok := dataplane.PrefixOf(ad.IPNet); ok {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}
