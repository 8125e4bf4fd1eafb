package policyrules

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/podnet/podnet/dataplane/nflog"
	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/policy"
)

// flowCluster is fixedCluster with three ClusterNetworkPolicies:
//
//	guard (Admin):    pods app=other of team=green may not reach TCP 8080 anywhere
//	ops (Admin):      team=blue pods take TCP 81 from app=other of team=green
//	base (Baseline):  team=blue pods take TCP 80 from team=green namespaces
func flowCluster(tp *topology) *policy.Snapshot {
	s := fixedCluster(tp)
	green := metav1.LabelSelector{MatchLabels: map[string]string{"team": "green"}}
	blue := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}}
	other := &cnp.NamespacedPod{NamespaceSelector: green, PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}}
	tcp := func(port int32) []cnp.ClusterNetworkPolicyProtocol {
		return []cnp.ClusterNetworkPolicyProtocol{{TCP: &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnp.Port{Number: port}}}}
	}
	guard := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "guard"}}
	guard.Spec.Tier, guard.Spec.Priority, guard.Spec.Subject.Pods = cnp.AdminTier, 1, other
	guard.Spec.Egress = []cnp.ClusterNetworkPolicyEgressRule{{Action: cnp.ClusterNetworkPolicyRuleActionDeny,
		To: []cnp.ClusterNetworkPolicyEgressPeer{{Networks: []cnp.CIDR{"0.0.0.0/0"}}}, Protocols: tcp(8080)}}
	ops := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}
	ops.Spec.Tier, ops.Spec.Priority, ops.Spec.Subject.Namespaces = cnp.AdminTier, 2, blue
	ops.Spec.Ingress = []cnp.ClusterNetworkPolicyIngressRule{{Action: cnp.ClusterNetworkPolicyRuleActionAccept,
		From: []cnp.ClusterNetworkPolicyIngressPeer{{Pods: other}}, Protocols: tcp(81)}}
	base := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "base"}}
	base.Spec.Tier, base.Spec.Priority, base.Spec.Subject.Namespaces = cnp.BaselineTier, 1, blue
	base.Spec.Ingress = []cnp.ClusterNetworkPolicyIngressRule{{Action: cnp.ClusterNetworkPolicyRuleActionAccept,
		From: []cnp.ClusterNetworkPolicyIngressPeer{{Namespaces: &green}}, Protocols: tcp(80)}}
	for _, p := range []*cnp.ClusterNetworkPolicy{guard, ops, base} {
		s.ClusterPolicies = append(s.ClusterPolicies, policy.ClusterPolicyFromAPI(p))
	}
	return s
}

// TestFlowLabels: with the flow labels (and the deny log beside them),
// an accepted connection's conntrack entry carries the ids of the rules
// that accepted it on each side, which FlowIndex names, for TCP and UDP,
// NetworkPolicy and both tiers; a dropped packet comes on the flow log's
// NFLOG group with its rule's id (an Admin Deny; a NetworkPolicy final
// drop, naming the isolating policies), and on the deny log's as before.
func TestFlowLabels(t *testing.T) { checkFlowLabels(t) }

// checkFlowLabels is TestFlowLabels with more of the renderer's options.
func checkFlowLabels(t *testing.T, opts ...Option) {
	tp := newTopology(t, fixedPods)
	s := flowCluster(tp)
	const denyGroup = 7370
	r := tp.renderer(t, append([]Option{WithFlowLabels(FlowLog{}), WithDenyLog(DenyLog{Group: denyGroup, Rate: 100, Burst: 100})}, opts...)...)
	flowLog := readLog(t, tp.node, DefaultFlowLogGroup)
	denyLog := readLog(t, tp.node, denyGroup)
	ir := policy.Compile(s, policy.Options{Node: "n1"})
	if _, err := r.Apply(ir); err != nil {
		t.Fatal(err)
	}
	index := FlowIndex(ir, "n1")
	a, b, c, d := tp.pods[0], tp.pods[1], tp.pods[2], tp.pods[3]
	T, U := policy.TCP, policy.UDP
	checkProbes(t, tp, s, []probeCase{
		{a.v4, b.v4, T, 81, true},           // x/db ingress 0
		{c.v4, a.v4, T, 80, true},           // y/client egress 0, base ingress 0
		{d.v4, a.v4, T, 81, true},           // ops ingress 0
		{c.v4, n2IP4, U, 53, true},          // y/client egress 2
		{c.v6, n2IP6, U, 53, true},          //
		{d.v4, externalIP4, T, 8080, false}, // guard egress 0
		{d.v4, b.v4, T, 80, false},          // b's ingress: x/db, x/deny-db
		{c.v4, n2IP4, U, 80, false},         // c's egress: y/client
	})
	np := func(pol string, d Direction, i int) flows.Rule { return npRule(pol, d, i, "Allow") }
	cluster := func(name string, tier policy.Tier, d Direction, action string) flows.Rule {
		return flows.Rule{Kind: kindCluster, Tier: tier.String(), Name: name, Direction: d.String(), Action: action}
	}
	checkLabels(t, dumpConntrack(t, tp.node), index, []labelCase{
		{a.v4, b.v4, 6, 81, nil, ptr(np("x/db", Ingress, 0))},
		{c.v4, a.v4, 6, 80, ptr(np("y/client", Egress, 0)), ptr(cluster("base", policy.BaselineTier, Ingress, "Allow"))},
		{d.v4, a.v4, 6, 81, nil, ptr(cluster("ops", policy.AdminTier, Ingress, "Allow"))},
		{c.v4, n2IP4, 17, 53, ptr(np("y/client", Egress, 2)), nil},
		{c.v6, n2IP6, 17, 53, ptr(np("y/client", Egress, 2)), nil},
	})
	checkDropLogs(t, flowLog, denyLog, index, []dropCase{
		{d.v4, externalIP4, 8080, []flows.Rule{cluster("guard", policy.AdminTier, Egress, "Deny")}},
		{d.v4, b.v4, 80, []flows.Rule{npRule("x/db", Ingress, -1, "Deny"), npRule("x/deny-db", Ingress, -1, "Deny")}},
		{c.v4, n2IP4, 80, []flows.Rule{npRule("y/client", Egress, -1, "Deny")}},
	})
	for _, rec := range flowLog.all() {
		if rec.Src == a.v4 || rec.Dst == a.v4 {
			t.Errorf("a flow log record of an allowed connection: %+v", rec)
		}
	}
}

// labelCase is an accepted connection and the rules its label must name
// on each side (nil: none).
type labelCase struct {
	src, dst        netip.Addr
	proto           uint8
	port            uint16
	egress, ingress *flows.Rule
}

func checkLabels(t *testing.T, dump []conntrack.Flow, index map[uint64][]flows.Rule, cases []labelCase) {
	t.Helper()
	for _, w := range cases {
		f, ok := findFlow(dump, w.src, w.dst, w.proto, w.port)
		if !ok {
			t.Errorf("no conntrack entry of %s -> %s %d/%d", w.src, w.dst, w.proto, w.port)
			continue
		}
		eg, in, err := ParseFlowLabel(f.Labels)
		if err != nil {
			t.Errorf("%s -> %s %d/%d: %v", w.src, w.dst, w.proto, w.port, err)
			continue
		}
		checkSide(t, "egress", eg, w.egress, index)
		checkSide(t, "ingress", in, w.ingress, index)
	}
}

// dropCase is a denied packet and the rules its flow log prefix names.
type dropCase struct {
	src, dst netip.Addr
	port     uint16
	rules    []flows.Rule
}

// checkDropLogs finds each drop on the flow log, with its rules, and on
// the deny log beside it.
func checkDropLogs(t *testing.T, flowLog, denyLog *logReader, index map[uint64][]flows.Rule, cases []dropCase) {
	t.Helper()
	for _, w := range cases {
		recs := waitRecords(flowLog, w.src, w.dst, w.port)
		if len(recs) == 0 {
			t.Errorf("no flow log record of %s -> %s:%d; records %+v", w.src, w.dst, w.port, flowLog.all())
			continue
		}
		id, ok := ParseFlowPrefix(recs[0].Prefix)
		if got := index[id]; !ok || !equalRules(got, w.rules) {
			t.Errorf("flow log of %s -> %s:%d: prefix %q names %+v, want %+v", w.src, w.dst, w.port, recs[0].Prefix, got, w.rules)
		}
		if len(waitRecords(denyLog, w.src, w.dst, w.port)) == 0 {
			t.Errorf("the deny log has no record of %s -> %s:%d beside the flow log", w.src, w.dst, w.port)
		}
	}
}

func checkSide(t *testing.T, side string, id uint64, want *flows.Rule, index map[uint64][]flows.Rule) {
	t.Helper()
	switch {
	case want == nil && id != 0:
		t.Errorf("%s id %#x (%+v), want none", side, id, index[id])
	case want == nil:
	case !equalRules(index[id], []flows.Rule{*want}):
		t.Errorf("%s id %#x names %+v, want %+v", side, id, index[id], *want)
	}
}

func equalRules(a, b []flows.Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func waitRecords(lr *logReader, src, dst netip.Addr, port uint16) []nflog.Record {
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := lr.matching(src, dst, port)
		if len(got) > 0 || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dumpConntrack lists the conntrack entries of the namespace at path.
func dumpConntrack(t *testing.T, path string) []conntrack.Flow {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	c, err := conntrack.Dial(&netlink.Config{NetNS: int(f.Fd())})
	must(t, err)
	defer c.Close()
	flows, err := c.Dump(nil)
	must(t, err)
	return flows
}

// findFlow finds the entry of a connection from src to dst's port (the
// last one, when the probes made several: they carry the same labels).
func findFlow(fs []conntrack.Flow, src, dst netip.Addr, proto uint8, port uint16) (conntrack.Flow, bool) {
	var found conntrack.Flow
	ok := false
	for _, f := range fs {
		o := f.TupleOrig
		if o.IP.SourceAddress == src && o.IP.DestinationAddress == dst && o.Proto.Protocol == proto && o.Proto.DestinationPort == port {
			found, ok = f, true
		}
	}
	return found, ok
}

// TestFlowLabelsIncremental: the ids are part of a rule: a change that
// only changes an id (a second policy isolates a pod, allowing nothing:
// its final drop's id names both) rewrites the chain with the option
// and changes nothing without it; with it, the incremental table is
// what a resync writes.
func TestFlowLabelsIncremental(t *testing.T) {
	tp := newTopology(t, fixedPods)
	s := flowCluster(tp)
	compile := func() *policy.IR { return policy.Compile(s, policy.Options{Node: "n1"}) }
	before := compile()
	s.Policies = append(s.Policies, netpol("x", "deny-db2", map[string]string{"app": "db"}, networkingv1.PolicyTypeIngress))
	after := compile()
	if p := diff(build(before, "n1", false), build(after, "n1", false)); !p.empty() {
		t.Fatalf("without flow labels, a second empty isolating policy changes %+v", p.stats())
	}
	flow := buildOptions{flow: true}
	if st := diff(buildWith(before, "n1", flow), buildWith(after, "n1", flow)).stats(); st != (Stats{ChainsRewritten: 1}) {
		t.Fatalf("with flow labels, a second empty isolating policy changes %+v, want one chain rewritten", st)
	}

	r := tp.renderer(t, WithFlowLabels(FlowLog{}))
	if _, err := r.Apply(before); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Apply(after); err != nil || st != (Stats{ChainsRewritten: 1}) {
		t.Fatalf("Apply: %+v, %v", st, err)
	}
	inc := dumpTable(t, tp.node)
	if _, err := tp.renderer(t, WithFlowLabels(FlowLog{})).Resync(after); err != nil {
		t.Fatal(err)
	}
	if full := dumpTable(t, tp.node); !slices.Equal(inc, full) {
		t.Fatalf("incremental and full differ:\nincremental:\n%s\nfull:\n%s", strings.Join(inc, "\n"), strings.Join(full, "\n"))
	}
	// A Renderer without the option rewrites every chain the option wrote.
	plain := tp.renderer(t)
	if _, err := plain.Resync(after); err != nil {
		t.Fatal(err)
	}
	labels, logs := 0, 0
	for _, line := range inc {
		labels += strings.Count(line, "Key:13 Direction") // ct label (NFT_CT_LABELS)
		logs += strings.Count(line, fmt.Sprintf("Group:%d ", DefaultFlowLogGroup))
	}
	if labels == 0 || logs == 0 {
		t.Fatalf("the dump shows %d label and %d flow log expressions with the option", labels, logs)
	}
	for _, line := range dumpTable(t, tp.node) {
		if strings.Contains(line, "Key:13 Direction") || strings.Contains(line, fmt.Sprintf("Group:%d ", DefaultFlowLogGroup)) {
			t.Errorf("a plain resync left flow labels: %s", line)
		}
	}
}
