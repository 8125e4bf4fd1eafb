package main

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
)

// bridgeInfo is the bridge as the result reports it.
type bridgeInfo struct {
	name string
	mac  net.HardwareAddr
}

// bridgeGateways picks the gateway of each family: the IPAM's, or else
// the first address of the subnet, as the reference bridge plugin does.
func bridgeGateways(ips []podIP) (map[bool]netip.Prefix, error) {
	gws := map[bool]netip.Prefix{}
	for _, ip := range ips {
		is4 := ip.addr.Is4()
		if _, ok := gws[is4]; ok {
			continue
		}
		gw := ip.gateway
		if !gw.IsValid() {
			gw = ip.subnet.Addr().Next()
		}
		if !ip.subnet.Contains(gw) || gw == ip.addr || ip.subnet.IsSingleIP() {
			return nil, cni.Errorf(cni.CodeInvalidResult, "IPAM: gateway %s cannot serve %s/%d on a bridge", gw, ip.addr, ip.subnet.Bits())
		}
		gws[is4] = netip.PrefixFrom(gw, ip.subnet.Bits())
	}
	return gws, nil
}

// createBridgeLink ensures the bridge, creates the veth pair with the
// peer directly in the pod's namespace (peerFd), and makes the host end
// a port of the bridge. It needs nothing from the IPAM, so it runs while
// the IPAM does. The bridge is shared by every pod and never removed.
func (a *attachment) createBridgeLink(peerFd int, u *undo) (int, *netlink.Bridge, error) {
	br, err := dataplane.EnsureBridge(a.hh, dataplane.Bridge{Name: a.conf.Bridge, MTU: a.conf.MTU, Promisc: a.conf.Promisc})
	if err != nil {
		return 0, nil, err
	}
	idx, err := dataplane.CreateVeth(a.hh, dataplane.Veth{
		HostName: a.hostName, HostMAC: a.hostMAC, HostAlias: a.owner.Alias(),
		PeerName: a.args.IfName, PeerMAC: a.ctrMAC, PeerNSFd: peerFd, MTU: a.conf.MTU,
	})
	if idx != 0 {
		u.push("veth "+a.hostName, func() error { return dataplane.DeleteLink(a.hh, a.hostName) })
	}
	if err != nil {
		return 0, nil, err
	}
	if err := dataplane.SetMaster(a.hh, idx, br.Attrs().Index); err != nil {
		return 0, nil, err
	}
	if a.conf.Hairpin {
		if err := dataplane.SetHairpin(a.hh, idx); err != nil {
			return 0, nil, err
		}
	}
	return idx, br, nil
}

// addBridgeHost is the rest of bridge mode's host half, once the
// addresses are known: the bridge's sysctls and gateway addresses (kept
// when pods go: other pods use them). It returns what the pod's side
// needs.
func (a *attachment) addBridgeHost(br *netlink.Bridge, ips []podIP, v4, v6 bool) (hostSide, error) {
	gws, err := bridgeGateways(ips)
	if err != nil {
		return hostSide{}, err
	}
	// The node forwards first (it is the pods' gateway), then the
	// bridge's own settings.
	sysctls := append(dataplane.NodeForwardingSysctls(v4, v6), dataplane.BridgeSysctls(a.conf.Bridge, v4, v6)...)
	if err := dataplane.WriteSysctls(sysctls); err != nil {
		return hostSide{}, err
	}
	for _, gw := range gws {
		if err := dataplane.AddAddr(a.hh, br.Attrs().Index, gw); err != nil {
			return hostSide{}, err
		}
	}
	s := &containerSpec{ifName: a.args.IfName, sysctls: dataplane.ContainerSysctls(a.args.IfName, v6)}
	for _, ip := range ips {
		s.addrs = append(s.addrs, netip.PrefixFrom(ip.addr, ip.subnet.Bits()))
	}
	gateways := map[bool]netip.Addr{}
	for is4, gw := range gws {
		// No permanent neighbour for it, unlike routed mode: the MAC of
		// a bridge podnet did not create may change as ports come and go.
		gateways[is4] = gw.Addr()
	}
	return hostSide{spec: s, gateways: gateways, bridge: &bridgeInfo{name: a.conf.Bridge, mac: br.Attrs().HardwareAddr}}, nil
}
