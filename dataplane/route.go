package dataplane

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Routed mode's gateways, as in Calico: the pod routes everything to a
// link-local next hop that only the host end of its veth answers for.
var (
	RoutedGateway4 = netip.MustParseAddr("169.254.1.1")
	// RoutedGateway6 is the EUI-64 link-local address of RoutedHostMAC.
	RoutedGateway6 = LinkLocalOf(RoutedHostMAC)
)

// LinkLocalOf is the EUI-64 IPv6 link-local address of a MAC.
func LinkLocalOf(mac net.HardwareAddr) netip.Addr {
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8], b[9], b[10] = mac[0]^0x02, mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}

// LinkRoute is a kernel route through one link, in the main table: one
// that ADD adds or CHECK reads back. (cni.Route is a result's route;
// agent.Route one the agent owns between nodes.)
type LinkRoute struct {
	Dst netip.Prefix
	GW  netip.Addr // zero: directly connected
	// LinkScope asks for scope link (a directly connected destination);
	// otherwise the scope is universe.
	LinkScope bool
}

func (r LinkRoute) String() string {
	if r.GW.IsValid() {
		return fmt.Sprintf("%s via %s", r.Dst, r.GW)
	}
	return r.Dst.String()
}

func (r LinkRoute) netlink(index int) *netlink.Route {
	nr := &netlink.Route{LinkIndex: index, Dst: IPNet(r.Dst.Masked()), Table: unix.RT_TABLE_MAIN}
	if r.GW.IsValid() {
		nr.Gw = r.GW.AsSlice()
	}
	if r.LinkScope {
		nr.Scope = netlink.SCOPE_LINK
	}
	return nr
}

// AddRoute adds r through the link with index. An identical route that
// is already there is fine.
func AddRoute(h *netlink.Handle, index int, r LinkRoute) error {
	if err := h.RouteAdd(r.netlink(index)); err != nil {
		if isExist(err) {
			if ok, lerr := hasRoute(h, index, r); lerr == nil && ok {
				return nil
			}
		}
		return fmt.Errorf("add route %s on link %d: %w", r, index, err)
	}
	return nil
}

// HasRoute reports whether r is in the main table through the link.
func HasRoute(h *netlink.Handle, index int, r LinkRoute) (bool, error) { return hasRoute(h, index, r) }

func hasRoute(h *netlink.Handle, index int, r LinkRoute) (bool, error) {
	routes, err := routesTo(h, r.Dst)
	if err != nil {
		return false, err
	}
	for _, got := range routes {
		if got.LinkIndex != index {
			continue
		}
		gw, _ := netip.AddrFromSlice(got.Gw)
		if gw.Unmap() == r.GW || !r.GW.IsValid() && got.Gw == nil {
			return true, nil
		}
	}
	return false, nil
}

// routesTo lists the main-table routes whose destination is exactly dst.
func routesTo(h *netlink.Handle, dst netip.Prefix) ([]netlink.Route, error) {
	family := netlink.FAMILY_V4
	if dst.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	filter := &netlink.Route{Dst: IPNet(dst.Masked()), Table: unix.RT_TABLE_MAIN}
	if dst.Bits() == 0 {
		// The library reads a nil Dst as "default"; a /0 IPNet does not
		// always compare equal.
		filter.Dst = nil
	}
	routes, err := h.RouteListFiltered(family, filter, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes to %s: %w", dst, err)
	}
	return routes, nil
}

// AddHostRoute adds "<ip>/32 dev <link>" (/128 for IPv6) in the host
// namespace: the route that takes traffic to a routed-mode pod. The
// same address already routed through another interface is a duplicate
// IP, which is an error of KindConflict naming that interface, never
// silently overwritten.
func AddHostRoute(h *netlink.Handle, index int, ip netip.Addr) error {
	r := LinkRoute{Dst: HostPrefix(ip), LinkScope: true}
	err := h.RouteAdd(r.netlink(index))
	if err == nil {
		return nil
	}
	if !isExist(err) {
		return fmt.Errorf("add host route %s on link %d: %w", r.Dst, index, err)
	}
	routes, lerr := routesTo(h, r.Dst)
	if lerr != nil {
		return fmt.Errorf("add host route %s: %w (and %v)", r.Dst, err, lerr)
	}
	for _, got := range routes {
		if got.LinkIndex == index {
			return nil // ours already: a repeated ADD
		}
	}
	if len(routes) > 0 {
		// Another link has it: name the first one.
		name := fmt.Sprintf("link %d", routes[0].LinkIndex)
		if l, err := h.LinkByIndex(routes[0].LinkIndex); err == nil {
			name = l.Attrs().Name
		}
		return errorf(KindConflict, "address %s is already routed to %s: duplicate IP", ip, name)
	}
	return errorf(KindConflict, "address %s already has a route in the main table: duplicate IP", ip)
}

// HostRoutes lists the single-address routes through the link: in
// routed mode, the pod addresses behind a host veth.
func HostRoutes(h *netlink.Handle, index int) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := h.RouteListFiltered(family, &netlink.Route{LinkIndex: index, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list routes of link %d: %w", index, err)
		}
		for _, r := range routes {
			p, ok := PrefixOf(r.Dst)
			if ok && p.IsSingleIP() && !p.Addr().IsLinkLocalUnicast() && !p.Addr().IsMulticast() {
				out = append(out, p.Addr())
			}
		}
	}
	return out, nil
}

// SetNeigh installs a permanent neighbour entry: ip is at mac on the
// link. Used for the routed-mode gateway so the pod never has to ARP or
// solicit for it.
func SetNeigh(h *netlink.Handle, index int, ip netip.Addr, mac net.HardwareAddr) error {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	n := &netlink.Neigh{LinkIndex: index, Family: family, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: mac}
	if err := h.NeighSet(n); err != nil {
		return fmt.Errorf("set neighbour %s lladdr %s on link %d: %w", ip, mac, index, err)
	}
	return nil
}

// GatewayRoutes lists the main-table routes through the link that have
// a gateway: in a pod, the routes a CNI result reports.
func GatewayRoutes(h *netlink.Handle, index int) ([]LinkRoute, error) {
	var out []LinkRoute
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := h.RouteListFiltered(family, &netlink.Route{LinkIndex: index, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list routes of link %d: %w", index, err)
		}
		for _, r := range routes {
			gw, ok := netip.AddrFromSlice(r.Gw)
			if !ok {
				continue
			}
			dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			if family == netlink.FAMILY_V6 {
				dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
			if p, ok := PrefixOf(r.Dst); ok {
				dst = p
			}
			out = append(out, LinkRoute{Dst: dst, GW: gw.Unmap()})
		}
	}
	return out, nil
}
