package netpol

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/internal/sysctlrecord"
	"github.com/podnet/podnet/netns"
)

// openNetNS opens the nftables and rtnetlink sockets in the node's
// namespace (Config.NetNS, else the process's own). Sockets stay bound to
// the namespace they were opened in, so the service never switches a
// thread's namespace after this.
func (s *Service) openNetNS() (renderer, func() ([]netip.Addr, error), func(), error) {
	var (
		r     *policyrules.Renderer
		h     *netlink.Handle
		addrs *addrCache
	)
	open := func() (err error) {
		var opts []policyrules.Option
		if s.cfg.DenyLog != nil {
			opts = append(opts, policyrules.WithDenyLog(*s.cfg.DenyLog))
		}
		if s.cfg.FlowLog != nil {
			opts = append(opts, policyrules.WithFlowLabels(*s.cfg.FlowLog))
		}
		if r, err = policyrules.New(s.cfg.Node, opts...); err != nil {
			return err
		}
		if h, err = dataplane.NewHandle(); err != nil {
			r.Close()
			return err
		}
		if addrs, err = newAddrCache(h); err != nil {
			s.log.Warn("node addresses listed at every rebuild", "err", err)
		}
		s.bridgeToInet()
		return nil
	}
	if err := s.inNodeNS(open); err != nil {
		return nil, nil, nil, fmt.Errorf("network policy: %w", err)
	}
	if addrs == nil {
		return r, func() ([]netip.Addr, error) { return globalAddrs(h) }, func() { r.Close(); h.Close() }, nil
	}
	return r, addrs.get, func() { addrs.close(); r.Close(); h.Close() }, nil
}

// globalAddrs are the node's addresses of global scope, on any interface:
// those it may send from to its pods (an underlay address, a bridge's
// gateway, another interface's). Loopback and link-local addresses are
// not: the node does not reach a pod's global address from them.
func globalAddrs(h *netlink.Handle) ([]netip.Addr, error) {
	as, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range as {
		if a.Scope != unix.RT_SCOPE_UNIVERSE || a.IPNet == nil {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// bridgeToInet makes the node's bridges hand their IP traffic to the
// inet hooks (dataplane.BridgeNetfilterSysctls), where the policy table
// is: in bridge mode two pods of one bridge would otherwise talk past it.
// It runs in the node's namespace. Without br_netfilter (a kernel that
// has it as a module not loaded) there is nothing to set: routed pods are
// judged all the same, and the log says what bridged ones miss.
func (s *Service) bridgeToInet() {
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		s.log.Warn("br_netfilter is not loaded: traffic between two pods of one bridge (bridge mode) is not judged by network policy", "err", err)
		return
	}
	write := dataplane.WriteSysctls
	if s.cfg.SysctlRecord != "" {
		write = sysctlrecord.Writer(s.cfg.SysctlRecord)
	}
	if err := write(dataplane.BridgeNetfilterSysctls(true)); err != nil {
		s.log.Warn("could not hand bridged traffic to network policy: traffic between two pods of one bridge (bridge mode) is not judged", "err", err)
	}
}

// inNodeNS runs f in the node's network namespace (Config.NetNS, else
// the process's own): sockets f opens stay bound to it.
func (s *Service) inNodeNS(f func() error) error {
	if s.cfg.NetNS != "" {
		return netns.Do(s.cfg.NetNS, f)
	}
	return f()
}
