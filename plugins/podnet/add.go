package main

import (
	"context"
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

func cmdAdd(ctx context.Context, args *skel.CmdArgs) (*cni.Result, error) {
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
	res, err := a.add(ctx, ipam, ns, int(fd.Fd()), &u)
	// The allocation may still be on its way to disk while the pod is
	// wired (in-process IPAM): the result goes out only once it is
	// durable, and the undo, which may release it, runs only after the
	// store is let go.
	if ferr := ipam.Finish(ctx); err == nil {
		err = ferr
	}
	if err != nil {
		return nil, withUndo(err, u.run())
	}
	return res, nil
}

// hostSide is what the host half of ADD hands on.
type hostSide struct {
	ips      []podIP // the IPAM's addresses, validated
	spec     *containerSpec
	gateways map[bool]netip.Addr // by "is IPv4"
	bridge   *bridgeInfo         // bridge mode only
}

// linked is what the first half of ADD hands on: the host end of the
// pod's link and the IPAM's result.
type linked struct {
	idx  int
	br   *netlink.Bridge // bridge mode only
	ipam *cni.Result
}

type ipamOutcome struct {
	res *cni.Result
	err error
}

// add is ADD after the checks: everything it creates is pushed on u. It
// runs in three steps, each with what the one before found: the address
// and the link, made at the same time; the host side, which needs the
// address; the pod's side, the masquerade entry and the host ports, made
// side by side. The policy handshake (admit) runs beside the last two,
// and the pod's interface comes up only after it. The in-process IPAM
// returns before its commit is on disk, and the rest is wired while it
// syncs; cmdAdd waits for it (ipamClient.Finish).
func (a *attachment) add(ctx context.Context, ipam ipamClient, ns *netns.NetNS, peerFd int, u *undo) (*cni.Result, error) {
	l, err := a.allocateAndLink(ctx, ipam, peerFd, u)
	if err != nil {
		return nil, err
	}
	// The policy handshake needs the addresses alone: asked now, it
	// overlaps the host side and most of the pod's. Its outcome is
	// waited for before the pod's end comes up (admit says why there).
	adm := a.startAdmission(ctx, l.ipam)
	h, err := a.addHost(l, u)
	if err != nil {
		adm.abandon()
		return nil, err
	}
	res := a.plannedResult(h, l.ipam)
	if err := a.addPod(ctx, ns, h, res, adm, u); err != nil {
		return nil, err
	}
	return res, nil
}

// allocateAndLink runs the IPAM's ADD and, meanwhile, creates the veth
// pair (in bridge mode also the bridge port): the pair depends on nothing
// the IPAM returns, its names and MACs being derived from the container
// ID and ifname.
func (a *attachment) allocateAndLink(ctx context.Context, ipam ipamClient, peerFd int, u *undo) (linked, error) {
	ipamDone := make(chan ipamOutcome, 1)
	go func() {
		res, err := ipam.Add(ctx)
		ipamDone <- ipamOutcome{res, err}
	}()
	var (
		l       linked
		linkErr error
	)
	if a.conf.Mode == modeRouted {
		l.idx, linkErr = a.createRoutedLink(peerFd, u)
	} else {
		l.idx, l.br, linkErr = a.createBridgeLink(peerFd, u)
	}
	if linkErr == nil {
		faultPoint(stepVeth, a.args.Netns)
	}
	out := <-ipamDone
	if out.err != nil {
		// The IPAM's own failure: nothing to release. The link, if made,
		// is undone.
		return linked{}, out.err
	}
	// Undone last: the address is released only after everything that
	// uses it is gone; and also when the verb's context has ended.
	u.pushFirst("IPAM ADD", func() error { return ipam.Del(context.WithoutCancel(ctx)) })
	if linkErr != nil {
		return linked{}, linkErr
	}
	faultPoint(stepIPAM, a.args.Netns)
	l.ipam = out.res
	return l, nil
}

// addHost checks the IPAM's addresses and makes the host side of the
// mode (addRoutedHost, addBridgeHost) and, side by side with it, the
// pod's source guard: both are in place before the pod's end comes up
// (addPod), so the pod never sends a frame unchecked.
func (a *attachment) addHost(l linked, u *undo) (hostSide, error) {
	ips, err := podIPs(l.ipam)
	if err != nil {
		return hostSide{}, err
	}
	v4, v6 := families(ips)
	if v6 && a.conf.MTU != 0 && a.conf.MTU < 1280 {
		return hostSide{}, confErr("mtu", "%d is below IPv6's minimum of 1280, and the pod has an IPv6 address", a.conf.MTU)
	}
	u.push("source guard", a.removeGuard)
	guardDone := make(chan error, 1)
	go func() { guardDone <- a.installGuard(addrsOf(ips)) }()
	var h hostSide
	if a.conf.Mode == modeRouted {
		h, err = a.addRoutedHost(l.idx, ips, v4, v6)
	} else {
		h, err = a.addBridgeHost(l.br, ips, v4, v6)
	}
	if gerr := <-guardDone; err == nil {
		err = gerr
	}
	if err != nil {
		return hostSide{}, err
	}
	faultPoint(stepHost, a.args.Netns)
	h.ips = ips
	return h, nil
}

// plannedResult adds the default route and the IPAM's routes to the
// pod's side and describes the attachment as ADD reports it. DNS is the
// configuration's, else the IPAM's.
func (a *attachment) plannedResult(h hostSide, ipamRes *cni.Result) *cni.Result {
	withDefault := a.conf.Mode == modeRouted || a.conf.DefaultGW
	h.spec.routes = append(h.spec.routes, plannedRoutes(h.gateways, ipamRes.Routes, withDefault)...)
	res := a.result(h.spec.addrs, h.gateways, h.spec.routes, h.bridge)
	if len(res.DNS.Nameservers) == 0 && len(res.DNS.Search) == 0 && res.DNS.Domain == "" {
		res.DNS = ipamRes.DNS
	}
	return res
}

// addPod makes the container's side, the masquerade entry and the host
// ports. They need nothing of one another, so they are made side by
// side. Their undo steps go on first, so that whatever part of them
// happened is undone.
func (a *attachment) addPod(ctx context.Context, ns *netns.NetNS, h hostSide, res *cni.Result, adm *admission, u *undo) error {
	pr, err := a.hostPortRequest(res)
	if err != nil {
		adm.abandon()
		return err
	}
	if a.conf.IPMasq {
		u.push("masquerade", a.removeMasq)
	}
	if pr != nil {
		u.push("host ports", func() error { return portmap.Del(pr) })
	}
	// The policy handshake's answer is waited for while the pod's side
	// is prepared (its sysctls and addresses, the interface still down)
	// and the masquerade and host-port entries are made: none of that
	// lets a packet through. Only bringing the interface up waits for
	// the answer (admit says why).
	admitted := make(chan bool, 1) // true: go on and bring the pod up
	containerDone := make(chan error, 1)
	go func() {
		err := ns.Do(func() error { return setupContainer(h.spec, admitted) })
		if err != nil {
			err = fmt.Errorf("configure %s in %s: %w", a.args.IfName, a.args.Netns, err)
		} else {
			faultPoint(stepContainer, a.args.Netns)
		}
		containerDone <- err
	}()
	masqDone := make(chan error, 1)
	go func() {
		err := a.addMasq(h.ips)
		if err == nil {
			faultPoint(stepMasq, a.args.Netns)
		}
		masqDone <- err
	}()
	var portsErr error
	if pr != nil {
		portsErr = portmap.Add(pr)
	}
	admitErr := a.admit(ctx, adm, h.ips, u)
	admitted <- admitErr == nil
	containerErr := <-containerDone
	if errors.Is(containerErr, errNotAdmitted) {
		containerErr = nil // admitErr says why
	}
	// In this order, so that the code is the first failure's.
	return errors.Join(admitErr, containerErr, <-masqDone, portsErr)
}

// errNotAdmitted stops setupContainer before the pod's interface comes
// up, when ADD fails in the policy handshake.
var errNotAdmitted = errors.New("the policy handshake failed: the interface stays down")

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
// link never waits for DAD), then addresses; then, once admitted says
// so (the policy handshake is over: true, go on; false, ADD fails),
// up, neighbours, routes.
func setupContainer(s *containerSpec, admitted <-chan bool) error {
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
	if !<-admitted {
		return errNotAdmitted
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
