package policy

import (
	"maps"
	"net/netip"
	"slices"
)

// incState is what an IR keeps of its compile for WithPodAddrs: the
// selectors of its peer sets and named-port sets, the namespaces'
// labels, and the policy pods of the node (the only ones WithPodAddrs
// takes), copied so that the snapshot is not kept.
type incState struct {
	nsLabels map[string]map[string]string
	peers    map[string]*peerRef // selector peer sets by key (node peers left out)
	named    map[string]namedRef // named-port sets by key
	local    map[PodKey]*Pod     // the node's policy pods
}

// namedRef is what selects the members of a named-port set: the pods of
// peer (nil: every pod) with port.
type namedRef struct {
	peer *peerRef
	port portName
}

func (c *compiler) incremental(opts Options) *incState {
	inc := &incState{nsLabels: c.nsLabels, peers: make(map[string]*peerRef, len(c.peerSets)),
		named: c.namedRefs, local: map[PodKey]*Pod{}}
	for k, ps := range c.peerSets {
		if ps.ref.nodeSel == nil {
			inc.peers[k] = &ps.ref
		}
	}
	for i := range c.s.Pods {
		p := &c.s.Pods[i]
		if p.policyPod() && (opts.Node == "" || p.Node == opts.Node) {
			cp := *p
			inc.local[p.Key()] = &cp
		}
	}
	return inc
}

// WithPodAddrs returns the IR of the same snapshot in which pod key has
// addrs (unmapped, as Snapshot's are) instead of the addresses it had:
// what Compile of that snapshot returns, without compiling it again. It
// is the handshake's fast way: a pod's sandbox brings the addresses of a
// pod the IR already knows. held reports whether another pod of the
// snapshot has an address: one of the pod's old addresses that another
// pod has stays in the sets, which only Compile can tell. ok is false
// when it cannot tell: the IR was not made by Compile (or WithPodAddrs),
// the pod was not a policy pod of its snapshot (of the node, when
// Compile was for one), addrs is empty, or an old address is held (or
// held is nil); then only Compile can. ir is not modified.
func (ir *IR) WithPodAddrs(key PodKey, addrs []netip.Addr, held func(netip.Addr) bool) (out *IR, ok bool) {
	if ir.inc == nil || len(addrs) == 0 {
		return nil, false
	}
	pod := ir.inc.local[key]
	if pod == nil {
		return nil, false
	}
	for _, ip := range pod.IPs {
		if held == nil || held(ip) {
			return nil, false
		}
	}
	ips := sortedAddrs(slices.Clone(addrs))
	next := *ir
	if i, found := ir.podIndex(key); found {
		next.Pods = slices.Clone(ir.Pods)
		next.Pods[i].IPs = ips
	}
	next.PeerSets = ir.inc.peerSetsWith(ir.PeerSets, pod, ips)
	next.NamedPortSets = ir.inc.namedSetsWith(ir.NamedPortSets, pod, ips)
	inc := *ir.inc
	inc.local = maps.Clone(ir.inc.local)
	moved := *pod
	moved.IPs = ips
	inc.local[key] = &moved
	next.inc = &inc
	return &next, true
}

// PodRules returns the rules of pod key, nil when the IR has none: no
// policy isolates the pod and no ClusterNetworkPolicy rule applies to it.
func (ir *IR) PodRules(key PodKey) *PodRules {
	if i, found := ir.podIndex(key); found {
		return &ir.Pods[i]
	}
	return nil
}

func (ir *IR) podIndex(key PodKey) (int, bool) {
	return slices.BinarySearchFunc(ir.Pods, key, func(p PodRules, k PodKey) int { return p.Pod.Compare(k) })
}

// ChangedFrom reports whether ir, which WithPodAddrs made from base (or
// from an IR it made from base), has pods' rules or sets that base does
// not: false when the pods it was given addresses for are neither
// isolated nor any set's members. WithPodAddrs copies what it changes.
func (ir *IR) ChangedFrom(base *IR) bool {
	return !sameSlice(base.Pods, ir.Pods) || !sameSlice(base.PeerSets, ir.PeerSets) ||
		!sameSlice(base.NamedPortSets, ir.NamedPortSets)
}

// sameRules reports whether d and o hold the same rules, by identity:
// an IR is read-only, so the same slices hold the same rules (the fast
// answer of EqualRules).
func (d *Direction) sameRules(o *Direction) bool {
	return d.Isolated == o.Isolated && sameSlice(d.IsolatedBy, o.IsolatedBy) && sameSlice(d.Rules, o.Rules) &&
		sameSlice(d.Admin, o.Admin) && sameSlice(d.Baseline, o.Baseline)
}

// EqualRules reports whether d and o hold equal rules: the same slices
// (sameRules), or rules equal field by field, as two compiles of one
// cluster make them. A chain built from d's rules is the chain of o's.
func (d *Direction) EqualRules(o *Direction) bool {
	if d.sameRules(o) {
		return true
	}
	return d.Isolated == o.Isolated && slices.Equal(d.IsolatedBy, o.IsolatedBy) &&
		slices.EqualFunc(d.Rules, o.Rules, (*Rule).equal) &&
		slices.EqualFunc(d.Admin, o.Admin, (*TierRule).equal) &&
		slices.EqualFunc(d.Baseline, o.Baseline, (*TierRule).equal)
}

// equal compares every field of the rules (TestRuleEqualCoversFields
// keeps it so).
func (r *Rule) equal(o *Rule) bool {
	return r == o || (r.Policy == o.Policy && r.Index == o.Index && r.AllPeers == o.AllPeers &&
		r.AllPorts == o.AllPorts && r.PortSet == o.PortSet && slices.Equal(r.PeerSets, o.PeerSets) &&
		slices.Equal(r.CIDRSets, o.CIDRSets) && slices.Equal(r.NamedPortSets, o.NamedPortSets))
}

func (t *TierRule) equal(o *TierRule) bool {
	return t == o || (t.Ref == o.Ref && t.Rule.equal(&o.Rule))
}

func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// selects reports whether the selector peer p has pod among its members,
// as compiler.peerSet chooses them.
func (inc *incState) selects(p *peerRef, pod *Pod) bool {
	switch {
	case p.block != nil || p.nodeSel != nil:
		return false
	case p.nsSel == nil:
		if pod.Namespace != p.fixed {
			return false
		}
	default:
		l, known := inc.nsLabels[pod.Namespace]
		if !known || !p.nsSel.matches(l) {
			return false
		}
	}
	return p.podSel.matches(pod.Labels)
}

// peerSetsWith returns sets with ips added to those that select pod; sets
// itself when none does.
func (inc *incState) peerSetsWith(sets []PeerSet, pod *Pod, ips []netip.Addr) []PeerSet {
	var out []PeerSet
	for i := range sets {
		ref := inc.peers[sets[i].Key]
		if ref == nil || !inc.selects(ref, pod) {
			continue
		}
		if out == nil {
			out = slices.Clone(sets)
		}
		s := &out[i]
		v4, v6 := appendByFamily(without(s.V4, pod.IPs), without(s.V6, pod.IPs), ips)
		s.V4, s.V6 = sortedAddrs(v4), sortedAddrs(v6)
	}
	if out == nil {
		return sets
	}
	return out
}

// namedSetsWith returns sets with pod's elements added to those that have
// pod among their members, as compiler.namedSet chooses them; sets itself
// when none does.
func (inc *incState) namedSetsWith(sets []NamedPortSet, pod *Pod, ips []netip.Addr) []NamedPortSet {
	var out []NamedPortSet
	for i := range sets {
		ref, known := inc.named[sets[i].Key]
		if !known {
			continue
		}
		in := func(netip.Addr) bool { return true }
		switch p := ref.peer; {
		case p == nil:
		case p.block != nil:
			in = func(ip netip.Addr) bool { return inPrefixes(p.block.prefixes, ip) }
		case !inc.selects(p, pod):
			continue
		}
		v4, v6 := appendPortElems(nil, nil, pod, ips, ref.port, in)
		if len(v4)+len(v6) == 0 && !hasAddrOf(sets[i], pod.IPs) {
			continue
		}
		if out == nil {
			out = slices.Clone(sets)
		}
		s := &out[i]
		s.V4, s.V6 = mergeElems(s.V4, v4, pod.IPs), mergeElems(s.V6, v6, pod.IPs)
	}
	if out == nil {
		return sets
	}
	return out
}

// mergeElems returns a new sorted, compacted slice of old without the
// elements of the addresses gone, and add.
func mergeElems(old, add []PortElem, gone []netip.Addr) []PortElem {
	var m []PortElem
	for _, e := range old {
		if !slices.Contains(gone, e.Addr) {
			m = append(m, e)
		}
	}
	m = append(m, add...)
	sortElems(m)
	return slices.Compact(m)
}

// hasAddrOf reports whether s has an element of one of addrs.
func hasAddrOf(s NamedPortSet, addrs []netip.Addr) bool {
	for _, e := range s.V4 {
		if slices.Contains(addrs, e.Addr) {
			return true
		}
	}
	for _, e := range s.V6 {
		if slices.Contains(addrs, e.Addr) {
			return true
		}
	}
	return false
}

// without returns a copy of a without the addresses of gone.
func without(a, gone []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, ip := range a {
		if !slices.Contains(gone, ip) {
			out = append(out, ip)
		}
	}
	return out
}
