package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/portmap"
)

// Steps of ADD at which the podnetfault build can kill the plugin; see
// fault_on.go. Each names what has just been done.
const (
	stepVeth      = "veth" // the pair (bridge mode: and the port), while the IPAM runs
	stepIPAM      = "ipam"
	stepHost      = "host"
	stepContainer = "container"
	stepMasq      = "masq"

	// DEL: the nftables removals are queued, not yet committed.
	stepDelQueued = "del-queued"
)

var addSteps = []string{stepVeth, stepIPAM, stepHost, stepContainer, stepMasq}

func cmdAdd(args *skel.CmdArgs) (*cni.Result, error) {
	c, err := parseConf(args)
	if err != nil {
		return nil, err
	}
	a, err := newAttachment(c, args)
	if err != nil {
		return nil, err
	}
	defer a.close()

	// A repeated ADD: the attachment is complete, and ADD returns it as
	// it is, without calling the IPAM (whose second ADD for the same
	// container may well fail, as host-local's does).
	if res, err := a.existing(); err != nil || res != nil {
		return res, err
	}
	ipam, err := newIPAM(c, args)
	if err != nil {
		return nil, err
	}
	// Before the IPAM: no address is taken for a namespace that is gone.
	ns, fd, err := openNetNS(args.Netns)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	defer fd.Close()

	var u undo
	res, err := a.add(ipam, ns, int(fd.Fd()), &u)
	// The allocation may still be on its way to disk while the pod is
	// wired (in-process IPAM): the result goes out only once it is
	// durable, and the undo, which may release it, runs only after the
	// store is let go.
	if ferr := ipam.Finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return nil, withUndo(err, u.run())
	}
	return res, nil
}

// hostSide is what the mode-specific host half of ADD hands on.
type hostSide struct {
	spec     *containerSpec
	gateways map[bool]netip.Addr // by "is IPv4"
	bridge   *bridgeInfo         // bridge mode only
}

type ipamOutcome struct {
	res *cni.Result
	err error
}

// add is ADD after the checks: everything it creates is pushed on u.
//
// The veth pair (and in bridge mode the bridge port) depends on nothing
// the IPAM returns, its names and MACs being derived from the container
// ID and ifname. So it is made while the IPAM allocates. The in-process
// IPAM returns before its commit is on disk, and the rest is wired while
// it syncs; cmdAdd waits for it (ipamClient.Finish).
func (a *attachment) add(ipam ipamClient, ns *netns.NetNS, peerFd int, u *undo) (*cni.Result, error) {
	ipamDone := make(chan ipamOutcome, 1)
	go func() {
		res, err := ipam.Add()
		ipamDone <- ipamOutcome{res, err}
	}()
	var (
		idx     int
		br      *netlink.Bridge
		linkErr error
	)
	if a.conf.Mode == modeRouted {
		idx, linkErr = a.createRoutedLink(peerFd, u)
	} else {
		idx, br, linkErr = a.createBridgeLink(peerFd, u)
	}
	if linkErr == nil {
		faultPoint(stepVeth, a.args.Netns)
	}
	out := <-ipamDone
	if out.err != nil {
		// The IPAM's own failure: nothing to release. The link, if made,
		// is undone.
		return nil, out.err
	}
	// Undone last: the address is released only after everything that
	// uses it is gone.
	u.pushFirst("IPAM ADD", ipam.Del)
	if linkErr != nil {
		return nil, linkErr
	}
	faultPoint(stepIPAM, a.args.Netns)

	ipamRes := out.res
	ips, err := podIPs(ipamRes)
	if err != nil {
		return nil, err
	}
	v4, v6 := families(ips)
	if v6 && a.conf.MTU != 0 && a.conf.MTU < 1280 {
		return nil, confErr("mtu", "%d is below IPv6's minimum of 1280, and the pod has an IPv6 address", a.conf.MTU)
	}
	var h hostSide
	if a.conf.Mode == modeRouted {
		h, err = a.addRoutedHost(idx, ips, v4, v6)
	} else {
		h, err = a.addBridgeHost(br, ips, v4, v6)
	}
	if err != nil {
		return nil, err
	}
	faultPoint(stepHost, a.args.Netns)

	spec := h.spec
	withDefault := a.conf.Mode == modeRouted || a.conf.DefaultGW
	spec.routes = append(spec.routes, plannedRoutes(h.gateways, ipamRes.Routes, withDefault)...)
	res := a.result(spec.addrs, h.gateways, spec.routes, h.bridge)
	if len(res.DNS.Nameservers) == 0 && len(res.DNS.Search) == 0 && res.DNS.Domain == "" {
		res.DNS = ipamRes.DNS
	}
	pr, err := a.hostPortRequest(res)
	if err != nil {
		return nil, err
	}

	// The container's side, the masquerade entry and the host ports need
	// nothing of one another: they are made side by side. Their undo
	// steps go on first, so that whatever part of them happened is undone.
	if a.conf.IPMasq {
		u.push("masquerade", a.removeMasq)
	}
	if pr != nil {
		u.push("host ports", func() error { return portmap.Del(pr) })
	}
	containerDone := make(chan error, 1)
	go func() {
		err := ns.Do(func() error { return setupContainer(spec) })
		if err != nil {
			err = fmt.Errorf("configure %s in %s: %w", a.args.IfName, a.args.Netns, err)
		} else {
			faultPoint(stepContainer, a.args.Netns)
		}
		containerDone <- err
	}()
	masqDone := make(chan error, 1)
	go func() {
		err := a.addMasq(ips)
		if err == nil {
			faultPoint(stepMasq, a.args.Netns)
		}
		masqDone <- err
	}()
	var portsErr error
	if pr != nil {
		portsErr = portmap.Add(pr)
	}
	// In this order, so that the code is the first failure's.
	if err := errors.Join(<-containerDone, <-masqDone, portsErr); err != nil {
		return nil, err
	}
	return res, nil
}

// addMasq puts the pod's addresses in the network's masquerade sets.
func (a *attachment) addMasq(ips []podIP) error {
	if !a.conf.IPMasq {
		return nil
	}
	n, err := a.conf.masqNetwork(ips)
	if err != nil {
		return err
	}
	m, err := dataplane.NewMasq()
	if err != nil {
		return err
	}
	defer m.Close()
	return m.AddPod(n, a.owner, addrsOf(ips))
}

// openNetNS opens the container's namespace twice over: as a NetNS to
// run code in, and as a plain descriptor to create the veth peer in.
// Both keep the namespace alive until closed, even if the runtime
// removes it meanwhile.
func openNetNS(path string) (*netns.NetNS, *os.File, error) {
	ns, err := netns.Open(path)
	if err != nil {
		return nil, nil, cni.Errorf(cni.CodeUnknownContainer, "CNI_NETNS: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		ns.Close()
		return nil, nil, cni.Errorf(cni.CodeUnknownContainer, "CNI_NETNS: %v", err)
	}
	return ns, f, nil
}

// setupContainer runs inside the pod's namespace: sysctls first (so the
// link never waits for DAD), then addresses, up, neighbours, routes.
func setupContainer(s *containerSpec) error {
	h, err := dataplane.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	if err := dataplane.WriteSysctls(s.sysctls); err != nil {
		return err
	}
	link, err := dataplane.LinkByName(h, s.ifName)
	if err != nil {
		return err
	}
	if link == nil {
		return cni.Errorf(cni.CodeUnknownContainer, "%s vanished from the container after its creation", s.ifName)
	}
	idx := link.Attrs().Index
	for _, p := range s.addrs {
		if err := dataplane.AddAddr(h, idx, p); err != nil {
			return err
		}
	}
	if err := dataplane.SetUp(h, idx); err != nil {
		return err
	}
	for _, n := range s.neighs {
		if err := dataplane.SetNeigh(h, idx, n.ip, n.mac); err != nil {
			return err
		}
	}
	for _, r := range s.routes {
		if err := dataplane.AddRoute(h, idx, r); err != nil {
			return err
		}
	}
	return nil
}

// result describes the attachment. Interfaces: the bridge (bridge mode),
// the host veth, the container's interface; addresses and routes belong
// to the last.
func (a *attachment) result(addrs []netip.Prefix, gws map[bool]netip.Addr, routes []dataplane.LinkRoute, br *bridgeInfo) *cni.Result {
	res := &cni.Result{CNIVersion: cni.CurrentVersion}
	if br != nil {
		res.Interfaces = append(res.Interfaces, &cni.Interface{Name: br.name, Mac: br.mac.String()})
	}
	res.Interfaces = append(res.Interfaces,
		&cni.Interface{Name: a.hostName, Mac: a.hostMAC.String()},
		&cni.Interface{Name: a.args.IfName, Mac: a.ctrMAC.String(), Mtu: a.conf.MTU, Sandbox: a.args.Netns},
	)
	ctr := len(res.Interfaces) - 1
	for _, p := range addrs {
		res.IPs = append(res.IPs, &cni.IPConfig{Interface: cni.IntPtr(ctr), Address: p, Gateway: gws[p.Addr().Is4()]})
	}
	res.Routes = resultRoutes(routes)
	if a.conf.DNS != nil {
		res.DNS = *a.conf.DNS
	}
	return res
}
