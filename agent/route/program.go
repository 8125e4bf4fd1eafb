package route

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
)

// RouteProtocol marks the routes the agent owns (ip route ... proto 97).
// Not 80: Calico's Felix marks its routes with 80, and a host running
// both must not have one reconcile away the other's routes.
// Reconcile removes stale routes with this protocol and never touches a
// route with another.
const RouteProtocol = netlink.RouteProtocol(97)

// Programmer applies a Desired state to one network namespace's kernel
// tables over one netlink handle. It is not safe for concurrent use: the
// agent calls it from its reconcile loop only.
type Programmer struct {
	h   *netlink.Handle
	log *slog.Logger
	// Underlay is the interface the VXLAN device sends through and its
	// address, the VXLAN source address.
	UnderlayIndex int
	UnderlayAddr  netip.Addr
	UnderlayMTU   int
	// VTEPMAC is this node's VXLAN device MAC.
	VTEPMAC net.HardwareAddr
	// sysctl writes sysctls in the programmed namespace.
	sysctl func([]dataplane.Sysctl) error
}

// Stats says what one Apply did.
type Stats struct {
	Routes                   int // owned routes in place after the apply
	Added, Replaced, Deleted int
	// Conflicts are desired routes whose destination already has a route
	// the agent does not own; it is left alone.
	Conflicts int
	// Attempted is true when the current routes could be read and every
	// difference was attempted (some may have failed).
	Attempted bool
}

// Changed reports whether the apply changed any route.
func (s Stats) Changed() bool { return s.Added+s.Replaced+s.Deleted > 0 }

// Apply makes the kernel match d: the VXLAN device, its FDB and neighbour
// entries, and the owned routes. Every difference is attempted even when
// one fails; the errors are joined.
func (p *Programmer) Apply(d Desired) (Stats, error) {
	var errs []error
	vxIndex := 0
	if d.VXLAN {
		idx, err := p.ensureVXLAN()
		if err != nil {
			errs = append(errs, err)
		}
		vxIndex = idx
	} else if err := p.deleteVXLAN(); err != nil {
		errs = append(errs, err)
	}
	var peers []Peer
	if vxIndex != 0 {
		for _, peer := range d.Peers {
			peers = append(peers, peer)
		}
		// Neighbours and FDB entries go in before the routes that need
		// them, and stale ones go after the routes that used them.
		if err := p.syncPeers(vxIndex, peers, true); err != nil {
			errs = append(errs, err)
		}
	}
	for dst := range d.Routes {
		if dst.Addr().Is6() {
			if err := p.sysctl(dataplane.NodeForwardingSysctls(false, true)); err != nil {
				errs = append(errs, err)
			}
			break
		}
	}
	fb := fallbacks(d)
	if err := p.syncFallbacks(fb, true); err != nil {
		errs = append(errs, err)
	}
	wgIndex := 0
	if d.WireGuard {
		// No device, no encrypted routes: they fail (and are retried)
		// rather than fall back to anything in the clear.
		l, err := p.h.LinkByName(WireGuardDevice)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("wireguard device %s: %w", WireGuardDevice, err))
		case l.Attrs().Flags&net.FlagUp == 0:
			errs = append(errs, fmt.Errorf("wireguard device %s is down", WireGuardDevice))
		default:
			wgIndex = l.Attrs().Index
		}
		if wgIndex == 0 {
			// Strict: the kernel dropped the routes out of the missing or
			// downed device; unreachable routes stand in for them until it
			// is back, so no other route (a default route) carries pod
			// traffic in the clear.
			d = unreachableWithout(d)
		}
	}
	st, err := p.syncRoutes(d, links{vxlan: vxIndex, wg: wgIndex})
	if err != nil {
		errs = append(errs, err)
	}
	if vxIndex != 0 {
		if err := p.syncPeers(vxIndex, peers, false); err != nil {
			errs = append(errs, err)
		}
	}
	if err := p.syncFallbacks(fb, false); err != nil {
		errs = append(errs, err)
	}
	return st, errors.Join(errs...)
}

// unreachableWithout is d with every WireGuard route made unreachable.
func unreachableWithout(d Desired) Desired {
	routes := make(map[netip.Prefix]Route, len(d.Routes))
	for dst, r := range d.Routes {
		if r.Kind == RouteWireGuard {
			r.Kind = RouteUnreachable
		}
		routes[dst] = r
	}
	d.Routes = routes
	return d
}

// links are the indexes of the devices routes go out of; 0: none.
type links struct{ vxlan, wg int }

// nlRoute is the kernel form of r. An IPv6 route's next hop is a
// link-local address (the remote underlay's in host-gw, the remote VTEP's
// in VXLAN), which names its device and needs no onlink.
func (p *Programmer) nlRoute(r Route, l links) *netlink.Route {
	family := netlink.FAMILY_V4
	if r.Dst.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	nr := &netlink.Route{Dst: dataplane.IPNet(r.Dst), Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol, Family: family}
	switch r.Kind {
	case RouteBlackhole:
		nr.Type = unix.RTN_BLACKHOLE
	case RouteUnreachable:
		nr.Type = unix.RTN_UNREACHABLE
	case RouteWireGuard:
		nr.LinkIndex = l.wg
		nr.Scope = netlink.SCOPE_LINK
	case RouteHostGW:
		nr.Gw = r.Via.AsSlice()
		if r.Via.IsLinkLocalUnicast() {
			nr.LinkIndex = p.UnderlayIndex
		}
	case RouteVXLAN:
		nr.Gw = r.Via.AsSlice()
		nr.LinkIndex = l.vxlan
		if family == netlink.FAMILY_V4 {
			nr.Flags = int(netlink.FLAG_ONLINK)
		}
	}
	return nr
}

// sameRoute reports whether the kernel's route got is the desired want.
func sameRoute(got *netlink.Route, want Route, l links) bool {
	vxIndex := l.vxlan
	gw, _ := netip.AddrFromSlice(got.Gw)
	gw = gw.Unmap()
	switch want.Kind {
	case RouteBlackhole:
		return got.Type == unix.RTN_BLACKHOLE
	case RouteUnreachable:
		return got.Type == unix.RTN_UNREACHABLE
	case RouteWireGuard:
		return got.Type == unix.RTN_UNICAST && !gw.IsValid() && got.LinkIndex == l.wg && l.wg != 0
	case RouteHostGW:
		return got.Type == unix.RTN_UNICAST && gw == want.Via && got.LinkIndex != vxIndex
	case RouteVXLAN:
		return got.Type == unix.RTN_UNICAST && gw == want.Via && got.LinkIndex == vxIndex && vxIndex != 0 &&
			(want.Dst.Addr().Is6() || got.Flags&int(netlink.FLAG_ONLINK) != 0)
	}
	return false
}

// OwnedRoutes lists the main-table routes, IPv4 and IPv6, with
// RouteProtocol, but for the fallbacks under encrypted routes
// (FallbackMetric).
func OwnedRoutes(h *netlink.Handle) (map[netip.Prefix]netlink.Route, error) {
	out := map[netip.Prefix]netlink.Route{}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := h.RouteListFiltered(family,
			&netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if family == netlink.FAMILY_V6 && errors.Is(err, unix.EAFNOSUPPORT) {
			continue // a kernel without IPv6 has no IPv6 routes
		}
		if err != nil {
			return nil, fmt.Errorf("list owned routes: %w", err)
		}
		for _, r := range routes {
			if p, ok := dataplane.PrefixOf(r.Dst); ok && r.Priority != FallbackMetric {
				out[p] = r
			}
		}
	}
	return out, nil
}

func (p *Programmer) syncRoutes(d Desired, l links) (Stats, error) {
	var st Stats
	cur, err := OwnedRoutes(p.h)
	if err != nil {
		return st, err
	}
	st.Attempted = true
	var errs []error
	for _, want := range d.SortedRoutes() {
		if (want.Kind == RouteVXLAN && l.vxlan == 0) || (want.Kind == RouteWireGuard && l.wg == 0) {
			continue // the device failed; already reported
		}
		got, have := cur[want.Dst]
		delete(cur, want.Dst)
		switch {
		case have && sameRoute(&got, want, l):
			st.Routes++
		case have:
			// Ours already: replace it in place (same destination, table
			// and metric, so the kernel swaps the one route).
			if err := p.h.RouteReplace(p.nlRoute(want, l)); err != nil {
				errs = append(errs, fmt.Errorf("replace route %s (%s via %s): %w", want.Dst, want.Kind, want.Via, err))
				continue
			}
			st.Replaced++
			st.Routes++
		default:
			// Add, never replace: a route to the same destination that
			// the agent did not make is not its to change.
			err := p.h.RouteAdd(p.nlRoute(want, l))
			if errors.Is(err, unix.EEXIST) {
				st.Conflicts++
				p.log.Warn("route destination already has a route podnet does not own; left alone", "dst", want.Dst, "node", want.Node)
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("add route %s (%s via %s to node %s): %w", want.Dst, want.Kind, want.Via, want.Node, err))
				continue
			}
			st.Added++
			st.Routes++
		}
	}
	for dst, r := range cur {
		if err := p.h.RouteDel(&r); err != nil && !dataplane.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete stale route %s: %w", dst, err))
			continue
		}
		st.Deleted++
	}
	return st, errors.Join(errs...)
}
