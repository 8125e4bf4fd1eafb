package agent

import (
	"net"
	"net/netip"
	"slices"
)

// Snapshot is what the agent knows of the cluster: the store's contents
// that matter for routing, already decoded.
type Snapshot struct {
	// Nodes are the registered nodes by name.
	Nodes map[string]NodeRecord
	// Blocks maps each block with a confirmed affinity to its node.
	Blocks map[netip.Prefix]string
	// Borrowed maps each allocated address whose node is not its block's
	// affine node (or whose block has none) to the node that holds it.
	Borrowed map[netip.Addr]string
}

// Params are this node's side of the computation.
type Params struct {
	Self string
	Mode Mode
	// LocalSubnets are the subnets connected to this node's underlay
	// interface: in auto mode a node inside one of them is on the same
	// L2 and gets host-gw routes.
	LocalSubnets []netip.Prefix
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
)

func (k RouteKind) String() string {
	switch k {
	case RouteBlackhole:
		return "blackhole"
	case RouteHostGW:
		return "host-gw"
	case RouteVXLAN:
		return "vxlan"
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
func Compute(p Params, s *Snapshot) Desired {
	d := Desired{Routes: map[netip.Prefix]Route{}, Peers: map[string]Peer{}, VXLAN: p.Mode != ModeHostGW}
	// transport is how a remote node's pods of one family are reached; ok
	// is false for a node that cannot be routed (unregistered, or a
	// record without the addresses its transport needs). The underlay
	// is IPv4 either way: IPv6 pods go via the node's underlay link-local
	// address in host-gw, and over the same VXLAN tunnel otherwise.
	transport := func(node string, v6 bool) (Route, bool) {
		rec, ok := s.Nodes[node]
		if !ok || !rec.Address.Is4() {
			return Route{}, false
		}
		kind := RouteVXLAN
		switch p.Mode {
		case ModeHostGW:
			kind = RouteHostGW
		case ModeAuto:
			if onLink(rec.Address, p.LocalSubnets) {
				kind = RouteHostGW
			}
		}
		if kind == RouteHostGW && v6 && !rec.LinkLocal6.IsLinkLocalUnicast() {
			// No IPv6 next hop on the underlay: in auto mode the tunnel
			// carries the node's IPv6 pods; in host-gw nothing can.
			if p.Mode != ModeAuto {
				return Route{}, false
			}
			kind = RouteVXLAN
		}
		if kind == RouteHostGW {
			via := rec.Address
			if v6 {
				via = rec.LinkLocal6
			}
			return Route{Kind: RouteHostGW, Via: via, Node: node}, true
		}
		mac, err := net.ParseMAC(rec.VTEPMAC)
		if !rec.VTEPIP.Is4() || err != nil {
			return Route{}, false
		}
		peer, seen := d.Peers[node]
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
		d.Peers[node] = peer
		return Route{Kind: RouteVXLAN, Via: via, Node: node}, true
	}
	// Every reachable remote node is a peer in VXLAN, blocks or not: a
	// block confirmed a moment later then needs only its route.
	for name := range s.Nodes {
		if name != p.Self {
			transport(name, false)
		}
	}
	for cidr, node := range s.Blocks {
		if node == p.Self {
			d.Routes[cidr] = Route{Dst: cidr, Kind: RouteBlackhole, Node: node}
			continue
		}
		if r, ok := transport(node, cidr.Addr().Is6()); ok {
			r.Dst = cidr
			d.Routes[cidr] = r
		}
	}
	for addr, node := range s.Borrowed {
		if node == p.Self {
			// This node's own pods have their /32 (/128) through their
			// veth, made by the plugin.
			continue
		}
		if r, ok := transport(node, addr.Is6()); ok {
			r.Dst = netip.PrefixFrom(addr, addr.BitLen())
			d.Routes[r.Dst] = r
		}
	}
	return d
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
