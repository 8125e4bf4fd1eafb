package main

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/netns"
)

// observed is the container's side of an attachment as found.
type observed struct {
	present bool // the interface exists
	peer    bool // and is the other end of the host veth
	up      bool
	mac     string
	mtu     int
	addrs   []netip.Prefix
	routes  []dataplane.LinkRoute // those with a gateway
}

// observe reads the container's interface, in its namespace.
func (a *attachment) observe(host netlink.Link) (*observed, error) {
	o := &observed{}
	err := netns.Do(a.args.Netns, func() error {
		h, err := dataplane.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		cl, err := dataplane.LinkByName(h, a.args.IfName)
		if err != nil || cl == nil {
			return err
		}
		o.present = true
		o.peer = host != nil && dataplane.IsPeerOf(host, cl)
		o.up = cl.Attrs().Flags&net.FlagUp != 0
		o.mac = cl.Attrs().HardwareAddr.String()
		o.mtu = cl.Attrs().MTU
		idx := cl.Attrs().Index
		if o.addrs, err = dataplane.Addrs(h, idx); err != nil {
			return err
		}
		slices.SortFunc(o.addrs, func(x, y netip.Prefix) int { return cmpAddr(x.Addr(), y.Addr()) })
		o.routes, err = dataplane.GatewayRoutes(h, idx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("inspect %s in %s: %w", a.args.IfName, a.args.Netns, err)
	}
	return o, nil
}

// hasDefault reports whether routes hold a default route of the family.
func hasDefault(routes []dataplane.LinkRoute, is4 bool) bool {
	for _, r := range routes {
		if r.Dst.Bits() == 0 && r.Dst.Addr().Is4() == is4 {
			return true
		}
	}
	return false
}

// existing handles a repeated ADD. With no host veth of this name it
// returns nil: a fresh ADD. A complete attachment of this network,
// container and ifname is returned as found, and nothing changes (but a
// missing masquerade entry, which is restored). A partial one, left by
// an ADD that died half way, is removed so that ADD starts afresh. A
// host veth of another network is a conflict.
//
// The result is rebuilt from the kernel's state rather than cached: the
// interfaces, addresses, gateways and routes are the same as the first
// ADD returned. DNS comes from the configuration; DNS that only the
// IPAM supplied the first time is not reproduced.
func (a *attachment) existing() (*cni.Result, error) {
	link, err := dataplane.LinkByName(a.hh, a.hostName)
	if err != nil || link == nil {
		return nil, err
	}
	if owner, ok := tag.ParseAlias(link.Attrs().Alias); ok && owner != a.owner {
		return nil, cni.Errorf(cni.CodeAddressConflict, "host interface %s exists and belongs to network %s, container %s, interface %s",
			a.hostName, owner.Network, owner.ContainerID, owner.IfName)
	}
	obs, err := a.observe(link)
	if err != nil {
		return nil, err
	}
	res, hostAddrs, err := a.rebuild(link, obs)
	if err != nil {
		return nil, err
	}
	if res != nil {
		// The guard too, rewritten: the pod is up, and must not stay
		// unchecked if its guard went missing.
		if err := a.replaceGuard(hostAddrs); err != nil {
			return nil, err
		}
		if a.conf.IPMasq {
			// No subnets: a repeated ADD restores the pod's entries; the
			// exclusions are the first ADD's business.
			n, err := a.conf.masqNetwork(nil)
			if err != nil {
				return nil, err
			}
			m, err := dataplane.NewMasq()
			if err != nil {
				return nil, err
			}
			defer m.Close()
			if err := m.AddPod(n, a.owner, hostAddrs); err != nil {
				return nil, err
			}
		}
		return res, nil
	}
	fmt.Fprintf(a.args.Stderr, "podnet: removing the incomplete attachment %s of an earlier ADD\n", a.hostName)
	if err := a.removeDataplane(); err != nil {
		return nil, err
	}
	return nil, nil
}

// rebuild returns the result of a complete attachment, or nil when it
// is not complete. It also returns the pod's addresses.
func (a *attachment) rebuild(host netlink.Link, obs *observed) (*cni.Result, []netip.Addr, error) {
	if !obs.present || !obs.peer || !obs.up || len(obs.addrs) == 0 || obs.mac != a.ctrMAC.String() {
		return nil, nil, nil
	}
	if host.Attrs().Alias != a.owner.Alias() || host.Attrs().Flags&net.FlagUp == 0 {
		return nil, nil, nil
	}
	var addrs []netip.Addr
	v4, v6 := false, false
	for _, p := range obs.addrs {
		addrs = append(addrs, p.Addr())
		v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
	}
	withDefault := a.conf.Mode == modeRouted || a.conf.DefaultGW
	if withDefault && (v4 && !hasDefault(obs.routes, true) || v6 && !hasDefault(obs.routes, false)) {
		return nil, nil, nil
	}
	var (
		gws map[bool]netip.Addr
		br  *bridgeInfo
	)
	if a.conf.Mode == modeRouted {
		routed, err := dataplane.HostRoutes(a.hh, host.Attrs().Index)
		if err != nil {
			return nil, nil, err
		}
		for _, ad := range addrs {
			if !slices.Contains(routed, ad) {
				return nil, nil, nil
			}
		}
		gws = routedGateways(v4, v6)
	} else {
		var ok bool
		var err error
		if gws, br, ok, err = a.bridgeState(host, obs.addrs); err != nil || !ok {
			return nil, nil, err
		}
	}
	// Reported routes are those with a gateway, as in a fresh ADD.
	return a.result(obs.addrs, gws, obs.routes, br), addrs, nil
}

// bridgeState finds the bridge the host end is a port of and the
// gateway of each of the pod's subnets on it.
func (a *attachment) bridgeState(host netlink.Link, podAddrs []netip.Prefix) (map[bool]netip.Addr, *bridgeInfo, bool, error) {
	br, err := dataplane.LinkByName(a.hh, a.conf.Bridge)
	if err != nil || br == nil || host.Attrs().MasterIndex != br.Attrs().Index {
		return nil, nil, false, err
	}
	brAddrs, err := dataplane.Addrs(a.hh, br.Attrs().Index)
	if err != nil {
		return nil, nil, false, err
	}
	gws := map[bool]netip.Addr{}
	for _, p := range podAddrs {
		for _, b := range brAddrs {
			if b.Bits() == p.Bits() && p.Masked().Contains(b.Addr()) {
				gws[p.Addr().Is4()] = b.Addr()
				break
			}
		}
		if _, ok := gws[p.Addr().Is4()]; !ok {
			return nil, nil, false, nil
		}
	}
	return gws, &bridgeInfo{name: a.conf.Bridge, mac: br.Attrs().HardwareAddr}, true, nil
}

// removeDataplane removes the attachment's masquerade entries, its
// source guard and its veth pair (which takes its routes and
// neighbours).
func (a *attachment) removeDataplane() error {
	if a.conf.IPMasq {
		if err := a.removeMasq(); err != nil {
			return err
		}
	}
	if err := a.removeGuard(); err != nil {
		return err
	}
	return dataplane.DeleteLink(a.hh, a.hostName)
}

// removeMasq removes the attachment's masquerade entries: the elements
// whose comment names it. Not by address: an address from a stale
// prevResult may since belong to another pod, whose entry must stay.
func (a *attachment) removeMasq() error {
	m, err := dataplane.NewMasq()
	if err != nil {
		return err
	}
	defer m.Close()
	addrs, err := m.OwnedBy(a.conf.Name, a.owner)
	if err != nil {
		return err
	}
	return m.RemovePod(a.conf.Name, addrs)
}
