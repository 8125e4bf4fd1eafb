package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/nftelem"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/portmap"
)

// cmdDel undoes ADD: the masquerade entries, the host ports and the veth
// pair (deleting the host end deletes the pair, its host routes and
// neighbours), then the IPAM's DEL, exactly once. It needs neither the
// namespace nor a prevResult: the host veth's name and alias and the set
// elements' comments say what belongs to the attachment. Why the steps
// run side by side and in this order, why a child process deletes the
// link, and why the IPAM is not called when the dataplane cannot be
// cleaned: docs/architecture.md, "What ADD and DEL wait for, and what
// runs side by side".
func cmdDel(ctx context.Context, args *skel.CmdArgs) error {
	c := confForDel(args)
	a, err := newAttachment(c, args)
	if err != nil {
		return err
	}
	defer a.close()

	host, err := dataplane.LinkByName(a.hh, a.hostName)
	if err != nil {
		return err
	}
	// The guard is named after the host veth: with the veth of another
	// network's attachment there, so is that attachment's guard.
	withGuard := true
	if host != nil && !a.ownsLink(host) {
		// Another network's attachment of the same container and
		// ifname (the name hashes only those two): not ours to delete.
		host, withGuard = nil, false
	}

	// The nftables socket before the link's deleter starts: the deleter
	// holds it until the kernel's RCU wait is over, so that closing it
	// here does not wait for a grace period of its own.
	conn, elems, nftFd, nftErr := openNFT()
	defer closeNFT(conn)
	unregistered, err := a.deleteLink(host, nftFd)
	if err != nil {
		return errors.Join(err, nftErr)
	}
	if nftErr == nil {
		nftErr = a.removeNFT(conn, elems, withGuard)
	}
	if err := errors.Join(nftErr, <-unregistered); err != nil {
		return err // the dataplane is not clean: no release
	}
	if c.IPAMType == "" {
		return nil // unreadable: see confForDel
	}
	ipam, err := newReleaseIPAM(c, args)
	if err != nil {
		return err
	}
	return ipam.Del(ctx)
}

// deleteLink deletes the attachment's host link (nil: none to delete)
// and reports once it is unregistered; see DeleteLinkDetached for keep.
func (a *attachment) deleteLink(host netlink.Link, keep int) (unregistered <-chan error, err error) {
	if host == nil {
		done := make(chan error, 1)
		done <- nil
		return done, nil
	}
	return dataplane.DeleteLinkDetached(a.hh, a.hostName, keep)
}

// openNFT opens a lasting nftables connection, a way to get elements by
// key on the same socket (no second socket to close, see removeNFT), and
// returns the socket's descriptor (-1 when unknown).
func openNFT() (conn *nftables.Conn, elems *nftelem.Conn, fd int, err error) {
	fd = -1
	record := func(c *mdnetlink.Conn) error {
		if rc, err := c.SyscallConn(); err == nil {
			_ = rc.Control(func(f uintptr) { fd = int(f) })
		}
		return nil
	}
	conn, elems, err = nftelem.Lasting(nftables.WithSockOptions(record))
	if err != nil {
		return nil, nil, -1, cni.Errorf(cni.CodeIOFailure, "nftables netlink socket: %v", err)
	}
	return conn, elems, fd, nil
}

func closeNFT(conn *nftables.Conn) {
	if conn != nil {
		_ = conn.CloseLasting()
	}
}

// confForDel is the configuration DEL works with. One that no longer
// validates (edited since the ADD: a mode or field this version refuses)
// would otherwise fail the DEL with code 7 on every retry, and a kubelet
// retries forever. Everything an attachment makes is named or tagged from
// the network, container ID and ifname, which skel has checked, so DEL
// can still find and remove it: it then looks for masquerade entries and
// host ports whatever the configuration said, and releases the addresses
// through the IPAM type if the configuration still names a usable one.
// When it does not, nothing can be released here; the IPAM's GC (the
// agent's, or podnet pod gc) reclaims the handle once the attachment is
// gone from the runtime's cache.
func confForDel(args *skel.CmdArgs) *conf {
	c, err := parseConf(args)
	if err == nil {
		return c
	}
	salvaged := &conf{NetConf: args.NetConf, Mode: modeRouted, IPMasq: true}
	var raw struct {
		IPAM struct {
			Type string `json:"type"`
		} `json:"ipam"`
	}
	if json.Unmarshal(args.StdinData, &raw) == nil && validIPAMType(raw.IPAM.Type) {
		salvaged.IPAMType = raw.IPAM.Type
	}
	fmt.Fprintf(args.Stderr, "podnet: DEL with a configuration that does not validate (%v): removing what the attachment made by its names and owner tags\n", err)
	return salvaged
}

// removeNFT removes, through conn, the attachment's source guard,
// masquerade entries and host ports in one nftables batch (the guard
// apart when DEL has no prevResult to name its addresses). With a
// prevResult, the masquerade and host-port elements its addresses and
// the mappings name are got by key through elems (a round trip each,
// whatever the number of pods on the node), and only those whose comment
// names the attachment are removed; without one, the sets are listed.
// Should the batch fail (it fails whole: say an element went away since
// it was read, or the guard went with its link), each part is removed
// again the one-by-one way that tolerates whatever is missing.
func (a *attachment) removeNFT(conn *nftables.Conn, elems *nftelem.Conn, withGuard bool) (err error) {
	prevAddrs := a.prevResultAddrs()
	ports := a.hostPortsToDelete()
	unlock := func() {}
	if ports != nil {
		if unlock, err = portmap.Lock(ports.LockPath); err != nil {
			return err
		}
	}
	defer func() { unlock() }()

	if withGuard {
		// By prevResult's addresses, in the batch; without them, by
		// listing the guard's sets, apart.
		if len(prevAddrs) > 0 {
			if err := dataplane.GuardsOn(conn).QueueRemove(a.guard(prevAddrs)); err != nil {
				return err
			}
		} else if err := a.removeGuard(); err != nil {
			return err
		}
	}
	if a.conf.IPMasq {
		if err := dataplane.MasqOn(conn, elems).QueueRemoveOwned(a.conf.Name, a.owner, prevAddrs); err != nil {
			return err
		}
	}
	if a.conf.PolicySocket != "" { // closed pods (admit.go): before the release, as the rest
		if err := dataplane.ClosedOn(conn).QueueRemoveOwned(a.owner); err != nil {
			return err
		}
	}
	var owned []portmap.Entry
	if ports != nil {
		if owned, err = portmap.QueueDel(portmap.OnConn(conn, elems), ports); err != nil {
			return err
		}
	}
	faultPoint(stepDelQueued, a.args.Netns)
	if err := conn.Flush(); err != nil {
		unlock()
		unlock = func() {}
		if err := a.removeNFTOneByOne(withGuard, ports); err != nil {
			return err
		}
	}
	return portmap.FlushUDPOf(owned)
}

// removeNFTOneByOne is removeNFT's fallback, a batch per part.
func (a *attachment) removeNFTOneByOne(withGuard bool, ports *portmap.Request) error {
	var guardErr, masqErr, portsErr error
	if withGuard {
		guardErr = a.removeGuard()
	}
	if a.conf.IPMasq {
		masqErr = a.removeMasq()
	}
	if ports != nil {
		portsErr = portmap.Del(ports)
	}
	var closedErr error
	if a.conf.PolicySocket != "" {
		closedErr = a.removeClosed()
	}
	return errors.Join(guardErr, masqErr, portsErr, closedErr)
}

// ownsLink reports whether the host link is this attachment's: its
// alias names it, or it has none (an ADD died before setting it).
func (a *attachment) ownsLink(l netlink.Link) bool {
	alias := l.Attrs().Alias
	if alias == "" {
		return true
	}
	o, ok := tag.ParseAlias(alias)
	return ok && o == a.owner
}
