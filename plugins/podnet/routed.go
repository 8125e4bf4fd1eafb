package main

import (
	"net/netip"

	"github.com/podnet/podnet/dataplane"
)

// createRoutedLink creates the veth pair, the peer directly in the
// pod's namespace (peerFd). It needs nothing from the IPAM, so it runs
// while the IPAM does.
func (a *attachment) createRoutedLink(peerFd int, u *undo) (int, error) {
	idx, err := dataplane.CreateVeth(a.hh, dataplane.Veth{
		HostName: a.hostName, HostMAC: a.hostMAC, HostAlias: a.owner.Alias(),
		PeerName: a.args.IfName, PeerMAC: a.ctrMAC, PeerNSFd: peerFd, MTU: a.conf.MTU,
	})
	if idx != 0 {
		// Deleting the host end deletes the pair, and the routes and
		// neighbours on it.
		u.push("veth "+a.hostName, func() error { return dataplane.DeleteLink(a.hh, a.hostName) })
	}
	if err != nil {
		return idx, err
	}
	// The IPv4 settings now, while the IPAM allocates, rather than after
	// it: whether the pod gets an IPv4 address is not known yet, but on a
	// link without one they change nothing, and they go with the link.
	return idx, dataplane.WriteSysctls(dataplane.RoutedHostSysctls(a.hostName, true, false))
}

// addRoutedHost is the rest of routed mode's host half, once the
// addresses are known: the host end's sysctls and link-local address,
// and per address a host route and a permanent neighbour entry. It
// returns what the pod's side needs.
func (a *attachment) addRoutedHost(idx int, ips []podIP, v4, v6 bool) (hostSide, error) {
	// The node forwards first: it is the pod's gateway. Then the host
	// end's IPv6 settings (IPv4's: createRoutedLink).
	sysctls := append(dataplane.NodeForwardingSysctls(v4, v6), dataplane.RoutedHostSysctls(a.hostName, false, v6)...)
	if err := dataplane.WriteSysctls(sysctls); err != nil {
		return hostSide{}, err
	}
	if v6 {
		// Explicitly, and without DAD: the pod's IPv6 gateway must not
		// depend on the host's addr_gen_mode or wait for DAD.
		if err := dataplane.AddAddr(a.hh, idx, netip.PrefixFrom(dataplane.RoutedGateway6, 64)); err != nil {
			return hostSide{}, err
		}
	}
	for _, ip := range ips {
		if err := dataplane.AddHostRoute(a.hh, idx, ip.addr); err != nil {
			return hostSide{}, err
		}
		if err := dataplane.SetNeigh(a.hh, idx, ip.addr, a.ctrMAC); err != nil {
			return hostSide{}, err
		}
	}
	return hostSide{spec: a.routedSpec(ips, v4, v6), gateways: routedGateways(v4, v6)}, nil
}

func routedGateways(v4, v6 bool) map[bool]netip.Addr {
	gws := map[bool]netip.Addr{}
	if v4 {
		gws[true] = dataplane.RoutedGateway4
	}
	if v6 {
		gws[false] = dataplane.RoutedGateway6
	}
	return gws
}

// routedSpec is the pod's side of routed mode: each address as /32
// (/128), the gateways as permanent neighbours at the host end's MAC
// (the pod never has to ARP or solicit for them), and for IPv4 the
// gateway's link route that the default route needs.
func (a *attachment) routedSpec(ips []podIP, v4, v6 bool) *containerSpec {
	s := &containerSpec{ifName: a.args.IfName, sysctls: dataplane.ContainerSysctls(a.args.IfName, v6)}
	for _, ip := range ips {
		s.addrs = append(s.addrs, dataplane.HostPrefix(ip.addr))
	}
	if v4 {
		s.neighs = append(s.neighs, neigh{dataplane.RoutedGateway4, dataplane.RoutedHostMAC})
		s.routes = append(s.routes, dataplane.LinkRoute{Dst: dataplane.HostPrefix(dataplane.RoutedGateway4), LinkScope: true})
	}
	if v6 {
		s.neighs = append(s.neighs, neigh{dataplane.RoutedGateway6, dataplane.RoutedHostMAC})
	}
	return s
}
