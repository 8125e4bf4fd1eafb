package main

import (
	"net/netip"

	"github.com/podnet/podnet/dataplane"
)

// guard is the attachment's source guard for the pod's addresses: what
// the pod may send, checked at the ingress of its host veth.
func (a *attachment) guard(addrs []netip.Addr) dataplane.Guard {
	return dataplane.Guard{Owner: a.owner, HostIf: a.hostName, PodMAC: a.ctrMAC, Addrs: addrs, Allowed: a.conf.AllowedSources}
}

// installGuard installs or replaces the attachment's source guard.
func (a *attachment) installGuard(addrs []netip.Addr) error {
	gs, err := dataplane.NewGuards()
	if err != nil {
		return err
	}
	defer gs.Close()
	return gs.Install(a.guard(addrs))
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
