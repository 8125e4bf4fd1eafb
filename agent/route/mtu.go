package route

import (
	"fmt"
)

// What VXLAN adds to a pod's packet: the inner Ethernet header (14), the
// VXLAN header (8), UDP (8), and the outer IP header of the underlay's
// family (20 for IPv4, 40 for IPv6, without options or extension
// headers).
const (
	vxlanOverhead4 = 50
	vxlanOverhead6 = 70
)

// What WireGuard adds to a packet it encrypts: the outer IP header (20
// for IPv4, 40 for IPv6), UDP (8), WireGuard's data header (16) and its
// authentication tag (16); Calico and Cilium lower by the same.
const (
	WireGuardOverhead4 = 60
	WireGuardOverhead6 = 80
)

// WireGuardOverhead is what WireGuard adds over an underlay of IPv6
// (underlay6) or IPv4.
func WireGuardOverhead(underlay6 bool) int {
	if underlay6 {
		return WireGuardOverhead6
	}
	return WireGuardOverhead4
}

// Bounds of a pod MTU: IPv4's minimum (RFC 791), and the largest IP
// packet's length, which the podnet plugin's config also allows.
const (
	minPodMTU = 68
	maxPodMTU = 65535
)

// vxlanOverhead is what VXLAN encapsulation adds over an underlay of
// IPv6 (underlay6) or IPv4.
func vxlanOverhead(underlay6 bool) int {
	if underlay6 {
		return vxlanOverhead6
	}
	return vxlanOverhead4
}

// EncapOverhead is what the routes of mode may add to a pod's packet on
// an underlay of IPv6 (underlay6) or IPv4: VXLAN's headers in vxlan mode,
// and in auto mode too, where any peer outside this node's subnets is
// reached over VXLAN; nothing in host-gw mode, which only routes.
func EncapOverhead(mode Mode, underlay6 bool) int {
	if mode == ModeHostGW {
		return 0
	}
	return vxlanOverhead(underlay6)
}

// PodMTU is the MTU of a node's pod interfaces: the underlay interface's
// MTU less what mode's encapsulation adds, so that a full-sized packet
// of a pod still fits the underlay once encapsulated and no pod depends
// on ICMP "fragmentation needed" (path MTU discovery) to find it out.
// Jumbo frames are used in full. It fails when the underlay leaves less
// than IPv4's minimum.
func PodMTU(mode Mode, underlayMTU int, underlay6 bool) (int, error) {
	return podMTU(mode, false, underlayMTU, underlay6)
}

// EncryptedPodMTU is the pod MTU with encryption on: the underlay's MTU
// less WireGuard's overhead alone, in every mode. podnet.wg encrypts the
// pod's own packet and sends it as UDP to the peer's underlay address,
// never through podnet.vxlan (strict mode never reaches a peer in the
// clear, so never in VXLAN either): VXLAN's 50 bytes are not on the
// wire, and taking them too cost the VXLAN rows half their throughput
// (wireguard-go's 64 KB send batches of 1390-byte packets overran the
// devices' GSO size and were cut in software; docs/performance.md). A
// pod made with encryption on keeps fitting when it is turned off
// again: the underlay less WireGuard's 60 is below less VXLAN's 50.
func EncryptedPodMTU(mode Mode, underlayMTU int, underlay6 bool) (int, error) {
	return podMTU(mode, true, underlayMTU, underlay6)
}

func podMTU(mode Mode, wireguard bool, underlayMTU int, underlay6 bool) (int, error) {
	overhead := EncapOverhead(mode, underlay6)
	if wireguard {
		overhead = WireGuardOverhead(underlay6)
	}
	mtu := min(underlayMTU-overhead, maxPodMTU)
	if mtu < minPodMTU {
		return 0, fmt.Errorf("underlay MTU %d: %d bytes left for pods after %d of encapsulation (mode %s), below IPv4's minimum of %d",
			underlayMTU, mtu, overhead, mode, minPodMTU)
	}
	return mtu, nil
}
