package policyrules

import (
	"net/netip"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/podnet/podnet/policy"
)

// These tests need no root: they check the ruleset built from an IR and
// the plans between two of them.

func TestNamesDeterministicAndShort(t *testing.T) {
	long := strings.Repeat("k", 5000)
	a, b := hashName("peer4", long), hashName("peer4", long)
	if a != b || len(a) > 32 {
		t.Fatalf("%q %q", a, b)
	}
	if hashName("peer4", "x") == hashName("peer6", "x") {
		t.Fatal("kinds share a name")
	}
	if c := comment(strings.Repeat("é", 200)); len(c) > maxComment || !strings.HasPrefix(strings.Repeat("é", 200), c) {
		t.Fatalf("comment %d bytes", len(c))
	}
}

func TestCanonicalIntervals(t *testing.T) {
	s := &set{kind: kindCIDR4, elems: []element{
		{addr: addr("10.0.1.0"), end: addr("10.0.2.0")},
		{addr: addr("10.0.0.0"), end: addr("10.0.1.0")}, // touches the next
		{addr: addr("10.0.0.128"), end: addr("10.0.0.192")},
		{addr: addr("192.168.0.0"), end: addr("192.168.1.0")},
		{addr: addr("224.0.0.0")}, // to the top, absorbs nothing before it
	}}
	s.canonical()
	want := []element{
		{addr: addr("10.0.0.0"), end: addr("10.0.2.0")},
		{addr: addr("192.168.0.0"), end: addr("192.168.1.0")},
		{addr: addr("224.0.0.0")},
	}
	if len(s.elems) != len(want) {
		t.Fatalf("got %+v", s.elems)
	}
	for i := range want {
		if s.elems[i] != want[i] {
			t.Fatalf("got %+v", s.elems)
		}
	}
	p := &set{kind: kindPorts, elems: []element{{proto: 6, first: 80, last: 80}, {proto: 6, first: 81, last: 90}, {proto: 17, first: 80, last: 80}}}
	p.canonical()
	if len(p.elems) != 2 || p.elems[0].last != 90 {
		t.Fatalf("ports %+v", p.elems)
	}
}

func TestElemDiff(t *testing.T) {
	e := func(s string) element { return element{addr: addr(s)} }
	add, del := elemDiff([]element{e("10.0.0.1"), e("10.0.0.2"), e("10.0.0.4")}, []element{e("10.0.0.2"), e("10.0.0.3"), e("10.0.0.5")})
	if len(add) != 2 || add[0] != e("10.0.0.3") || add[1] != e("10.0.0.5") || len(del) != 2 || del[0] != e("10.0.0.1") || del[1] != e("10.0.0.4") {
		t.Fatalf("add %v del %v", add, del)
	}
}

func smallSnapshot() *policy.Snapshot {
	ip := netip.MustParseAddr
	s := &policy.Snapshot{
		Namespaces: []policy.Namespace{{Name: "x"}},
		Nodes:      []policy.Node{{Name: "n1", IPs: []netip.Addr{ip("198.18.0.1")}}},
		Pods: []policy.Pod{
			{Namespace: "x", Name: "a", Labels: map[string]string{"app": "db"}, Node: "n1", IPs: []netip.Addr{ip("10.244.0.2"), ip("fd00:244::2")}},
			{Namespace: "x", Name: "b", Labels: map[string]string{"app": "web"}, Node: "n1", IPs: []netip.Addr{ip("10.244.0.3")}},
			{Namespace: "x", Name: "c", Labels: map[string]string{"app": "web"}, Node: "n2", IPs: []netip.Addr{ip("10.244.1.3")}},
		},
	}
	np := netpol("x", "db", map[string]string{"app": "db"})
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{podPeer(map[string]string{"app": "web"}), blockPeer("198.19.0.0/16")}}}
	s.Policies = []*networkingv1.NetworkPolicy{np}
	return s
}

func TestBuild(t *testing.T) {
	rs := build(policy.Compile(smallSnapshot(), policy.Options{Node: "n1"}), "n1")
	in := rs.chains[podChainName(policy.PodKey{Namespace: "x", Name: "a"}, Ingress)]
	if in == nil || len(rs.chains) != 1 {
		t.Fatalf("chains %+v", rs.chains)
	}
	// self v4, self v6, peers v4, peers v6, ipBlock v4, deny.
	kinds := []ruleKind{ruleSelf, ruleSelf, ruleAllow, ruleAllow, ruleAllow, ruleDeny}
	if len(in.rules) != len(kinds) {
		t.Fatalf("rules %+v", in.rules)
	}
	for i, k := range kinds {
		if in.rules[i].kind != k {
			t.Fatalf("rule %d: %+v", i, in.rules[i])
		}
	}
	peers := rs.sets[in.rules[2].peer]
	if peers == nil || len(peers.elems) != 2 || peers.key != "peers ns=x;pods=app in (web)" {
		t.Fatalf("peer set %+v", peers)
	}
	if got := rs.maps[mapIn4][addr("10.244.0.2")]; got != in.name || len(rs.maps[mapOut4]) != 0 {
		t.Fatalf("maps %+v", rs.maps)
	}
	if n := rs.sets[setNode4]; len(n.elems) != 1 {
		t.Fatalf("node set %+v", n)
	}
}

func TestPlanOfLabelChange(t *testing.T) {
	s := smallSnapshot()
	before := build(policy.Compile(s, policy.Options{Node: "n1"}), "n1")
	s.Pods[2].Labels = nil // the remote web pod leaves the peers
	after := build(policy.Compile(s, policy.Options{Node: "n1"}), "n1")
	p := diff(before, after)
	st := p.stats()
	if st != (Stats{SetsChanged: 1, ElementsRemoved: 1}) {
		t.Fatalf("%+v", st)
	}
	if p := diff(after, after); !p.empty() {
		t.Fatalf("no change: %+v", p.stats())
	}
	all := diff(after, emptyRuleset())
	if st := all.stats(); st.ChainsRemoved != 1 || st.MapEntriesRemoved != 2 || st.SetsRemoved != len(after.sets) {
		t.Fatalf("to nothing: %+v", st)
	}
}

func TestParseComments(t *testing.T) {
	c := &chain{pod: policy.PodKey{Namespace: "x", Name: "a"}, dir: Egress}
	k, ok := parseAllow(rule{kind: ruleAllow, policy: "x/np", index: 3}.comment(c))
	if !ok || k != (RuleKey{Policy: "x/np", Direction: Egress, Index: 3}) {
		t.Fatalf("%+v %v", k, ok)
	}
	d, ok := parseDeny(rule{kind: ruleDeny}.comment(c))
	if !ok || d != (PodDirection{Pod: c.pod, Direction: Egress}) {
		t.Fatalf("%+v %v", d, ok)
	}
}
