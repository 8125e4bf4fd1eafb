package netplugin

import (
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netns"
)

// statusFromResult takes the pod's addresses from a result: those on the
// pod-side interface called ifName (a result may list host-side
// interfaces too), or all of them when the result does not say which
// interface an address is on. The result's order is kept: the first
// address is the primary one.
func statusFromResult(network, ifName string, res *cni.Result) *PodNetworkStatus {
	st := &PodNetworkStatus{Interface: ifName, Network: network}
	for _, ip := range res.IPs {
		if ip.Interface != nil {
			iface := res.Interfaces[*ip.Interface]
			if iface.Sandbox == "" || iface.Name != ifName {
				continue
			}
		}
		a := ip.Address.Addr()
		if !slices.Contains(st.IPs, a) {
			st.IPs = append(st.IPs, a)
		}
	}
	if len(st.IPs) > 0 {
		st.IP = st.IPs[0]
	}
	return st
}

// verifyLiveAddresses checks inside the pod's namespace, over netlink,
// that ifName exists and carries every address in want.
func verifyLiveAddresses(netnsPath, ifName string, want []netip.Addr) error {
	return netns.Do(netnsPath, func() error {
		link, err := netlink.LinkByName(ifName)
		if err != nil {
			return cni.Errorf(cni.CodeUnknownContainer, "interface %q in %s: %v", ifName, netnsPath, err)
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return cni.Errorf(cni.CodeIOFailure, "listing addresses of %q in %s: %v", ifName, netnsPath, err)
		}
		have := map[netip.Addr]bool{}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				have[ip.Unmap()] = true
			}
		}
		for _, w := range want {
			if !have[w] {
				return cni.Errorf(cni.CodeUnknownContainer, "address %s of the cached result is not on %q in %s", w, ifName, netnsPath)
			}
		}
		return nil
	})
}
