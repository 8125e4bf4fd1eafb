package policy

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
)

// peerSet returns the set of a selector peer, computing its members the
// first time: a namespaceSelector matches only namespaces the snapshot
// has (their labels are unknown otherwise); pods are the ones policy
// applies to (not hostNetwork).
func (c *compiler) peerSet(p *peerRef) *peerSet {
	if ps, ok := c.peerSets[p.key]; ok {
		return ps
	}
	ps := &peerSet{set: PeerSet{Key: p.key}, ref: *p}
	if p.nodeSel != nil {
		for _, n := range c.s.Nodes {
			if !p.nodeSel.matches(n.Labels) {
				continue
			}
			for _, ip := range n.IPs {
				if ip = ip.Unmap(); ip.Is4() {
					ps.set.V4 = append(ps.set.V4, ip)
				} else {
					ps.set.V6 = append(ps.set.V6, ip)
				}
			}
		}
		ps.set.V4 = sortedAddrs(ps.set.V4)
		ps.set.V6 = sortedAddrs(ps.set.V6)
		c.peerSets[p.key] = ps
		return ps
	}
	addNs := func(ns string) {
		for _, i := range c.candidates(ns, &p.podSel) {
			pod := &c.s.Pods[i]
			if !p.podSel.matches(pod.Labels) {
				continue
			}
			ps.pods = append(ps.pods, i)
			for _, ip := range pod.IPs {
				if ip.Is4() {
					ps.set.V4 = append(ps.set.V4, ip)
				} else {
					ps.set.V6 = append(ps.set.V6, ip)
				}
			}
		}
	}
	if p.nsSel == nil {
		addNs(p.fixed)
	} else {
		for _, ns := range c.nsNames {
			if p.nsSel.matches(c.nsLabels[ns]) {
				addNs(ns)
			}
		}
	}
	ps.set.V4 = sortedAddrs(ps.set.V4)
	ps.set.V6 = sortedAddrs(ps.set.V6)
	c.peerSets[p.key] = ps
	return ps
}

// namedSet returns the key of the set of destination . protocol . port
// for named port n on the pods of peer p (nil: every pod).
func (c *compiler) namedSet(p *peerRef, n portName) string {
	peerKey := "*"
	if p != nil {
		peerKey = p.key
	}
	key := peerKey + " port " + strings.ToLower(n.protocol.String()) + "/" + n.name
	if _, ok := c.namedSets[key]; ok {
		return key
	}
	ns := &NamedPortSet{Key: key}
	c.namedRefs[key] = namedRef{peer: p, port: n}
	add := func(i int, in func(netip.Addr) bool) {
		pod := &c.s.Pods[i]
		for _, cp := range pod.Ports {
			if cp.Name != n.name || cp.Protocol != n.protocol {
				continue
			}
			for _, ip := range pod.IPs {
				if !in(ip) {
					continue
				}
				e := PortElem{ip, n.protocol, cp.Port}
				if ip.Is4() {
					ns.V4 = append(ns.V4, e)
				} else {
					ns.V6 = append(ns.V6, e)
				}
			}
		}
	}
	everyAddr := func(netip.Addr) bool { return true }
	switch {
	case p == nil:
		for _, i := range c.namedPorts[n] {
			add(i, everyAddr)
		}
	case p.block != nil:
		for _, i := range c.namedPorts[n] {
			add(i, func(ip netip.Addr) bool { return inPrefixes(p.block.prefixes, ip) })
		}
	default:
		for _, i := range c.peerSet(p).pods {
			add(i, everyAddr)
		}
	}
	sortElems(ns.V4)
	sortElems(ns.V6)
	ns.V4 = slices.Compact(ns.V4)
	ns.V6 = slices.Compact(ns.V6)
	c.namedSets[key] = ns
	return key
}

func inPrefixes(ps []netip.Prefix, ip netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func sortedAddrs(a []netip.Addr) []netip.Addr {
	slices.SortFunc(a, netip.Addr.Compare)
	return slices.Compact(a)
}

func sortElems(e []PortElem) {
	slices.SortFunc(e, func(a, b PortElem) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
}
