package policyrules

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/podnet/podnet/policy"
)

// withFolding sets the limits of folding (zero fields: the defaults).
func withFolding(l foldLimits) Option { return func(o *options) { o.fold = l } }

// noFolding folds nothing.
var noFolding = foldLimits{min: math.MaxInt}

// manyPolicies is interop's data path cluster in small: a server pod on
// n1, and n policies selecting it, the i-th allowing TCP 80 from pods
// labelled peer=p<i> (one each, elsewhere, in 10.99/16 and fd00:99::/32)
// and, every fifth, from pods labelled shared=yes too (peer-0 to peer-2),
// so that those addresses are in several rules' peer sets.
func manyPolicies(n int) *policy.Snapshot {
	s := &policy.Snapshot{
		Namespaces: []policy.Namespace{{Name: "x", Labels: map[string]string{"kubernetes.io/metadata.name": "x"}}},
		Nodes:      []policy.Node{{Name: "n1", IPs: []netip.Addr{addr("198.18.0.1")}}},
		Pods: []policy.Pod{{Namespace: "x", Name: "server", Node: "n1", Labels: map[string]string{"app": "server"},
			IPs: []netip.Addr{addr("10.244.0.2"), addr("fd00:244::2")}}},
	}
	for i := range n {
		l := map[string]string{"peer": fmt.Sprintf("p%d", i)}
		if i < 3 {
			l["shared"] = "yes"
		}
		s.Pods = append(s.Pods, policy.Pod{Namespace: "x", Name: fmt.Sprintf("peer-%d", i), Node: "n2", Labels: l,
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)}), netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x99, 14: byte(i >> 8), 15: byte(i)})}})
		np := netpol("x", fmt.Sprintf("allow-%04d", i), map[string]string{"app": "server"}, networkingv1.PolicyTypeIngress)
		from := []networkingv1.NetworkPolicyPeer{podPeer(l)}
		if i%5 == 0 {
			from = append(from, podPeer(map[string]string{"shared": "yes"}))
		}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: from, Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 80)}}}
		s.Policies = append(s.Policies, np)
	}
	return s
}

func buildFolded(s *policy.Snapshot, l foldLimits) *ruleset {
	return buildWith(policy.Compile(s, policy.Options{Node: "n1"}), "n1", buildOptions{fold: l})
}

// TestBuildFolds: 20 policies' peer-set rules are one lookup a family;
// each address of their union jumps to the class chain of exactly the
// rules that take it in, shared between addresses and families; the
// folded peer sets are not written.
func TestBuildFolds(t *testing.T) {
	rs := buildFolded(manyPolicies(20), foldLimits{})
	in := rs.chains[podChainName(policy.PodKey{Namespace: "x", Name: "server"}, Ingress)]
	kinds := []ruleKind{ruleSelf, ruleSelf, ruleFold, ruleFold, ruleDeny}
	if in == nil || len(in.rules) != len(kinds) {
		t.Fatalf("server chain %+v", in)
	}
	for i, k := range kinds {
		if in.rules[i].kind != k {
			t.Fatalf("rule %d: %+v", i, in.rules[i])
		}
	}
	f4, f6 := rs.folds[in.rules[2].peer], rs.folds[in.rules[3].peer]
	if f4 == nil || f6 == nil || f4.fam != 4 || f6.fam != 6 || len(f4.elems) != 20 || len(f6.elems) != 20 {
		t.Fatalf("folds %+v %+v", f4, f6)
	}
	// peer-7 is in allow-0007's set alone; peer-1 in allow-0001's and in
	// the shared set of allow-0000, -0005, -0010 and -0015.
	class := func(a string) []string {
		c := rs.chains[f4.elems[addr(a)]]
		if c == nil {
			t.Fatalf("%s: no class chain", a)
		}
		var out []string
		for _, r := range c.rules {
			if r.verdict != verdictAccept || r.peer != "" || r.ports == "" {
				t.Errorf("%s: class rule %+v", a, r)
			}
			out = append(out, r.comment(c))
		}
		return out
	}
	if got := class("10.99.0.7"); strings.Join(got, ",") != "allow x/allow-0007 ingress 0" {
		t.Errorf("peer-7's class %q", got)
	}
	want := "allow x/allow-0000 ingress 0,allow x/allow-0001 ingress 0,allow x/allow-0005 ingress 0,allow x/allow-0010 ingress 0,allow x/allow-0015 ingress 0"
	if got := class("10.99.0.1"); strings.Join(got, ",") != want {
		t.Errorf("peer-1's class %q, want %q", got, want)
	}
	if f6.elems[addr("fd00:99::1")] != f4.elems[addr("10.99.0.1")] {
		t.Errorf("the families' classes differ: %s %s", f6.elems[addr("fd00:99::1")], f4.elems[addr("10.99.0.1")])
	}
	for name := range rs.sets {
		if strings.HasPrefix(name, "peer") {
			t.Errorf("folded peer set %s written", name)
		}
	}
	// The server's chain, 17 classes of one rule, peer-0's to peer-2's.
	if len(rs.chains) != 1+17+3 {
		t.Errorf("%d chains, want 21", len(rs.chains))
	}
}

// TestBuildFoldsBlocks: rules whose peer is an ipBlock of a few
// addresses fold as peer sets do (the interop data path's 999 policies of
// one /32 each, in small); a wider block is walked.
func TestBuildFoldsBlocks(t *testing.T) {
	s := manyPolicies(0)
	for i := range 12 {
		np := netpol("x", fmt.Sprintf("host-%02d", i), map[string]string{"app": "server"}, networkingv1.PolicyTypeIngress)
		from := []networkingv1.NetworkPolicyPeer{blockPeer(fmt.Sprintf("198.51.100.%d/32", i))}
		if i == 0 {
			from = append(from, blockPeer("203.0.113.0/30", "203.0.113.1/32"))
		}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: from, Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 80)}}}
		s.Policies = append(s.Policies, np)
	}
	wide := netpol("x", "wide", map[string]string{"app": "server"}, networkingv1.PolicyTypeIngress)
	wide.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{blockPeer("192.0.2.0/23")}}}
	s.Policies = append(s.Policies, wide)
	rs := buildFolded(s, foldLimits{})
	in := rs.chains[podChainName(policy.PodKey{Namespace: "x", Name: "server"}, Ingress)]
	var folds, walked int
	var fold string
	for _, r := range in.rules {
		switch {
		case r.kind == ruleFold:
			folds++
			fold = r.peer
		case r.kind == ruleAllow:
			walked++
			if r.policy != "x/wide" {
				t.Errorf("walked: %+v", r)
			}
		}
	}
	f := rs.folds[fold]
	if folds != 1 || walked != 1 || f == nil || f.fam != 4 {
		t.Fatalf("server chain: %d folds, %d rules walked: %+v", folds, walked, in.rules)
	}
	want := []string{"198.51.100.0", "198.51.100.11", "203.0.113.0", "203.0.113.2", "203.0.113.3"}
	for _, a := range want {
		if f.elems[addr(a)] == "" {
			t.Errorf("%s not in the fold", a)
		}
	}
	if len(f.elems) != 12+3 || f.elems[addr("203.0.113.1")] != "" {
		t.Errorf("fold elements %v", f.elems)
	}
	if c := rs.chains[f.elems[addr("203.0.113.2")]]; c == nil || len(c.rules) != 1 || c.rules[0].policy != "x/host-00" {
		t.Errorf("203.0.113.2's class %+v", c)
	}
}

// TestFoldLimits: under the minimum (24 peer-set rules a family), over the cap or the node's budget,
// the rules are walked as without folding.
func TestFoldLimits(t *testing.T) {
	s := manyPolicies(20)
	plain := buildFolded(s, noFolding)
	server := podChainName(policy.PodKey{Namespace: "x", Name: "server"}, Ingress)
	for _, l := range []foldLimits{{min: 25}, {cap: 19}, {budget: 19}} {
		rs := buildFolded(s, l)
		if len(rs.folds) != 0 || fmt.Sprint(rs.chains[server].rules) != fmt.Sprint(plain.chains[server].rules) || len(rs.sets) != len(plain.sets) {
			t.Errorf("%+v: folds %d, chain %+v", l, len(rs.folds), rs.chains[server].rules)
		}
	}
	// The budget takes the v4 fold, not the v6 one.
	if rs := buildFolded(s, foldLimits{budget: 39}); len(rs.folds) != 1 {
		t.Errorf("budget 39: %d folds, want 1", len(rs.folds))
	}
}

// TestFoldIncremental: a pod joining a folded peer set is one element of
// the fold map (and a class chain when its class is new); a policy added
// makes a new fold map, sharing the class chains that stay.
func TestFoldIncremental(t *testing.T) {
	s := manyPolicies(20)
	before := buildFolded(s, foldLimits{})
	s.Pods = append(s.Pods, policy.Pod{Namespace: "x", Name: "new", Node: "n2", Labels: map[string]string{"peer": "p7"},
		IPs: []netip.Addr{addr("10.99.1.1")}})
	after := buildFolded(s, foldLimits{})
	if st := diff(before, after).stats(); st != (Stats{MapEntriesAdded: 1}) {
		t.Errorf("a pod joins peer-7's set: %+v, want one map entry", st)
	}
	s.Pods[len(s.Pods)-1].Labels = map[string]string{"peer": "p7", "shared": "yes"}
	again := buildFolded(s, foldLimits{})
	if st := diff(after, again).stats(); st != (Stats{MapEntriesAdded: 1, MapEntriesRemoved: 1, ChainsAdded: 1}) {
		t.Errorf("it joins the shared set too: %+v, want its entry replaced by one to a new class chain", st)
	}
	if st := diff(again, after).stats(); st != (Stats{MapEntriesAdded: 1, MapEntriesRemoved: 1, ChainsRemoved: 1}) {
		t.Errorf("and back: %+v", st)
	}
	np := netpol("x", "allow-more", map[string]string{"app": "server"}, networkingv1.PolicyTypeIngress)
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(map[string]string{"peer": "p3"})}}}
	s.Policies = append(s.Policies, np)
	more := buildFolded(s, foldLimits{})
	st := diff(again, more).stats()
	if st.SetsAdded != 2 || st.SetsRemoved != 2 || st.ChainsRewritten != 1 || st.ChainsAdded != 1 || st.ChainsRemoved != 1 {
		t.Errorf("a policy added: %+v, want two new fold maps for the old, the server's chain rewritten, peer-3's class replaced", st)
	}
}

// flatIR is the IR of one pod of n1 that n rules isolate for ingress,
// rule i taking TCP 80 from peer set i, one pod's address of each
// family (10.99/16, fd00:99::/32): interop's data path cluster, compiled.
func flatIR(n int) *policy.IR {
	ir := &policy.IR{Nodes: []policy.Node{{Name: "n1", IPs: []netip.Addr{addr("198.18.0.1")}}},
		PortSets: []policy.PortSet{{Key: "tcp80", Ranges: []policy.PortRange{{Protocol: policy.TCP, First: 80, Last: 80}}}}}
	pr := policy.PodRules{Pod: policy.PodKey{Namespace: "x", Name: "server"}, Node: "n1", IPs: []netip.Addr{addr("10.244.0.2"), addr("fd00:244::2")}}
	pr.Ingress.Isolated = true
	for i := range n {
		k := fmt.Sprintf("ns=x;pods=peer=p%d", i)
		ir.PeerSets = append(ir.PeerSets, policy.PeerSet{Key: k, V4: []netip.Addr{netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)})},
			V6: []netip.Addr{netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x99, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)})}})
		pr.Ingress.Rules = append(pr.Ingress.Rules, &policy.Rule{Policy: fmt.Sprintf("x/allow-%05d", i), PortSet: "tcp80", PeerSets: []string{k}})
	}
	ir.Pods = []policy.PodRules{pr}
	return ir
}
