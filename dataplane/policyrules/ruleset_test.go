package policyrules

import (
	"net/netip"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

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
	rs := build(policy.Compile(smallSnapshot(), policy.Options{Node: "n1"}), "n1", false)
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
	before := build(policy.Compile(s, policy.Options{Node: "n1"}), "n1", false)
	s.Pods[2].Labels = nil // the remote web pod leaves the peers
	after := build(policy.Compile(s, policy.Options{Node: "n1"}), "n1", false)
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
	for _, r := range []rule{
		{kind: ruleAllow, tier: policy.AdminTier, action: policy.Deny, verdict: verdictDrop, policy: "deny-all", index: 2},
		{kind: ruleAllow, tier: policy.BaselineTier, action: policy.Pass, policy: "base", index: 0},
		{kind: ruleNamed, tier: policy.AdminTier, action: policy.Accept, policy: "dns", index: 1},
	} {
		k, ok := parseCluster(r.comment(c))
		if want := (ClusterRuleKey{Policy: r.policy, Tier: r.tier, Action: r.action, Direction: Egress, Index: r.index}); !ok || k != want {
			t.Fatalf("%q read as %+v %v, want %+v", r.comment(c), k, ok, want)
		}
		if _, ok := parseAllow(r.comment(c)); ok {
			t.Fatalf("%q reads as a NetworkPolicy allow", r.comment(c))
		}
	}
	logRule := rule{kind: ruleAllow, tier: policy.AdminTier, action: policy.Deny, verdict: verdictLog, policy: "deny-all"}
	if k, ok := parseCluster(logRule.comment(c)); ok {
		t.Fatalf("the deny log's %q read as a counted rule %+v", logRule.comment(c), k)
	}
}

// TestBuildDenyLog: with the deny log, every pod chain logs just before
// its drop, and only there; its comment is neither an allow nor a deny,
// so Counters does not count it.
func TestBuildDenyLog(t *testing.T) {
	rs := build(policy.Compile(smallSnapshot(), policy.Options{Node: "n1"}), "n1", true)
	for _, c := range rs.chains {
		n := len(c.rules)
		if n < 2 || c.rules[n-2].kind != ruleLog || c.rules[n-1].kind != ruleDeny {
			t.Fatalf("chain %s: %+v", c.name, c.rules)
		}
		for _, r := range c.rules[:n-2] {
			if r.kind == ruleLog {
				t.Fatalf("chain %s logs before its end: %+v", c.name, c.rules)
			}
		}
		note := c.rules[n-2].comment(c)
		if _, ok := parseAllow(note); ok {
			t.Fatalf("log comment %q reads as an allow", note)
		}
		if _, ok := parseDeny(note); ok {
			t.Fatalf("log comment %q reads as a deny", note)
		}
	}
	if p := diff(build(policy.Compile(smallSnapshot(), policy.Options{Node: "n1"}), "n1", false), rs); p.stats().ChainsRewritten != len(rs.chains) {
		t.Fatalf("turning the log on rewrites every chain: %+v", p.stats())
	}
}

func TestLogPrefix(t *testing.T) {
	long := policy.PodKey{Namespace: "ns", Name: strings.Repeat("p", 120)}
	tests := []struct {
		pod  policy.PodKey
		d    Direction
		want string
		back policy.PodKey
	}{
		{policy.PodKey{Namespace: "x", Name: "db-0"}, Ingress, "podnet-deny ingress x/db-0", policy.PodKey{Namespace: "x", Name: "db-0"}},
		{policy.PodKey{Namespace: "y", Name: "c"}, Egress, "podnet-deny egress y/c", policy.PodKey{Namespace: "y", Name: "c"}},
		{long, Egress, "podnet-deny egress", policy.PodKey{}},
	}
	for _, tt := range tests {
		got := LogPrefix(tt.pod, tt.d)
		if got != tt.want || len(got) > maxPrefix {
			t.Errorf("LogPrefix(%s, %s) = %q, want %q", tt.pod, tt.d, got, tt.want)
		}
		pod, d, ok := ParseLogPrefix(got)
		if !ok || pod != tt.back || d != tt.d {
			t.Errorf("ParseLogPrefix(%q) = %s %s %v", got, pod, d, ok)
		}
	}
	for _, bad := range []string{"", "podnet-deny", "podnet-deny sideways x/a", "other ingress x/a", "podnet-deny ingress xa", "podnet-deny ingress x/a b"} {
		if _, _, ok := ParseLogPrefix(bad); ok {
			t.Errorf("ParseLogPrefix(%q) ok", bad)
		}
	}
}

// TestBuildTiers: a pod chain holds the Admin tier after the pod's own
// addresses; an Admin Pass goes to the pod's tail chain, which holds
// NetworkPolicy's rules and drop (isolated pod) or the Baseline tier
// (the other pods); a tier's Deny logs first with the deny log.
func TestBuildTiers(t *testing.T) {
	s := smallSnapshot()
	admin := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a1"}, Spec: cnp.ClusterNetworkPolicySpec{
		Tier: cnp.AdminTier, Priority: 1, Subject: cnp.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
		Ingress: []cnp.ClusterNetworkPolicyIngressRule{
			{Action: cnp.ClusterNetworkPolicyRuleActionPass, From: []cnp.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}},
				Protocols: []cnp.ClusterNetworkPolicyProtocol{{TCP: &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnp.Port{Number: 80}}}}},
			{Action: cnp.ClusterNetworkPolicyRuleActionDeny, From: []cnp.ClusterNetworkPolicyIngressPeer{{Pods: &cnp.NamespacedPod{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}},
		}}}
	baseline := admin.DeepCopy()
	baseline.Name, baseline.Spec.Tier = "b1", cnp.BaselineTier
	baseline.Spec.Ingress = baseline.Spec.Ingress[1:]
	s.ClusterPolicies = []policy.ClusterPolicy{policy.ClusterPolicyFromAPI(admin), policy.ClusterPolicyFromAPI(baseline)}
	rs := build(policy.Compile(s, policy.Options{Node: "n1"}), "n1", true)
	if len(rs.chains) != 4 {
		t.Fatalf("chains %+v", rs.chains)
	}
	type step struct {
		kind ruleKind
		v    verdict
	}
	check := func(name string, want []step) {
		t.Helper()
		c := rs.chains[name]
		if c == nil || len(c.rules) != len(want) {
			t.Fatalf("chain %s: %+v", name, c)
		}
		for i, w := range want {
			if r := c.rules[i]; r.kind != w.kind || r.verdict != w.v {
				t.Fatalf("chain %s rule %d: %+v, want %+v", name, i, r, w)
			}
			if note := c.rules[i].comment(c); c.rules[i].tier != 0 && !strings.HasPrefix(note, "cnp") {
				t.Fatalf("comment %q", note)
			}
		}
	}
	a, b := policy.PodKey{Namespace: "x", Name: "a"}, policy.PodKey{Namespace: "x", Name: "b"}
	admin4and6 := []step{{ruleAllow, verdictGoto}, {ruleAllow, verdictGoto}, {ruleAllow, verdictLog}, {ruleAllow, verdictDrop}, {ruleAllow, verdictLog}, {ruleAllow, verdictDrop}, {ruleGoto, 0}}
	check(podChainName(a, Ingress), append([]step{{ruleSelf, 0}, {ruleSelf, 0}}, admin4and6...))
	check(tailChainName(a, Ingress), []step{{ruleAllow, verdictReturn}, {ruleAllow, verdictReturn}, {ruleAllow, verdictReturn}, {ruleLog, 0}, {ruleDeny, 0}})
	check(podChainName(b, Ingress), append([]step{{ruleSelf, 0}}, admin4and6...))
	check(tailChainName(b, Ingress), []step{{ruleAllow, verdictLog}, {ruleAllow, verdictDrop}, {ruleAllow, verdictLog}, {ruleAllow, verdictDrop}})
	if got := rs.chains[podChainName(a, Ingress)].rules[2].target; got != tailChainName(a, Ingress) {
		t.Fatalf("pass goes to %q", got)
	}
	// Without Pass rules there is no tail: the tiers share the pod chain.
	s.ClusterPolicies[0].Ingress = s.ClusterPolicies[0].Ingress[1:]
	rs = build(policy.Compile(s, policy.Options{Node: "n1"}), "n1", false)
	if len(rs.chains) != 2 || rs.chains[tailChainName(a, Ingress)] != nil {
		t.Fatalf("chains %+v", rs.chains)
	}
}
