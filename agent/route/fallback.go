package route

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
)

// FallbackMetric is the metric of the unreachable route that lies under
// each route through podnet.wg, for the same prefix (strict mode). The
// kernel removes a device's routes when the device goes down or away
// (a userspace device ends with the agent's process, even under
// SIGKILL): the fallback then matches instead of a less specific route,
// a default route through the underlay, that would carry the pod
// traffic in the clear. It is not in OwnedRoutes: it is kept apart, by
// syncFallbacks.
const FallbackMetric = 9797

// fallbacks are the prefixes of d's routes through podnet.wg.
func fallbacks(d Desired) map[netip.Prefix]bool {
	out := map[netip.Prefix]bool{}
	if !d.WireGuard {
		return out
	}
	for dst, r := range d.Routes {
		if r.Kind == RouteWireGuard {
			out[dst] = true
		}
	}
	return out
}

// syncFallbacks adds the missing fallback routes of want (add) or
// removes those not in want (!add): added before the routes above them,
// removed after.
func (p *Programmer) syncFallbacks(want map[netip.Prefix]bool, add bool) error {
	cur := map[netip.Prefix]netlink.Route{}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := p.h.RouteListFiltered(family,
			&netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if family == netlink.FAMILY_V6 && errors.Is(err, unix.EAFNOSUPPORT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("list fallback routes: %w", err)
		}
		for _, r := range routes {
			if dst, ok := dataplane.PrefixOf(r.Dst); ok && r.Priority == FallbackMetric {
				cur[dst] = r
			}
		}
	}
	var errs []error
	if add {
		for dst := range want {
			if _, ok := cur[dst]; ok {
				continue
			}
			family := netlink.FAMILY_V4
			if dst.Addr().Is6() {
				family = netlink.FAMILY_V6
			}
			r := &netlink.Route{Dst: dataplane.IPNet(dst), Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol, Family: family,
				Type: unix.RTN_UNREACHABLE, Priority: FallbackMetric}
			if err := p.h.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
				errs = append(errs, fmt.Errorf("add fallback route %s: %w", dst, err))
			}
		}
		return errors.Join(errs...)
	}
	for dst, r := range cur {
		if want[dst] {
			continue
		}
		if err := p.h.RouteDel(&r); err != nil && !dataplane.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete fallback route %s: %w", dst, err))
		}
	}
	return errors.Join(errs...)
}
