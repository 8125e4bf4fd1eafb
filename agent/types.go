package agent

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"

	"github.com/podnet/podnet/dataplane"
)

// Mode is how the agent reaches other nodes' pods.
type Mode string

// Modes.
const (
	// ModeHostGW routes each remote block via the remote node's underlay
	// address: the nodes must share an L2 segment.
	ModeHostGW Mode = "host-gw"
	// ModeVXLAN encapsulates traffic to every remote node.
	ModeVXLAN Mode = "vxlan"
	// ModeAuto uses host-gw for nodes whose underlay address is inside a
	// subnet connected to this node's underlay interface, VXLAN for the
	// others.
	ModeAuto Mode = "auto"
)

// ParseMode validates a --mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeHostGW, ModeVXLAN, ModeAuto:
		return m, nil
	case "":
		return ModeAuto, nil
	}
	return "", fmt.Errorf("mode %q: want host-gw, vxlan or auto", s)
}

// NodeRecord is the value under nodes/<name>.
type NodeRecord struct {
	Name string `json:"name"`
	// Address is the node's underlay address: host-gw routes go via it
	// and VXLAN packets are sent to it.
	Address netip.Addr `json:"address"`
	// VTEPIP is the next hop of VXLAN routes to the node (see the VTEP
	// scheme in doc.go).
	VTEPIP netip.Addr `json:"vtepIP"`
	// VTEPMAC is the MAC address of the node's podnet.vxlan device.
	VTEPMAC string `json:"vtepMAC"`
	// LinkLocal6 is the IPv6 link-local address of the node's underlay
	// interface: host-gw routes to the node's IPv6 blocks go via it, so
	// an IPv4 underlay carries IPv6 pods. Absent when the underlay has no
	// IPv6 (or the record is from an older agent): then the node's IPv6
	// blocks are not routed in host-gw.
	LinkLocal6 netip.Addr `json:"linkLocal6,omitzero"`
}

// VTEPMAC is the MAC address of node's VXLAN device: a hash of the name,
// with the locally administered bit set and the multicast bit clear, so
// every node can compute it and it survives restarts.
func VTEPMAC(node string) net.HardwareAddr {
	h := sha256.Sum256([]byte("podnet-vtep:" + node))
	mac := net.HardwareAddr(h[:6])
	mac[0] = mac[0]&^0x01 | 0x02
	return mac
}

// VTEPLinkLocal6 is the IPv6 next hop of VXLAN routes to the node whose
// VXLAN device has mac: the link-local address the kernel derives from
// that MAC (modified EUI-64), which needs no record field and is the
// device's own link-local address on the remote node.
func VTEPLinkLocal6(mac net.HardwareAddr) netip.Addr {
	if len(mac) != 6 {
		return netip.Addr{}
	}
	return dataplane.LinkLocalOf(mac)
}

// NodesPrefix is the prefix of every node record under the store prefix.
func NodesPrefix(prefix string) string { return prefix + "nodes/" }

// NodeKey is the key of node's record.
func NodeKey(prefix, node string) string { return NodesPrefix(prefix) + node }
