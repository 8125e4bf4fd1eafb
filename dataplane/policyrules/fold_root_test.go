package policyrules

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/policy"
)

// foldAll folds every NetworkPolicy section with a peer-set rule, so
// that the small clusters of the root tests exercise the fold maps and
// class chains.
var foldAll = withFolding(foldLimits{min: 1})

// TestKernelMatchesDecideFolded is TestKernelMatchesDecide with every
// peer-set rule folded (and incremental changes between folded tables).
func TestKernelMatchesDecideFolded(t *testing.T) {
	checkKernelMatchesDecide(t, randomCluster, foldAll)
}

// TestKernelMatchesDecideClusterFolded: the same with
// ClusterNetworkPolicies, the flow labels and the deny log.
func TestKernelMatchesDecideClusterFolded(t *testing.T) {
	checkKernelMatchesDecide(t, randomClusterWithTiers, foldAll, WithFlowLabels(FlowLog{}), WithDenyLog(DenyLog{Group: 7370, Rate: 10, Burst: 20}))
}

// TestFixedPoliciesFolded is TestFixedPolicies (and its counters) with
// x/db's rule folded.
func TestFixedPoliciesFolded(t *testing.T) { checkFixedPolicies(t, foldAll) }

// TestFlowLabelsFolded is TestFlowLabels with x/db's rule folded: its
// class chain labels the connections it accepts.
func TestFlowLabelsFolded(t *testing.T) { checkFlowLabels(t, foldAll) }

// foldCluster is the four test pods and the remote one with ten
// policies selecting x/b (app=db): allow-<i> takes TCP 81 from pods
// labelled peer=p<i>, allow-0 also from pods labelled shared=yes. x/a
// (peer p1) and y/d (p3) are shared, y/c is p2, the remote pod p9: x/a's
// class is allow-0 and allow-1, y/d's allow-0 and allow-3, so allow-0
// counts in two class chains.
func foldCluster(tp *topology) *policy.Snapshot {
	s := &policy.Snapshot{
		Namespaces: []policy.Namespace{{Name: "x"}, {Name: "y"}},
		Nodes:      []policy.Node{{Name: "n1", IPs: []netip.Addr{nodeIP4, nodeIP6}}, {Name: "n2", IPs: []netip.Addr{n2IP4, n2IP6}}},
	}
	labels := []map[string]string{{"peer": "p1", "shared": "yes"}, {"app": "db"}, {"peer": "p2"}, {"peer": "p3", "shared": "yes"}}
	for i, p := range tp.pods {
		s.Pods = append(s.Pods, policy.Pod{Namespace: p.key.Namespace, Name: p.key.Name, Labels: labels[i], Node: "n1", IPs: []netip.Addr{p.v4, p.v6}})
	}
	s.Pods = append(s.Pods, policy.Pod{Namespace: "x", Name: "r", Labels: map[string]string{"peer": "p9"}, Node: "n2", IPs: []netip.Addr{remoteIP4, remoteIP6}})
	for i := range 10 {
		np := netpol("x", fmt.Sprintf("allow-%d", i), map[string]string{"app": "db"}, networkingv1.PolicyTypeIngress)
		from := []networkingv1.NetworkPolicyPeer{nsPodPeer(nil, map[string]string{"peer": fmt.Sprintf("p%d", i)})}
		if i == 0 {
			from = append(from, nsPodPeer(nil, map[string]string{"shared": "yes"}))
		}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: from, Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 81)}}}
		s.Policies = append(s.Policies, np)
	}
	return s
}

// TestFoldCounters: with the default limits, ten policies' rules are
// folded; packets get through as Decide says, Counters sums a rule over
// the class chains it is in, and each accepted connection's label names
// the rule of its class that accepted it.
func TestFoldCounters(t *testing.T) {
	tp := newTopology(t, fixedPods)
	s := foldCluster(tp)
	r := tp.renderer(t, WithFlowLabels(FlowLog{}))
	ir := policy.Compile(s, policy.Options{Node: "n1"})
	if _, err := r.Apply(ir); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(dumpTable(t, tp.node), func(l string) bool { return strings.HasPrefix(l, "set fold4-") }) {
		t.Fatal("no fold map in the table")
	}
	a, b, c, d := tp.pods[0], tp.pods[1], tp.pods[2], tp.pods[3]
	T := policy.TCP
	checkProbes(t, tp, s, []probeCase{
		{a.v4, b.v4, T, 81, true},
		{d.v4, b.v4, T, 81, true},
		{d.v6, b.v6, T, 81, true},
		{c.v4, b.v4, T, 81, true},
		{remoteIP4, b.v4, T, 81, true},
		{c.v4, b.v4, T, 80, false},
		{n2IP4, b.v4, T, 81, false},
	})
	cnt, err := r.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		policy string
		min    uint64
	}{{"x/allow-0", 3}, {"x/allow-2", 1}, {"x/allow-9", 1}} {
		if n := cnt.Allowed[RuleKey{Policy: w.policy, Direction: Ingress}].Packets; n < w.min {
			t.Errorf("%s counted %d packets, want at least %d: %+v", w.policy, n, w.min, cnt.Allowed)
		}
	}
	if n := cnt.Allowed[RuleKey{Policy: "x/allow-1", Direction: Ingress}].Packets; n != 0 {
		t.Errorf("x/allow-1 counted %d packets: allow-0 comes first in x/a's class", n)
	}
	if n := cnt.Denied[PodDirection{Pod: b.key, Direction: Ingress}].Packets; n < 2 {
		t.Errorf("x/b's ingress denied %d packets, want at least 2", n)
	}
	np := func(pol string) *flows.Rule { return ptr(npRule(pol, Ingress, 0, "Allow")) }
	checkLabels(t, dumpConntrack(t, tp.node), FlowIndex(ir, "n1"), []labelCase{
		{a.v4, b.v4, 6, 81, nil, np("x/allow-0")},
		{c.v4, b.v4, 6, 81, nil, np("x/allow-2")},
		{remoteIP4, b.v4, 6, 81, nil, np("x/allow-9")},
	})
}

// TestLargeFold: a fold map of 5,000 IPv6 addresses (whose elements, with
// their chains' names, take several messages: one would pass the 64 KiB
// of a netlink attribute) is in the kernel whole.
func TestLargeFold(t *testing.T) {
	tp := newTopology(t, nil)
	r := tp.renderer(t)
	ir := flatIR(5000)
	if _, err := r.Apply(ir); err != nil {
		t.Fatal(err)
	}
	rs := build(ir, "n1", false)
	if len(rs.folds) != 2 {
		t.Fatalf("%d folds, want 2", len(rs.folds))
	}
	for _, line := range dumpTable(t, tp.node) {
		if strings.HasPrefix(line, "set fold") {
			if n := strings.Count(line, "-/false/"); n != 5000 {
				t.Errorf("%s...: %d elements, want 5000", line[:40], n)
			}
		}
	}
}

// TestBlockFold: ingress rules from ipBlocks of a few addresses (hosts,
// a /30 less one address, both families) fold, in the kernel, into the
// lookup the pod-selector rules use; the verdicts are the walk's, with
// folding and without.
func TestBlockFold(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		fold bool
	}{{"folded", []Option{foldAll}, true}, {"walked", []Option{withFolding(noFolding)}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTopology(t, fixedPods)
			s := fixedCluster(tp)
			s.Policies = nil
			a, b, c, d := tp.pods[0], tp.pods[1], tp.pods[2], tp.pods[3]
			blocks := [][]string{{a.v4.String() + "/32"}, {a.v6.String() + "/128"}, {remoteIP4.String() + "/32"},
				{netip.PrefixFrom(c.v4, 30).Masked().String(), d.v4.String() + "/32"}}
			for i, bl := range blocks {
				np := netpol("x", fmt.Sprintf("host-%d", i), map[string]string{"app": "db"}, networkingv1.PolicyTypeIngress)
				np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{blockPeer(bl[0], bl[1:]...)},
					Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 81)}}}
				s.Policies = append(s.Policies, np)
			}
			r := tp.renderer(t, tc.opts...)
			if _, err := r.Apply(policy.Compile(s, policy.Options{Node: "n1"})); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(strings.Join(dumpTable(t, tp.node), "\n"), "fold4-"); got != tc.fold {
				t.Fatalf("a fold map in the table: %v, want %v", got, tc.fold)
			}
			T := policy.TCP
			checkProbes(t, tp, s, []probeCase{
				{a.v4, b.v4, T, 81, true},
				{a.v6, b.v6, T, 81, true},
				{a.v4, b.v4, T, 80, false}, // not that port
				{remoteIP4, b.v4, T, 81, true},
				{remoteIP6, b.v6, T, 81, false},
				{c.v4, b.v4, T, 81, true},  // in the /30
				{c.v6, b.v6, T, 81, false}, // an IPv4 block
				{d.v4, b.v4, T, 81, false}, // the /30's except
				{n2IP4, b.v4, T, 81, false},
				{externalIP4, b.v4, T, 81, false},
			})
		})
	}
}
