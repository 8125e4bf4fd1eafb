package main

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/tag"
)

// attachment is one pod interface on one network: everything that ADD,
// DEL and CHECK derive from the configuration and the environment.
type attachment struct {
	conf     *conf
	args     *skel.CmdArgs
	owner    tag.Owner
	hostName string
	hostMAC  net.HardwareAddr
	ctrMAC   net.HardwareAddr
	// hh is the netlink handle of the host namespace, the plugin's own.
	hh *netlink.Handle
}

func newAttachment(c *conf, args *skel.CmdArgs) (*attachment, error) {
	hh, err := dataplane.NewHandle()
	if err != nil {
		return nil, err
	}
	a := &attachment{
		conf:     c,
		args:     args,
		owner:    tag.Owner{Network: c.Name, ContainerID: args.ContainerID, IfName: args.IfName},
		hostName: dataplane.HostVethName(args.ContainerID, args.IfName),
		hh:       hh,
	}
	a.hostMAC, a.ctrMAC = dataplane.AttachmentMACs(args.ContainerID, args.IfName)
	if c.Mode == modeRouted {
		a.hostMAC = dataplane.RoutedHostMAC
	}
	return a, nil
}

func (a *attachment) close() { a.hh.Close() }

// podIP is one address the IPAM gave the pod.
type podIP struct {
	addr    netip.Addr
	subnet  netip.Prefix // the IPAM's prefix, masked
	gateway netip.Addr   // the IPAM's gateway, may be zero
}

// podIPs validates the IPAM's result: at least one address, no address
// twice, gateways of the right family.
func podIPs(res *cni.Result) ([]podIP, error) {
	if len(res.IPs) == 0 {
		return nil, cni.Errorf(cni.CodeInvalidResult, "IPAM returned no address")
	}
	var out []podIP
	seen := map[netip.Addr]bool{}
	for _, ip := range res.IPs {
		a := ip.Address.Addr().Unmap()
		if seen[a] {
			return nil, cni.Errorf(cni.CodeInvalidResult, "IPAM returned %s twice", a)
		}
		seen[a] = true
		if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a.IsLinkLocalUnicast() {
			return nil, cni.Errorf(cni.CodeInvalidResult, "IPAM returned %s, which cannot be a pod address", ip.Address)
		}
		out = append(out, podIP{addr: a, subnet: netip.PrefixFrom(a, ip.Address.Bits()).Masked(), gateway: ip.Gateway})
	}
	slices.SortStableFunc(out, func(x, y podIP) int { return cmpAddr(x.addr, y.addr) })
	return out, nil
}

// cmpAddr orders IPv4 before IPv6, then by address: results list
// addresses and routes in this order whichever path built them.
func cmpAddr(x, y netip.Addr) int {
	if x.Is4() != y.Is4() {
		if x.Is4() {
			return -1
		}
		return 1
	}
	return x.Compare(y)
}

func families(ips []podIP) (v4, v6 bool) {
	for _, ip := range ips {
		v4, v6 = v4 || ip.addr.Is4(), v6 || ip.addr.Is6()
	}
	return v4, v6
}

func addrsOf(ips []podIP) []netip.Addr {
	out := make([]netip.Addr, len(ips))
	for i, ip := range ips {
		out[i] = ip.addr
	}
	return out
}

// neigh is a permanent neighbour entry.
type neigh struct {
	ip  netip.Addr
	mac net.HardwareAddr
}

// containerSpec is what goes into the pod's namespace, in order.
type containerSpec struct {
	ifName  string
	sysctls []dataplane.Sysctl
	addrs   []netip.Prefix
	neighs  []neigh
	// routes in the order they are added (a gateway's link route before
	// the routes via it); those with a gateway are the result's.
	routes []dataplane.LinkRoute
}

// plannedRoutes adds, per family, the default route and the IPAM's
// routes via gw (an IPAM route's own gateway wins), without duplicates.
func plannedRoutes(gws map[bool]netip.Addr, ipamRoutes []*cni.Route, withDefault bool) []dataplane.LinkRoute {
	var out []dataplane.LinkRoute
	add := func(r dataplane.LinkRoute) {
		for _, o := range out {
			if o.Dst == r.Dst {
				return
			}
		}
		out = append(out, r)
	}
	for _, is4 := range []bool{true, false} {
		gw, ok := gws[is4]
		if !ok {
			continue
		}
		if withDefault {
			def := netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			if is4 {
				def = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			}
			add(dataplane.LinkRoute{Dst: def, GW: gw})
		}
		for _, r := range ipamRoutes {
			if r.Dst.Addr().Is4() != is4 {
				continue
			}
			via := gw
			if r.GW.IsValid() {
				via = r.GW
			}
			add(dataplane.LinkRoute{Dst: r.Dst.Masked(), GW: via})
		}
	}
	return out
}

// resultRoutes are the routes of a result: those with a gateway.
func resultRoutes(routes []dataplane.LinkRoute) []*cni.Route {
	var out []*cni.Route
	for _, r := range routes {
		if r.GW.IsValid() {
			out = append(out, &cni.Route{Dst: r.Dst, GW: r.GW})
		}
	}
	slices.SortStableFunc(out, func(x, y *cni.Route) int {
		if c := cmpAddr(x.Dst.Addr(), y.Dst.Addr()); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(x.Dst.Bits(), y.Dst.Bits()), cmpAddr(x.GW, y.GW))
	})
	return out
}

// undo is what a failing ADD takes back, newest first.
type undo struct {
	steps []undoStep
}

type undoStep struct {
	what string
	fn   func() error
}

func (u *undo) push(what string, fn func() error) { u.steps = append(u.steps, undoStep{what, fn}) }

// pushFirst adds a step that is undone after all others.
func (u *undo) pushFirst(what string, fn func() error) {
	u.steps = append([]undoStep{{what, fn}}, u.steps...)
}

// run undoes every step, even past failures, and reports those.
func (u *undo) run() error {
	var errs []error
	for i := len(u.steps) - 1; i >= 0; i-- {
		if err := u.steps[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w", u.steps[i].what, err))
		}
	}
	u.steps = nil
	return errors.Join(errs...)
}

// withUndo returns err, as a CNI error, with the failures of the
// rollback in its details.
func withUndo(err, undoErr error) error {
	if undoErr == nil {
		return err
	}
	e := cni.AsError(cniError(err), cni.CodeInternal)
	details := strings.TrimSpace(e.Details + "; rollback incomplete: " + undoErr.Error())
	return e.WithDetails(strings.TrimPrefix(details, "; "))
}
