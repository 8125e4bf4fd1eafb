package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/netns"
)

// cmdCheck verifies the attachment against prevResult: the IPAM's CHECK
// first, then the host veth, the container's interface with its
// addresses and routes, host routes (routed) or the bridge port
// (bridge), sysctls on both sides, and masquerade membership. Every
// difference is reported, not only the first.
func cmdCheck(ctx context.Context, args *skel.CmdArgs) error {
	c, err := parseConf(args)
	if err != nil {
		return err
	}
	prev := args.NetConf.PrevResult
	if prev == nil {
		return cni.Errorf(cni.CodeInvalidNetworkConfig, "config: prevResult: CHECK needs the result of ADD")
	}
	ipam, err := newIPAM(c, args)
	if err != nil {
		return err
	}
	if err := ipam.Check(ctx); err != nil {
		return err
	}
	a, err := newAttachment(c, args)
	if err != nil {
		return err
	}
	defer a.close()
	diffs, err := a.check(prev)
	if err != nil {
		return err
	}
	if err := a.checkHostPorts(prev); err != nil {
		diffs = append(diffs, err.Error())
	}
	if len(diffs) > 0 {
		// No code in the specification fits "not as ADD left it";
		// CodeInternal with the list in the message until podnet has one.
		return cni.Errorf(cni.CodeInternal, "CHECK of %s/%s: %s", c.Name, args.IfName, strings.Join(diffs, "; "))
	}
	return nil
}

// check lists the differences between the attachment and prev: the
// host side, the container's side, the source guard and the masquerade
// entries.
func (a *attachment) check(prev *cni.Result) ([]string, error) {
	want, v4, v6, diffs := a.prevAddrs(prev)
	host, err := dataplane.LinkByName(a.hh, a.hostName)
	if err != nil {
		return nil, err
	}
	diffs = append(diffs, a.checkHost(host, prev, want, v4, v6)...)

	obs, err := a.observe(host)
	if err != nil {
		return nil, err
	}
	diffs = append(diffs, a.checkContainer(obs, prev, want)...)
	if !obs.present {
		return diffs, nil
	}
	var sysDiffs []string
	if err := netns.Do(a.args.Netns, func() error {
		sysDiffs = dataplane.CheckSysctls(dataplane.ContainerSysctls(a.args.IfName, v6))
		return nil
	}); err != nil {
		return nil, err
	}
	diffs = append(diffs, prefixAll("container: ", sysDiffs)...)

	d, err := a.checkGuard(want)
	if err != nil {
		return nil, err
	}
	diffs = append(diffs, d...)
	if a.conf.IPMasq {
		d, err := a.checkMasq(want)
		if err != nil {
			return nil, err
		}
		diffs = append(diffs, d...)
	}
	return diffs, nil
}

// prevAddrs reads the addresses of the container's interface as prev
// has them, and their families. diffs says what prev lacks.
func (a *attachment) prevAddrs(prev *cni.Result) (want []netip.Prefix, v4, v6 bool, diffs []string) {
	ctrIdx := slices.IndexFunc(prev.Interfaces, func(i *cni.Interface) bool { return i.Name == a.args.IfName && i.Sandbox != "" })
	if ctrIdx < 0 {
		diffs = append(diffs, fmt.Sprintf("prevResult has no interface %s in a sandbox", a.args.IfName))
	}
	for _, ip := range prev.IPs {
		if ip.Interface != nil && *ip.Interface == ctrIdx {
			want = append(want, ip.Address)
			v4, v6 = v4 || ip.Address.Addr().Is4(), v6 || ip.Address.Addr().Is6()
		}
	}
	if len(want) == 0 {
		diffs = append(diffs, fmt.Sprintf("prevResult has no address on %s", a.args.IfName))
	}
	return want, v4, v6, diffs
}

// checkHost compares the host veth (nil when there is none) with what
// ADD made of it, then the host side of the mode.
func (a *attachment) checkHost(host netlink.Link, prev *cni.Result, want []netip.Prefix, v4, v6 bool) []string {
	switch {
	case host == nil:
		return []string{fmt.Sprintf("host interface %s does not exist", a.hostName)}
	case host.Type() != "veth":
		return []string{fmt.Sprintf("host interface %s is a %s, not a veth", a.hostName, host.Type())}
	}
	var diffs []string
	diff := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	ha := host.Attrs()
	if ha.Alias != a.owner.Alias() {
		diff("host interface %s has alias %q, want %q", a.hostName, ha.Alias, a.owner.Alias())
	}
	if ha.Flags&net.FlagUp == 0 {
		diff("host interface %s is down", a.hostName)
	}
	if ha.HardwareAddr.String() != a.hostMAC.String() {
		diff("host interface %s has MAC %s, want %s", a.hostName, ha.HardwareAddr, a.hostMAC)
	}
	if a.conf.MTU != 0 && ha.MTU != a.conf.MTU {
		diff("host interface %s has MTU %d, want %d", a.hostName, ha.MTU, a.conf.MTU)
	}
	if a.conf.Mode == modeRouted {
		return append(diffs, a.checkRoutedHost(ha.Index, want, v4, v6)...)
	}
	return append(diffs, a.checkBridgeHost(ha.Index, ha.MasterIndex, prev, want, v4, v6)...)
}

func prefixAll(p string, list []string) []string {
	for i := range list {
		list[i] = p + list[i]
	}
	return list
}

func (a *attachment) checkContainer(obs *observed, prev *cni.Result, want []netip.Prefix) []string {
	var diffs []string
	diff := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	if !obs.present {
		diff("container interface %s does not exist in %s", a.args.IfName, a.args.Netns)
		return diffs
	}
	if !obs.peer {
		diff("container interface %s is not the peer of %s", a.args.IfName, a.hostName)
	}
	if !obs.up {
		diff("container interface %s is down", a.args.IfName)
	}
	for _, iface := range prev.Interfaces {
		if iface.Name == a.args.IfName && iface.Sandbox != "" && iface.Mac != "" && !strings.EqualFold(iface.Mac, obs.mac) {
			diff("container interface %s has MAC %s, prevResult says %s", a.args.IfName, obs.mac, iface.Mac)
		}
	}
	if a.conf.MTU != 0 && obs.mtu != a.conf.MTU {
		diff("container interface %s has MTU %d, want %d", a.args.IfName, obs.mtu, a.conf.MTU)
	}
	for _, p := range want {
		if !slices.Contains(obs.addrs, p) {
			diff("container interface %s lacks address %s", a.args.IfName, p)
		}
	}
	for _, p := range obs.addrs {
		if !slices.Contains(want, p) {
			diff("container interface %s has address %s, which prevResult does not list", a.args.IfName, p)
		}
	}
	for _, r := range prev.Routes {
		found := false
		for _, got := range obs.routes {
			found = found || got.Dst == r.Dst.Masked() && (!r.GW.IsValid() || got.GW == r.GW)
		}
		if !found {
			diff("container lacks route %s via %s", r.Dst, r.GW)
		}
	}
	return diffs
}

func (a *attachment) checkRoutedHost(idx int, want []netip.Prefix, v4, v6 bool) []string {
	var diffs []string
	routed, err := dataplane.HostRoutes(a.hh, idx)
	if err != nil {
		return []string{err.Error()}
	}
	for _, p := range want {
		if !slices.Contains(routed, p.Addr()) {
			diffs = append(diffs, fmt.Sprintf("host has no route %s dev %s", dataplane.HostPrefix(p.Addr()), a.hostName))
		}
	}
	sys := append(dataplane.NodeForwardingSysctls(v4, v6), dataplane.RoutedHostSysctls(a.hostName, v4, v6)...)
	return append(diffs, prefixAll("host: ", dataplane.CheckSysctls(sys))...)
}

func (a *attachment) checkBridgeHost(idx, master int, prev *cni.Result, want []netip.Prefix, v4, v6 bool) []string {
	var diffs []string
	diff := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	br, err := dataplane.LinkByName(a.hh, a.conf.Bridge)
	if err != nil {
		return []string{err.Error()}
	}
	if br == nil {
		return []string{fmt.Sprintf("bridge %s does not exist", a.conf.Bridge)}
	}
	if master != br.Attrs().Index {
		diff("host interface %s is not a port of bridge %s", a.hostName, a.conf.Bridge)
	}
	if a.conf.Hairpin {
		if on, err := dataplane.Hairpin(a.hh, idx); err != nil || !on {
			diff("hairpin mode is off on %s (%v)", a.hostName, err)
		}
	}
	if a.conf.Promisc && br.Attrs().Promisc == 0 {
		diff("bridge %s is not promiscuous", a.conf.Bridge)
	}
	brAddrs, err := dataplane.Addrs(a.hh, br.Attrs().Index)
	if err != nil {
		return append(diffs, err.Error())
	}
	for _, ip := range prev.IPs {
		if ip.Gateway.IsValid() && !slices.Contains(brAddrs, netip.PrefixFrom(ip.Gateway, ip.Address.Bits())) {
			diff("bridge %s lacks gateway address %s/%d", a.conf.Bridge, ip.Gateway, ip.Address.Bits())
		}
	}
	sys := append(dataplane.NodeForwardingSysctls(v4, v6), dataplane.BridgeSysctls(a.conf.Bridge, v4, v6)...)
	return append(diffs, prefixAll("host: ", dataplane.CheckSysctls(sys))...)
}

func (a *attachment) checkMasq(want []netip.Prefix) ([]string, error) {
	m, err := dataplane.NewMasq()
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var diffs []string
	n, err := a.conf.masqNetwork(nil) // the rules say nothing of one pod's subnets
	if err != nil {
		return nil, err
	}
	ok, err := m.RulesCurrent(n)
	if err != nil {
		return nil, err
	}
	if !ok {
		diffs = append(diffs, fmt.Sprintf("the masquerade rules of network %s are missing or not current", a.conf.Name))
	}
	members, err := m.Members(a.conf.Name)
	if err != nil {
		return nil, err
	}
	for _, p := range want {
		o, in := members[p.Addr()]
		switch {
		case !in:
			diffs = append(diffs, fmt.Sprintf("%s is not in the masquerade set of network %s", p.Addr(), a.conf.Name))
		case o != a.owner:
			diffs = append(diffs, fmt.Sprintf("%s is in the masquerade set of network %s for container %s, interface %s", p.Addr(), a.conf.Name, o.ContainerID, o.IfName))
		}
	}
	return diffs, nil
}

// checkGuard reports a source guard that is missing or guards other
// addresses than want.
func (a *attachment) checkGuard(want []netip.Prefix) ([]string, error) {
	gs, err := dataplane.NewGuards()
	if err != nil {
		return nil, err
	}
	defer gs.Close()
	addrs := make([]netip.Addr, len(want))
	for i, p := range want {
		addrs[i] = p.Addr()
	}
	ok, err := gs.Current(a.guard(addrs))
	if err != nil || ok {
		return nil, err
	}
	return []string{fmt.Sprintf("the source guard of %s is missing or does not guard %v", a.hostName, addrs)}, nil
}
