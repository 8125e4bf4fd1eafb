package dataplane

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultRoute picks, among one family's main-table routes, the default
// route the kernel sends by: a unicast route to /0 through a link (or
// through the hops of a multipath route), the lowest metric first, the
// first listed among equals. It returns the route and the links it sends
// through.
func DefaultRoute(routes []netlink.Route) (netlink.Route, []int, bool) {
	var best netlink.Route
	var bestLinks []int
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		if r.Type != 0 && r.Type != unix.RTN_UNICAST {
			continue // blackhole, unreachable, prohibit: nothing leaves by them
		}
		links := routeLinks(r)
		if len(links) == 0 {
			continue
		}
		if bestLinks == nil || r.Priority < best.Priority {
			best, bestLinks = r, links
		}
	}
	return best, bestLinks, bestLinks != nil
}

// routeLinks are the links a route sends through: its own, or each hop's
// of a multipath route.
func routeLinks(r netlink.Route) []int {
	if r.LinkIndex > 0 {
		return []int{r.LinkIndex}
	}
	var out []int
	for _, hop := range r.MultiPath {
		if hop != nil && hop.LinkIndex > 0 {
			out = append(out, hop.LinkIndex)
		}
	}
	return out
}

// pathMTU is the largest packet a route lets through: the smallest MTU
// of the links it sends through (linkMTU by index; a link missing from
// it does not count), or the route's own mtu metric when that is
// smaller. 0 when nothing is known.
func pathMTU(r netlink.Route, links []int, linkMTU map[int]int) int {
	mtu := 0
	for _, l := range links {
		if m := linkMTU[l]; m > 0 && (mtu == 0 || m < mtu) {
			mtu = m
		}
	}
	if r.MTU > 0 && (mtu == 0 || r.MTU < mtu) {
		mtu = r.MTU
	}
	return mtu
}

// DefaultRouteMTU returns the largest packet the handle's namespace sends
// by its default routes, IPv4's and IPv6's: the smaller of the two paths'
// MTUs when both exist, 0 when there is no default route. dev names the
// interface of that path (the first hop's of a multipath route). A
// kernel without IPv6 has IPv4's alone.
func DefaultRouteMTU(h *netlink.Handle) (mtu int, dev string, err error) {
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := h.RouteList(nil, family)
		if family == netlink.FAMILY_V6 && errors.Is(err, unix.EAFNOSUPPORT) {
			break
		}
		if err != nil {
			return 0, "", fmt.Errorf("list routes (family %d) to find the default route: %w", family, err)
		}
		r, links, ok := DefaultRoute(routes)
		if !ok {
			continue
		}
		linkMTU := map[int]int{}
		name := ""
		for _, index := range links {
			l, err := h.LinkByIndex(index)
			if err != nil {
				return 0, "", fmt.Errorf("link %d of the default route %s: %w", index, r, err)
			}
			linkMTU[index] = l.Attrs().MTU
			if name == "" {
				name = l.Attrs().Name
			}
		}
		if m := pathMTU(r, links, linkMTU); m > 0 && (mtu == 0 || m < mtu) {
			mtu, dev = m, name
		}
	}
	return mtu, dev, nil
}
