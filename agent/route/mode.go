package route

import (
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
