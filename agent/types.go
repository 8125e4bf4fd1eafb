package agent

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
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

// NodesPrefix is the prefix of every node record under the store prefix.
func NodesPrefix(prefix string) string { return prefix + "nodes/" }

// NodeKey is the key of node's record.
func NodeKey(prefix, node string) string { return NodesPrefix(prefix) + node }
