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
			ps.set.V4, ps.set.V6 = appendByFamily(ps.set.V4, ps.set.V6, pod.IPs)
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
		ns.V4, ns.V6 = appendPortElems(ns.V4, ns.V6, pod, pod.IPs, n, in)
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

// appendByFamily appends ips to v4 or v6 by family.
func appendByFamily(v4, v6, ips []netip.Addr) ([]netip.Addr, []netip.Addr) {
	for _, ip := range ips {
		if ip.Is4() {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	return v4, v6
}

// appendPortElems appends to v4 or v6, by family, the elements of named
// port n on pod at each of ips that in takes.
func appendPortElems(v4, v6 []PortElem, pod *Pod, ips []netip.Addr, n portName, in func(netip.Addr) bool) ([]PortElem, []PortElem) {
	for _, cp := range pod.Ports {
		if cp.Name != n.name || cp.Protocol != n.protocol {
			continue
		}
		for _, ip := range ips {
			if !in(ip) {
				continue
			}
			e := PortElem{ip, n.protocol, cp.Port}
			if ip.Is4() {
				v4 = append(v4, e)
			} else {
				v6 = append(v6, e)
			}
		}
	}
	return v4, v6
}
