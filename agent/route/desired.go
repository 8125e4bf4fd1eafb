package route

import (
	"net"
	"net/netip"
	"slices"

	"github.com/podnet/podnet/agent/clusterstate"
)

// Params are this node's side of the computation.
type Params struct {
	Self string
	Mode Mode
	// LocalSubnets are the subnets connected to this node's underlay
	// interface: in auto mode a node inside one of them is on the same
	// L2 and gets host-gw routes.
	LocalSubnets []netip.Prefix
	// WireGuard routes every other node's pods through podnet.wg (strict:
	// a node without a usable public key gets unreachable routes, never
	// clear ones).
	WireGuard bool
}

// RouteKind says how a route leaves the node.
type RouteKind int

// Route kinds.
const (
	// RouteBlackhole drops traffic: this node's own blocks.
	RouteBlackhole RouteKind = iota
	// RouteHostGW goes via a remote node's underlay address.
	RouteHostGW
	// RouteVXLAN goes via a remote VTEP on podnet.vxlan, onlink.
	RouteVXLAN
	// RouteWireGuard goes out of podnet.wg (dev route, no next hop):
	// WireGuard picks the peer by its AllowedIPs.
	RouteWireGuard
	// RouteUnreachable refuses traffic to a node that must be reached
	// encrypted but cannot be yet (no public key): the sender gets an
	// error, and nothing leaves in the clear.
	RouteUnreachable
)

func (k RouteKind) String() string {
	switch k {
	case RouteBlackhole:
		return "blackhole"
	case RouteHostGW:
		return "host-gw"
	case RouteVXLAN:
		return "vxlan"
	case RouteWireGuard:
		return "wireguard"
	case RouteUnreachable:
		return "unreachable"
	}
	return "unknown"
}

// Route is one route the agent owns.
type Route struct {
	Dst  netip.Prefix
	Kind RouteKind
	Via  netip.Addr // zero for a blackhole
	Node string     // the node the route leads to, for logs
}

// Peer is a remote VTEP: neighbour entries (VTEPIP and VTEPIP6 at MAC)
// and one FDB entry (MAC at Underlay) on podnet.vxlan.
type Peer struct {
	Node   string
	VTEPIP netip.Addr
	// VTEPIP6 is the IPv6 next hop, VTEPLinkLocal6 of MAC; zero when no
	// IPv6 route goes to the peer.
	VTEPIP6 netip.Addr
	MAC     string
	// Underlay is where encapsulated packets go, for IPv4 and IPv6 pods
	// alike.
	Underlay netip.Addr
}

// Desired is the state this node should have.
type Desired struct {
	Routes map[netip.Prefix]Route
	// VXLAN says whether podnet.vxlan should exist.
	VXLAN bool
	// Peers are the remote nodes reached over VXLAN, by name.
	Peers map[string]Peer
	// WireGuard says whether routes go through podnet.wg.
	WireGuard bool
}

// SortedRoutes returns the routes in destination order, so that changes
// are applied and logged deterministically.
func (d Desired) SortedRoutes() []Route {
	out := make([]Route, 0, len(d.Routes))
	for _, r := range d.Routes {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Route) int { return comparePrefix(a.Dst, b.Dst) })
	return out
}

// Compute derives the desired state from a snapshot. It is pure: the same
// input always gives the same output, and it does no I/O.
func Compute(p Params, s *clusterstate.Snapshot) Desired {
	c := &computation{p: p, s: s, d: Desired{Routes: map[netip.Prefix]Route{}, Peers: map[string]Peer{}, VXLAN: p.Mode != ModeHostGW, WireGuard: p.WireGuard}}
	if p.Mode == ModeHostGW {
		// A peer in vxlan mode sends encapsulated until it sees this
		// node's record say host-gw (or for good, off this segment): the
		// device stays to receive, without routes or peers.
		for name, rec := range s.Nodes {
			c.d.VXLAN = c.d.VXLAN || (name != p.Self && rec.Mode == string(ModeVXLAN))
		}
	}
	// Every reachable remote node is a peer in VXLAN, blocks or not: a
	// block confirmed a moment later then needs only its route.
	for name := range s.Nodes {
		if name != p.Self && !p.WireGuard {
			c.transport(name, false)
		}
	}
	for cidr, node := range s.Blocks {
		if node == p.Self {
			c.d.Routes[cidr] = Route{Dst: cidr, Kind: RouteBlackhole, Node: node}
			continue
		}
		if r, ok := c.transport(node, cidr.Addr().Is6()); ok {
			r.Dst = cidr
			c.d.Routes[cidr] = r
		}
	}
	for addr, node := range s.Borrowed {
		if node == p.Self {
			// This node's own pods have their /32 (/128) through their
			// veth, made by the plugin.
			continue
		}
		if r, ok := c.transport(node, addr.Is6()); ok {
			r.Dst = netip.PrefixFrom(addr, addr.BitLen())
			c.d.Routes[r.Dst] = r
		}
	}
	return c.d
}

// computation is one Compute: its input, and the state it builds.
type computation struct {
	p Params
	s *clusterstate.Snapshot
	d Desired
}

// transport is how a remote node's pods of one family are reached; ok is
// false for a node that cannot be routed (unregistered, or a record
// without the addresses its transport needs). The underlay is IPv4
// either way: IPv6 pods go via the node's underlay link-local address in
// host-gw, and over the same VXLAN tunnel otherwise. A node reached over
// VXLAN becomes a peer.
func (c *computation) transport(node string, v6 bool) (Route, bool) {
	rec, ok := c.s.Nodes[node]
	if c.p.WireGuard {
		return encrypted(node, rec, ok), true
	}
	if !ok || !rec.Address.Is4() {
		return Route{}, false
	}
	kind, ok := c.kind(rec, v6)
	switch {
	case !ok:
		return Route{}, false
	case kind == RouteHostGW && v6:
		return Route{Kind: RouteHostGW, Via: rec.LinkLocal6, Node: node}, true
	case kind == RouteHostGW:
		return Route{Kind: RouteHostGW, Via: rec.Address, Node: node}, true
	}
	return c.vxlanRoute(node, rec, v6)
}

// kind is the route kind to a node for one family under the mode; ok is
// false when the node cannot be reached that way at all.
func (c *computation) kind(rec clusterstate.NodeRecord, v6 bool) (kind RouteKind, ok bool) {
	kind = RouteVXLAN
	switch c.p.Mode {
	case ModeHostGW:
		kind = RouteHostGW
	case ModeAuto:
		if onLink(rec.Address, c.p.LocalSubnets) {
			kind = RouteHostGW
		}
	case ModeVXLAN:
		// A peer in host-gw may have no VXLAN device (it keeps one only
		// while a peer runs vxlan): on this segment it is reached
		// host-gw, so that a routing_mode change rolling through the
		// nodes has no gap.
		if rec.Mode == string(ModeHostGW) && onLink(rec.Address, c.p.LocalSubnets) {
			kind = RouteHostGW
		}
	}
	if kind == RouteHostGW && v6 && !rec.LinkLocal6.IsLinkLocalUnicast() {
		// No IPv6 next hop on the underlay: in auto and vxlan modes the
		// tunnel carries the node's IPv6 pods; in host-gw nothing can.
		if c.p.Mode == ModeHostGW {
			return 0, false
		}
		kind = RouteVXLAN
	}
	return kind, true
}

// vxlanRoute is the route to a node over VXLAN, and makes the node a
// peer; ok is false for a record without a usable VTEP.
func (c *computation) vxlanRoute(node string, rec clusterstate.NodeRecord, v6 bool) (Route, bool) {
	mac, err := net.ParseMAC(rec.VTEPMAC)
	if !rec.VTEPIP.Is4() || err != nil {
		return Route{}, false
	}
	peer, seen := c.d.Peers[node]
	if !seen {
		peer = Peer{Node: node, VTEPIP: rec.VTEPIP, MAC: rec.VTEPMAC, Underlay: rec.Address}
	}
	via := rec.VTEPIP
	if v6 {
		// Only a node with IPv6 pods gets the IPv6 neighbour, so a
		// cluster without IPv6 never needs it on the device.
		peer.VTEPIP6 = VTEPLinkLocal6(mac)
		via = peer.VTEPIP6
	}
	c.d.Peers[node] = peer
	return Route{Kind: RouteVXLAN, Via: via, Node: node}, true
}

// encrypted is the route to a node's pods with WireGuard on: through
// podnet.wg when the node has a usable key and an underlay address to be
// its endpoint, unreachable otherwise (strict mode: a block of a node
// not yet registered, or whose key has not arrived, is refused rather
// than sent by any other route that would be in the clear).
func encrypted(node string, rec clusterstate.NodeRecord, registered bool) Route {
	if _, ok := rec.WireGuardPublicKey(); ok && registered && rec.Address.Is4() {
		return Route{Kind: RouteWireGuard, Node: node}
	}
	return Route{Kind: RouteUnreachable, Node: node}
}

func onLink(a netip.Addr, subnets []netip.Prefix) bool {
	for _, s := range subnets {
		if s.Contains(a) {
			return true
		}
	}
	return false
}

func comparePrefix(x, y netip.Prefix) int {
	if c := x.Addr().Compare(y.Addr()); c != 0 {
		return c
	}
	return x.Bits() - y.Bits()
}
