package main

import (
	"errors"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/dataplane"
)

// cmdDel undoes ADD: the masquerade entries and the veth pair (deleting
// the host end deletes the pair, its host routes and neighbours), then
// the IPAM's DEL, exactly once. It needs neither the namespace nor a
// prevResult: the host veth's name and alias and the set elements'
// comments say what belongs to the attachment.
//
// The kernel makes the two removals wait for RCU: a deleted link in
// rcu_barrier after it is already unregistered, removed set elements in
// the close of the nftables socket. So they run side by side, and the
// IPAM's release starts once both are in effect (the elements removed,
// the link unregistered with its routes) while those waits go on: the
// address is never released while anything of it remains visible.
//
// When the dataplane cannot be cleaned, the IPAM is not called: an
// address released while its route still exists would be handed to the
// next pod and collide. The runtime retries DEL.
func cmdDel(args *skel.CmdArgs) error {
	c, err := parseConf(args)
	if err != nil {
		return err
	}
	a, err := newAttachment(c, args)
	if err != nil {
		return err
	}
	defer a.close()

	host, err := dataplane.LinkByName(a.hh, a.hostName)
	if err != nil {
		return err
	}
	if host != nil && !a.ownsLink(host) {
		// Another network's attachment of the same container and
		// ifname (the name hashes only those two): not ours to delete.
		host = nil
	}

	// Host ports go at the same time as the rest; like the masquerade
	// entries, they must be gone before the address is released.
	portsRemoved := make(chan error, 1)
	go func() { portsRemoved <- a.delHostPorts() }()
	masqRemoved := make(chan error, 1)
	masqClosed := make(chan struct{})
	if c.IPMasq {
		go func() {
			defer close(masqClosed)
			m, err := dataplane.NewMasq()
			if err != nil {
				masqRemoved <- err
				return
			}
			masqRemoved <- a.removeMasqWith(m)
			m.Close() // the slow part, in the background
		}()
	} else {
		masqRemoved <- nil
		close(masqClosed)
	}
	defer func() { <-masqClosed }()

	linkDone := make(<-chan error)
	if host != nil {
		if linkDone, err = dataplane.DeleteLinkEarly(a.hh, a.hostName); err != nil {
			return errors.Join(err, <-masqRemoved, <-portsRemoved)
		}
	}
	if err := errors.Join(<-masqRemoved, <-portsRemoved); err != nil {
		if host != nil {
			<-linkDone
		}
		return err
	}
	ipamErr := func() error {
		ipam, err := newIPAM(c, args)
		if err != nil {
			return err
		}
		return ipam.Del()
	}()
	var linkErr error
	if host != nil {
		linkErr = <-linkDone
	}
	return errors.Join(ipamErr, linkErr)
}

// ownsLink reports whether the host link is this attachment's: its
// alias names it, or it has none (an ADD died before setting it).
func (a *attachment) ownsLink(l netlink.Link) bool {
	alias := l.Attrs().Alias
	if alias == "" {
		return true
	}
	o, ok := dataplane.ParseAlias(alias)
	return ok && o == a.owner
}
