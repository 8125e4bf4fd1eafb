package e2enet

import (
	"errors"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/route"
)

// RouteTo reports whether n has a route of its agent's to dst.
func (n *Node) RouteTo(dst netip.Prefix) (bool, error) {
	owned, err := route.OwnedRoutes(n.NS.Handle)
	if err != nil {
		return false, err
	}
	_, ok := owned[dst]
	return ok, nil
}

// WaitRoutes waits until every node in on has (want) or lacks (!want) a
// route of its agent's to every prefix of dsts, the pod prefixes of the
// node called of, and returns how long it took.
func (c *Cluster) WaitRoutes(of string, dsts []netip.Prefix, on []*Node, want bool, timeout time.Duration) time.Duration {
	t := c.T
	t.Helper()
	if len(dsts) == 0 {
		t.Fatalf("node %s has no pod prefixes to route", of)
	}
	start := time.Now()
	for {
		done := true
		for _, n := range on {
			for _, d := range dsts {
				ok, err := n.RouteTo(d)
				if err != nil {
					t.Fatal(err)
				}
				if ok != want {
					done = false
				}
			}
		}
		if done {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("routes to %s's %v on %d nodes: want present=%v, not within %v", of, dsts, len(on), want, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// CheckTransport: from's routes to dsts, pod prefixes of to, go the way
// mode (host-gw or vxlan) says: via to's underlay address on eth0 (for
// IPv6 via toLinkLocal6, its link-local address there), or over the
// VXLAN device to its VTEP.
func (c *Cluster) CheckTransport(from, to *Node, dsts []netip.Prefix, mode route.Mode, toLinkLocal6 netip.Addr) {
	t := c.T
	t.Helper()
	owned, err := route.OwnedRoutes(from.NS.Handle)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range dsts {
		r, ok := owned[b]
		if !ok {
			t.Fatalf("%s has no route to %s's %s", from.Name, to.Name, b)
		}
		dev, err := from.NS.Handle.LinkByIndex(r.LinkIndex)
		if err != nil {
			t.Fatal(err)
		}
		wantDev, wantVia := "eth0", to.Addr.String()
		switch {
		case mode == route.ModeVXLAN && b.Addr().Is6():
			wantDev, wantVia = route.VXLANDevice, route.VTEPLinkLocal6(clusterstate.VTEPMAC(to.Name)).String()
		case mode == route.ModeVXLAN:
			wantDev = route.VXLANDevice
		case b.Addr().Is6():
			wantVia = toLinkLocal6.String()
		}
		if dev.Attrs().Name != wantDev || r.Gw.String() != wantVia {
			t.Fatalf("%s's route to %s: via %s dev %s, want via %s dev %s", from.Name, r.Dst, r.Gw, dev.Attrs().Name, wantVia, wantDev)
		}
	}
}

// CheckPodsGone, once every pod is deleted: n has no veth left but its
// underlay link, and no host route to an address a pod of the cluster had.
func (c *Cluster) CheckPodsGone(n *Node) {
	t := c.T
	t.Helper()
	links, err := n.NS.Handle.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Type() == "veth" && l.Attrs().Name != "eth0" {
			t.Errorf("node %s after DEL of every pod: veth %s left", n.Name, l.Attrs().Name)
		}
	}
	pods := map[netip.Prefix]string{}
	for _, p := range c.AllPods() {
		for _, a := range p.Addrs() {
			pods[netip.PrefixFrom(a, a.BitLen())] = p.ID
		}
	}
	routes, err := n.NS.Handle.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		a, _ := netip.AddrFromSlice(r.Dst.IP)
		if id, ok := pods[netip.PrefixFrom(a.Unmap(), ones)]; ok {
			t.Errorf("node %s after DEL of every pod: route to %s's address left: %s", n.Name, id, r)
		}
	}
}

// Without returns nodes but n.
func Without(nodes []*Node, n *Node) []*Node {
	var out []*Node
	for _, m := range nodes {
		if m != n {
			out = append(out, m)
		}
	}
	return out
}

// VXLANPeer reports whether n's VXLAN device holds a neighbour or
// forwarding entry for m's VTEP (its MAC): what n keeps of m besides
// routes. A node without the device has none.
func (n *Node) VXLANPeer(m *Node) (bool, error) {
	l, err := n.NS.Handle.LinkByName(route.VXLANDevice)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return false, nil
		}
		return false, err
	}
	mac := clusterstate.VTEPMAC(m.Name).String()
	for _, family := range []int{unix.AF_INET, unix.AF_INET6, unix.AF_BRIDGE} {
		neighs, err := n.NS.Handle.NeighList(l.Attrs().Index, family)
		if err != nil {
			return false, err
		}
		for _, e := range neighs {
			if e.HardwareAddr.String() == mac {
				return true, nil
			}
		}
	}
	return false, nil
}

// WaitVXLANPeer waits until every node in on holds (want) or lacks
// (!want) VXLAN entries for of's VTEP, and returns how long it took.
func (c *Cluster) WaitVXLANPeer(of *Node, on []*Node, want bool, timeout time.Duration) time.Duration {
	t := c.T
	t.Helper()
	start := time.Now()
	for {
		done := true
		for _, n := range on {
			ok, err := n.VXLANPeer(of)
			if err != nil {
				t.Fatal(err)
			}
			done = done && ok == want
		}
		if done {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("VXLAN entries for %s's VTEP on %d nodes: want present=%v, not within %v", of.Name, len(on), want, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
