package portmap

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// udpPortFilter matches UDP flows whose original destination port is one
// of ports.
type udpPortFilter []uint16

func (f udpPortFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	return flow.Forward.Protocol == unix.IPPROTO_UDP && slices.Contains(f, flow.Forward.DstPort)
}

// FlushUDP deletes the conntrack entries of UDP flows to the given host
// ports, by family. UDP has no handshake: a flow that reached the port
// before the mapping existed (or while another container held it) keeps
// its old destination for as long as packets keep coming, so ADD and DEL
// flush them.
func FlushUDP(v4, v6 []uint16) error {
	var errs []error
	for _, f := range []struct {
		family netlink.InetFamily
		ports  []uint16
	}{{unix.AF_INET, v4}, {unix.AF_INET6, v6}} {
		if len(f.ports) == 0 {
			continue
		}
		if _, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, f.family, udpPortFilter(f.ports)); err != nil {
			errs = append(errs, fmt.Errorf("portmap: flush UDP conntrack entries for ports %v: %w", f.ports, err))
		}
	}
	return errors.Join(errs...)
}
