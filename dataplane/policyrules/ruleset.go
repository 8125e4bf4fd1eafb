package policyrules

import (
	"cmp"
	"fmt"
	"net/netip"

	"github.com/podnet/podnet/policy"
)

// ruleset is a node's policy as nftables objects, before any netlink: the
// named sets, the per-pod chains and the dispatch maps. It is what Apply
// diffs, so everything in it is canonical (sorted, merged).
type ruleset struct {
	sets   map[string]*set
	chains map[string]*chain
	// maps holds the four dispatch maps (in4, in6, out4, out6): pod
	// address -> the name of the chain to jump to.
	maps map[string]map[netip.Addr]string
	// folds are the fold maps of NetworkPolicy sections (fold.go), by
	// name.
	folds map[string]*fold
}

type setKind uint8

const (
	kindAddr4  setKind = iota + 1 // ipv4_addr
	kindAddr6                     // ipv6_addr
	kindCIDR4                     // ipv4_addr, interval
	kindCIDR6                     // ipv6_addr, interval
	kindPorts                     // inet_proto . inet_service, interval
	kindNamed4                    // ipv4_addr . inet_proto . inet_service
	kindNamed6                    // ipv6_addr . inet_proto . inet_service
)

func (k setKind) interval() bool { return k == kindCIDR4 || k == kindCIDR6 || k == kindPorts }

// set is a named set. Elements are sorted and, for intervals, merged.
type set struct {
	name  string
	kind  setKind
	key   string // what it holds, as the IR keys it: the set's comment
	elems []element
}

// element is one element of any kind of set: an address; an interval of
// addresses [addr, end) (end invalid: up to the last address); a
// protocol with ports first..last; an address, protocol and port
// (first).
type element struct {
	addr        netip.Addr
	end         netip.Addr
	proto       policy.Protocol
	first, last uint16
}

func compareElements(a, b element) int {
	return cmp.Or(a.addr.Compare(b.addr), a.end.Compare(b.end), cmp.Compare(a.proto, b.proto),
		cmp.Compare(a.first, b.first), cmp.Compare(a.last, b.last))
}

// chain is the chain of one pod in one direction, or the tail of one
// (the rules after the Admin tier, for its Pass rules to go to).
type chain struct {
	name  string
	pod   policy.PodKey
	dir   Direction
	rules []rule
}

type ruleKind uint8

const (
	ruleSelf    ruleKind = iota + 1 // the remote end is the pod itself: return
	ruleAllow                       // remote in peer, protocol . port in ports: counter return
	ruleNamed                       // destination . protocol . port in named: counter return
	ruleDeny                        // counter drop
	ruleLog                         // limit name deny-log log group N prefix "...": the deny log, before ruleDeny
	ruleGoto                        // goto target: the end of the Admin tier, on to the tail chain
	ruleFlowLog                     // limit name flow-log log group N prefix "podnet-flow <id>": before ruleDeny
	ruleFold                        // remote address vmap @fold (peer): jump to the address's class chain
)

// verdict is what a matching ruleAllow or ruleNamed rule does.
type verdict uint8

const (
	verdictReturn  verdict = iota // counter return: this side allows
	verdictDrop                   // counter drop: a ClusterNetworkPolicy Deny
	verdictGoto                   // counter goto target: an Admin tier Pass
	verdictLog                    // the deny log's record, before the same match's drop
	verdictFlowLog                // the flow log's record, before the same match's drop
	verdictAccept                 // counter accept: a class chain's rule (fold.go)
)

// rule is one rule of a pod chain. The remote address is the source for
// ingress and the destination for egress. Comparable, so that chains
// compare with slices.Equal.
type rule struct {
	kind   ruleKind
	family uint8      // 4, 6, or 0 when the rule reads no address
	addr   netip.Addr // ruleSelf
	peer   string     // set of the remote address; "" for every address
	ports  string     // set of protocol . port; "" for every one
	named  string     // ruleNamed
	// policy and index name the IR rule (ruleAllow, ruleNamed), for
	// counters.
	policy string
	index  int
	// tier and action are a ClusterNetworkPolicy rule's (tier 0: a
	// NetworkPolicy rule, which allows); verdict what a match does, target
	// the chain of verdictGoto and ruleGoto.
	tier    policy.Tier
	action  policy.Action
	verdict verdict
	target  string
	// flowID is the rule's flow id (WithFlowLabels): the label a
	// returning rule sets, the prefix a flow log rule writes; 0 without.
	flowID uint64
}

// comment is the rule's user data: what Counters reads back, and what
// `nft list ruleset` shows.
func (r rule) comment(c *chain) string {
	switch r.kind {
	case ruleSelf:
		return "self " + c.pod.String()
	case ruleDeny:
		return fmt.Sprintf("deny %s %s", c.pod, c.dir)
	case ruleLog:
		return fmt.Sprintf("log %s %s", c.pod, c.dir)
	case ruleFlowLog:
		return fmt.Sprintf("flow %s %s", c.pod, c.dir)
	case ruleGoto:
		return fmt.Sprintf("tail %s %s", c.pod, c.dir)
	case ruleFold:
		return fmt.Sprintf("fold %s %s", c.pod, c.dir)
	}
	if r.tier != 0 {
		what := "cnp"
		switch r.verdict {
		case verdictLog:
			what = "cnp-log"
		case verdictFlowLog:
			what = "cnp-flow"
		}
		return fmt.Sprintf("%s %s %s %s %s %d", what, r.tier, r.action, r.policy, c.dir, r.index)
	}
	return fmt.Sprintf("allow %s %s %d", r.policy, c.dir, r.index)
}

// build computes the ruleset of node's pods in ir, each pod chain ending
// with the deny log's rule when denyLog. Pods of other nodes are left
// out: their own nodes enforce their policy.
func build(ir *policy.IR, node string, denyLog bool) *ruleset {
	return buildWith(ir, node, buildOptions{denyLog: denyLog})
}

// buildOptions are what the Renderer's options add to the rules.
type buildOptions struct {
	denyLog bool
	// flow: the flow labels and the flow log (WithFlowLabels).
	flow bool
	// fold: when to fold NetworkPolicy rules (fold.go); zero fields
	// take the defaults.
	fold foldLimits
	// memo, when set, are the chains of the last build to take again;
	// nextMemo, when set, gets this build's (chainmemo.go).
	memo, nextMemo chainMemo
}

func buildWith(ir *policy.IR, node string, o buildOptions) *ruleset {
	rs := emptyRuleset()
	b := builder{ir: ir, rs: rs, denyLog: o.denyLog, flow: o.flow, fold: o.fold.orDefaults(), memo: o.memo, nextMemo: o.nextMemo}
	b.index()
	// Both node sets exist always: the base chains refer to them.
	node4 := rs.addrSet(setNode4, kindAddr4, "node "+node)
	node6 := rs.addrSet(setNode6, kindAddr6, "node "+node)
	for _, n := range ir.Nodes {
		if n.Name != node {
			continue
		}
		for _, ip := range n.IPs {
			if ip = ip.Unmap(); ip.Is4() {
				node4.elems = append(node4.elems, element{addr: ip})
			} else {
				node6.elems = append(node6.elems, element{addr: ip})
			}
		}
	}
	forChains(ir, node, func(p *policy.PodRules, d Direction, dir *policy.Direction) {
		c, tail := b.podChain(p, d, dir)
		rs.chains[c.name] = c
		if tail != nil {
			rs.chains[tail.name] = tail
		}
		for _, ip := range p.IPs {
			ip = ip.Unmap()
			rs.maps[dispatchMap(d, ip)][ip] = c.name
		}
	})
	b.fillPeerSets()
	for _, s := range rs.sets {
		s.canonical()
	}
	return rs
}

// forChains calls fn for each pod of node in ir and each direction in
// which the pod has a chain (an address, and rules in scope): the
// renderer's walk, and FlowIndex's over the same chains.
func forChains(ir *policy.IR, node string, fn func(p *policy.PodRules, d Direction, dir *policy.Direction)) {
	for i := range ir.Pods {
		p := &ir.Pods[i]
		if p.Node != node || len(p.IPs) == 0 {
			continue
		}
		for _, d := range []Direction{Ingress, Egress} {
			dir := &p.Ingress
			if d == Egress {
				dir = &p.Egress
			}
			if dir.InScope() {
				fn(p, d, dir)
			}
		}
	}
}

func dispatchMap(d Direction, ip netip.Addr) string {
	switch {
	case d == Ingress && ip.Is4():
		return mapIn4
	case d == Ingress:
		return mapIn6
	case ip.Is4():
		return mapOut4
	}
	return mapOut6
}

func (rs *ruleset) addrSet(name string, kind setKind, key string) *set {
	s := rs.sets[name]
	if s == nil {
		s = &set{name: name, kind: kind, key: key}
		rs.sets[name] = s
	}
	return s
}

// builder renders the IR's sets on first use, so that only the sets the
// node's rules refer to are written.
type builder struct {
	ir      *policy.IR
	rs      *ruleset
	denyLog bool
	flow    bool
	peers   map[string]*policy.PeerSet
	cidrs   map[string]*policy.CIDRSet
	ports   map[string]*policy.PortSet
	named   map[string]*policy.NamedPortSet
	// peerRefs are the peer sets rules named, filled by fillPeerSets
	// with those a chain still refers to after folding.
	peerRefs map[string]peerRef
	// blocks are the ipBlock sets rules named (name -> IR key, family),
	// blockPoints their addresses when folding may take them (fold.go).
	blocks      map[string]peerRef
	blockPoints map[string][]netip.Addr
	fold        foldLimits
	// folded counts the elements of the fold maps made so far, against
	// fold.budget.
	folded int
	// memo is the chains of the last build, nextMemo this build's
	// (chainmemo.go); refs, while a chain is built, the sets it names,
	// foldTried whether it tried folding.
	memo, nextMemo chainMemo
	refs           *[]setRef
	foldTried      bool
}

func (b *builder) index() {
	b.peerRefs = map[string]peerRef{}
	b.blocks = map[string]peerRef{}
	b.blockPoints = map[string][]netip.Addr{}
	b.peers = make(map[string]*policy.PeerSet, len(b.ir.PeerSets))
	for i := range b.ir.PeerSets {
		b.peers[b.ir.PeerSets[i].Key] = &b.ir.PeerSets[i]
	}
	b.cidrs = make(map[string]*policy.CIDRSet, len(b.ir.CIDRSets))
	for i := range b.ir.CIDRSets {
		b.cidrs[b.ir.CIDRSets[i].Key] = &b.ir.CIDRSets[i]
	}
	b.ports = make(map[string]*policy.PortSet, len(b.ir.PortSets))
	for i := range b.ir.PortSets {
		b.ports[b.ir.PortSets[i].Key] = &b.ir.PortSets[i]
	}
	b.named = make(map[string]*policy.NamedPortSet, len(b.ir.NamedPortSets))
	for i := range b.ir.NamedPortSets {
		b.named[b.ir.NamedPortSets[i].Key] = &b.ir.NamedPortSets[i]
	}
}

// chain renders one pod's direction: the pod's own addresses, the Admin
// tier, then NetworkPolicy's rules and drop if the direction is isolated,
// else the Baseline tier (and, when nothing matches, the end of the
// chain: this side allows). When an Admin rule passes, what follows the
// Admin tier is a chain of its own, tail, for the Pass rules to go to.
func (b *builder) chain(p *policy.PodRules, d Direction, dir *policy.Direction) (c, tail *chain) {
	c = &chain{name: podChainName(p.Pod, d), pod: p.Pod, dir: d}
	for _, ip := range p.IPs {
		ip = ip.Unmap()
		c.rules = append(c.rules, rule{kind: ruleSelf, family: family(ip), addr: ip})
	}
	rest := c
	for _, r := range dir.Admin {
		if r.Ref.Action == policy.Pass {
			tail = &chain{name: tailChainName(p.Pod, d), pod: p.Pod, dir: d}
			rest = tail
			break
		}
	}
	passTo := ""
	if tail != nil {
		passTo = tail.name
	}
	for _, r := range dir.Admin {
		c.rules = append(c.rules, b.tierRules(r, passTo, d)...)
	}
	if tail != nil {
		c.rules = append(c.rules, rule{kind: ruleGoto, target: tail.name})
	}
	if !dir.Isolated {
		for _, r := range dir.Baseline {
			rest.rules = append(rest.rules, b.tierRules(r, "", d)...)
		}
		return c, tail
	}
	rest.rules = append(rest.rules, b.npSection(dir.Rules, d)...)
	if b.denyLog {
		rest.rules = append(rest.rules, rule{kind: ruleLog})
	}
	if b.flow {
		rest.rules = append(rest.rules, rule{kind: ruleFlowLog, flowID: dropID(p.Pod, d, dir.IsolatedBy)})
	}
	rest.rules = append(rest.rules, rule{kind: ruleDeny})
	return c, tail
}

// tierRules renders a ClusterNetworkPolicy rule of direction d: what it
// matches as an allow rule's match, and its action as the verdict: Accept
// returns (this side allows), Deny drops (after the deny log's and the
// flow log's records), Pass goes to passTo (the Admin tier's tail) or, in
// the Baseline tier, returns: the default allows. With the flow labels,
// every rule that returns or logs carries the rule's id.
func (b *builder) tierRules(r *policy.TierRule, passTo string, d Direction) []rule {
	var out []rule
	var id uint64
	if b.flow && (r.Ref.Action != policy.Pass || passTo == "") {
		id = ruleID(cnpRule(r.Ref, d))
	}
	for _, x := range b.rules(&r.Rule) {
		x.tier, x.action, x.flowID = r.Ref.Tier, r.Ref.Action, id
		switch r.Ref.Action {
		case policy.Deny:
			if b.denyLog {
				l := x
				l.verdict, l.flowID = verdictLog, 0
				out = append(out, l)
			}
			if b.flow {
				l := x
				l.verdict = verdictFlowLog
				out = append(out, l)
			}
			x.verdict, x.flowID = verdictDrop, 0
		case policy.Pass:
			if passTo != "" {
				x.verdict, x.target = verdictGoto, passTo
			}
		}
		out = append(out, x)
	}
	return out
}

func family(ip netip.Addr) uint8 {
	if ip.Is4() {
		return 4
	}
	return 6
}

// rules renders one IR rule: one nftables rule per peer set and family
// (a rule is a conjunction; its peers are a disjunction), plus one per
// named-port set and family.
func (b *builder) rules(r *policy.Rule) []rule {
	var out []rule
	base := rule{kind: ruleAllow, policy: r.Policy, index: r.Index}
	if !r.AllPorts && r.PortSet == "" {
		// Only named ports: the peer part matches nothing.
	} else {
		if !r.AllPorts {
			base.ports = b.portSet(r.PortSet)
		}
		if r.AllPeers {
			out = append(out, base)
		}
		for _, k := range r.PeerSets {
			for _, fam := range []uint8{4, 6} {
				x := base
				x.family, x.peer = fam, b.peerSet(k, fam)
				out = append(out, x)
			}
		}
		for _, k := range r.CIDRSets {
			for _, fam := range []uint8{4, 6} {
				if name := b.cidrSet(k, fam); name != "" {
					x := base
					x.family, x.peer = fam, name
					out = append(out, x)
				}
			}
		}
	}
	for _, k := range r.NamedPortSets {
		for _, fam := range []uint8{4, 6} {
			out = append(out, rule{kind: ruleNamed, family: fam, named: b.namedSet(k, fam), policy: r.Policy, index: r.Index})
		}
	}
	return out
}
