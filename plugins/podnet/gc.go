package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/tag"
)

// cmdStatus reports the IPAM's status: podnet itself needs nothing that
// can be missing at run time.
func cmdStatus(ctx context.Context, args *skel.CmdArgs) error {
	c, err := parseConf(args)
	if err != nil {
		return err
	}
	ipam, err := newIPAM(c, args)
	if err != nil {
		return err
	}
	return ipam.Status(ctx)
}

// cmdGC removes, for this network, the host veths, source guards and
// masquerade entries (by their aliases and comments) of every
// attachment not in cni.dev/valid-attachments, then
// passes GC on to the IPAM. Host routes and neighbours go with their
// veth. A pn-named veth without an alias is left alone: nothing says
// which network it belongs to, and a DEL with its container ID removes
// it.
func cmdGC(ctx context.Context, args *skel.CmdArgs) error {
	c, err := parseConf(args)
	if err != nil {
		return err
	}
	hh, err := dataplane.NewHandle()
	if err != nil {
		return err
	}
	defer hh.Close()
	valid := map[tag.Owner]bool{}
	for _, va := range args.NetConf.ValidAttachments {
		valid[tag.Owner{Network: c.Name, ContainerID: va.ContainerID, IfName: va.IfName}] = true
	}
	var errs []error
	links, err := hh.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	var m *dataplane.Masq
	if c.IPMasq {
		if m, err = dataplane.NewMasq(); err != nil {
			return err
		}
		defer m.Close()
	}
	for _, l := range links {
		if !dataplane.IsHostVethName(l.Attrs().Name) {
			continue
		}
		o, ok := tag.ParseAlias(l.Attrs().Alias)
		if !ok || o.Network != c.Name || valid[o] {
			continue
		}
		fmt.Fprintf(args.Stderr, "podnet: GC: removing %s of container %s, interface %s\n", l.Attrs().Name, o.ContainerID, o.IfName)
		if err := dataplane.DeleteLink(hh, l.Attrs().Name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := gcGuards(c.Name, valid); err != nil {
		errs = append(errs, err)
	}
	if err := gcClosed(c.Name, valid); err != nil { // admit.go
		errs = append(errs, err)
	}
	if m != nil {
		if err := gcMasq(m, c.Name, valid); err != nil {
			errs = append(errs, err)
		}
	}
	if args.NetConf.Capabilities["portMappings"] {
		if err := gcHostPorts(c.Name, slices.Collect(maps.Keys(valid))); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// As in DEL: no release of addresses whose dataplane may remain.
		return errors.Join(errs...)
	}
	ipam, err := newIPAM(c, args)
	if err != nil {
		return err
	}
	return ipam.GC(ctx)
}

// gcMasq removes set elements whose owner is not a valid attachment,
// including elements without a readable owner.
func gcMasq(m *dataplane.Masq, network string, valid map[tag.Owner]bool) error {
	members, err := m.Members(network)
	if err != nil {
		return err
	}
	var stale = make([]netip.Addr, 0, len(members))
	for a, o := range members {
		if !valid[o] {
			stale = append(stale, a)
		}
	}
	return m.RemovePod(network, stale)
}

// gcGuards removes the source guards whose owner, of this network, is
// not a valid attachment.
func gcGuards(network string, valid map[tag.Owner]bool) error {
	gs, err := dataplane.NewGuards()
	if err != nil {
		return err
	}
	defer gs.Close()
	owners, err := gs.Owners()
	if err != nil {
		return err
	}
	var errs []error
	for hostIf, o := range owners {
		if o.Network == network && !valid[o] {
			errs = append(errs, gs.Remove(hostIf))
		}
	}
	return errors.Join(errs...)
}
