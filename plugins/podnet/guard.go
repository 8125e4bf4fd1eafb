package main

import (
	"net/netip"
	"slices"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
)

// guard is the attachment's source guard for the pod's addresses: what
// the pod may send, checked as it enters the host from its veth.
func (a *attachment) guard(addrs []netip.Addr) dataplane.Guard {
	return dataplane.Guard{Owner: a.owner, HostIf: a.hostName, PodMAC: a.ctrMAC, Addrs: addrs,
		Allowed: a.conf.AllowedSources, Bridged: a.conf.Mode == modeBridge}
}

// installGuard installs the attachment's source guard on a new host veth.
func (a *attachment) installGuard(addrs []netip.Addr) error {
	gs, err := dataplane.NewGuards()
	if err != nil {
		return err
	}
	defer gs.Close()
	return gs.Install(a.guard(addrs))
}

// replaceGuard makes the attachment's source guard the one for addrs,
// whatever an earlier ADD left.
func (a *attachment) replaceGuard(addrs []netip.Addr) error {
	gs, err := dataplane.NewGuards()
	if err != nil {
		return err
	}
	defer gs.Close()
	return gs.Replace(a.guard(addrs))
}

// removeGuard removes the attachment's source guard, if it has one.
func (a *attachment) removeGuard() error {
	gs, err := dataplane.NewGuards()
	if err != nil {
		return err
	}
	defer gs.Close()
	return gs.Remove(a.hostName)
}

// prevResultAddrs are the addresses prevResult gives the container's
// interface, if the runtime passed one: DEL's hint of what the guard
// holds. A stale hint costs nothing but time: the guard's elements are
// keyed by the host interface, so they cannot be another pod's, and a
// removal of elements that are not there falls back to listing them.
func (a *attachment) prevResultAddrs() []netip.Addr {
	prev := a.args.NetConf.PrevResult
	if prev == nil {
		return nil
	}
	idx := slices.IndexFunc(prev.Interfaces, func(i *cni.Interface) bool { return i.Name == a.args.IfName && i.Sandbox != "" })
	if idx < 0 {
		return nil
	}
	var out []netip.Addr
	for _, ip := range prev.IPs {
		if ip.Interface != nil && *ip.Interface == idx {
			out = append(out, ip.Address.Addr())
		}
	}
	return out
}
