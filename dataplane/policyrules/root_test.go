package policyrules

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/podnet/podnet/policy"
)

const (
	waitAllowed = 2 * time.Second
	waitDenied  = 200 * time.Millisecond
)

// fixedCluster is a small cluster of four local pods and a remote one,
// with three policies:
//
//	x/db:      pods app=db take TCP 81 from app=web of x only
//	x/deny-db: pods app=db are isolated for ingress (no rules)
//	y/client:  pods app=client may reach web pods of team=blue namespaces
//	           on their port "http", anything in 198.19.0.0/16, and UDP 53
//	           anywhere
func fixedCluster(tp *topology) *policy.Snapshot {
	s := &policy.Snapshot{
		Namespaces: []policy.Namespace{
			{Name: "x", Labels: map[string]string{"team": "blue"}},
			{Name: "y", Labels: map[string]string{"team": "green"}},
		},
		Nodes: []policy.Node{{Name: "n1", IPs: []netip.Addr{nodeIP4, nodeIP6}}, {Name: "n2", IPs: []netip.Addr{n2IP4, n2IP6}}},
	}
	labels := []map[string]string{{"app": "web"}, {"app": "db"}, {"app": "client"}, {"app": "other"}}
	ports := [][]policy.NamedPort{{{Name: "http", Protocol: policy.TCP, Port: 80}}, nil, nil, nil}
	for i, p := range tp.pods {
		s.Pods = append(s.Pods, policy.Pod{Namespace: p.key.Namespace, Name: p.key.Name, Labels: labels[i], Node: "n1",
			IPs: []netip.Addr{p.v4, p.v6}, Ports: ports[i]})
	}
	s.Pods = append(s.Pods, policy.Pod{Namespace: "x", Name: "r", Labels: map[string]string{"app": "web"}, Node: "n2",
		IPs: []netip.Addr{remoteIP4, remoteIP6}, Ports: []policy.NamedPort{{Name: "http", Protocol: policy.TCP, Port: 8080}}})
	db := netpol("x", "db", map[string]string{"app": "db"})
	db.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{podPeer(map[string]string{"app": "web"})}, Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 81)}}}
	deny := netpol("x", "deny-db", map[string]string{"app": "db"}, networkingv1.PolicyTypeIngress)
	client := netpol("y", "client", map[string]string{"app": "client"}, networkingv1.PolicyTypeEgress)
	client.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{nsPodPeer(map[string]string{"team": "blue"}, map[string]string{"app": "web"})},
			Ports: []networkingv1.NetworkPolicyPort{namedPort(corev1.ProtocolTCP, "http")}},
		{To: []networkingv1.NetworkPolicyPeer{blockPeer("198.19.0.0/16")}},
		{Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolUDP, 53)}},
	}
	s.Policies = []*networkingv1.NetworkPolicy{db, deny, client}
	return s
}

var fixedPods = []policy.PodKey{{Namespace: "x", Name: "a"}, {Namespace: "x", Name: "b"}, {Namespace: "y", Name: "c"}, {Namespace: "y", Name: "d"}}

type probeCase struct {
	src, dst netip.Addr
	proto    policy.Protocol
	port     uint16
	allowed  bool
}

// checkProbes sends each probe and compares with its expectation and with
// Decide's (so that the expectations themselves are checked).
func checkProbes(t *testing.T, tp *topology, s *policy.Snapshot, cases []probeCase) {
	t.Helper()
	for _, c := range cases {
		d := policy.Decide(s, s.EndpointFor(c.src), s.EndpointFor(c.dst), c.proto, c.port)
		if d.Allowed != c.allowed {
			t.Errorf("%s -> %s %s/%d: the test expects allowed=%v, Decide says %s", c.src, c.dst, c.proto, c.port, c.allowed, d)
			continue
		}
		wait := waitDenied
		if c.allowed {
			wait = waitAllowed
		}
		if got := tp.probe(c.src, c.dst, c.proto, c.port, wait); got != c.allowed {
			t.Errorf("%s -> %s %s/%d: got through=%v, want %v (%s)", c.src, c.dst, c.proto, c.port, got, c.allowed, d)
		}
	}
}

func TestFixedPolicies(t *testing.T) { checkFixedPolicies(t) }

// checkFixedPolicies is TestFixedPolicies with the renderer's options.
func checkFixedPolicies(t *testing.T, opts ...Option) {
	tp := newTopology(t, fixedPods)
	s := fixedCluster(tp)
	r := tp.renderer(t, opts...)
	ir := policy.Compile(s, policy.Options{Node: "n1"})
	if _, err := r.Apply(ir); err != nil {
		t.Fatal(err)
	}
	a, b, c, d := tp.pods[0], tp.pods[1], tp.pods[2], tp.pods[3]
	T, U := policy.TCP, policy.UDP
	cases := []probeCase{
		{a.v4, b.v4, T, 81, true},          // web -> db 81
		{a.v6, b.v6, T, 81, true},          // the same, IPv6
		{a.v4, b.v4, T, 80, false},         // not that port
		{d.v4, b.v4, T, 81, false},         // not from other pods
		{remoteIP4, b.v4, T, 81, true},     // a web pod on another node
		{remoteIP6, b.v6, T, 80, false},    // not that port
		{n2IP4, b.v4, T, 81, false},        // another node is no web pod
		{nodeIP4, b.v4, T, 80, true},       // its own node, always (output hook)
		{nodeIP6, b.v6, T, 53, true},       //
		{externalIP4, b.v4, T, 81, false},  //
		{c.v4, a.v4, T, 80, true},          // client -> web's "http"
		{c.v6, a.v6, T, 80, true},          //
		{c.v4, a.v4, T, 81, false},         // not its http
		{c.v4, remoteIP4, T, 8080, true},   // the remote web pod's "http"
		{c.v4, remoteIP4, T, 80, false},    //
		{c.v4, externalIP4, T, 81, true},   // the ipBlock, any port
		{c.v6, externalIP6, T, 81, false},  // an IPv4 block
		{c.v4, n2IP4, T, 80, false},        // outside the block
		{c.v4, nodeIP4, T, 80, false},      // its node's addresses (input hook)
		{c.v4, nodeIP4, U, 53, true},       // UDP 53 anywhere
		{c.v6, n2IP6, U, 53, true},         //
		{c.v4, n2IP4, U, 80, false},        //
		{c.v4, externalIP4, U, 80, true},   // the block again
		{c.v4, b.v4, T, 81, false},         // client's egress denies
		{d.v4, a.v4, T, 80, true},          // nothing isolates these two
		{d.v6, externalIP6, T, 8080, true}, //
	}
	checkProbes(t, tp, s, cases)

	cnt, err := r.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if n := cnt.Allowed[RuleKey{Policy: "x/db", Direction: Ingress, Index: 0}].Packets; n < 3 {
		t.Errorf("x/db ingress rule 0 counted %d packets, want at least 3: %+v", n, cnt)
	}
	if n := cnt.Denied[PodDirection{Pod: b.key, Direction: Ingress}].Packets; n < 4 {
		t.Errorf("x/b's ingress denied %d packets, want at least 4: %+v", n, cnt)
	}
	if n := cnt.Allowed[RuleKey{Policy: "y/client", Direction: Egress, Index: 2}].Packets; n < 2 {
		t.Errorf("y/client egress rule 2 counted %d packets: %+v", n, cnt)
	}

	// Remove takes the table, and with it every restriction.
	if err := r.Remove(); err != nil {
		t.Fatal(err)
	}
	if tableExists(t, tp.node) {
		t.Fatal("Remove left the table")
	}
	if !tp.probe(c.v4, b.v4, T, 81, waitAllowed) {
		t.Error("after Remove, a connection is still denied")
	}
	if err := r.Remove(); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
}

// TestIncremental applies changes one after the other and checks that
// each commits only its difference, and that the result is what a resync
// from scratch writes; then that deleting every policy leaves nothing of
// theirs.
func TestIncremental(t *testing.T) {
	tp := newTopology(t, fixedPods)
	s := fixedCluster(tp)
	r := tp.renderer(t)
	compile := func() *policy.IR { return policy.Compile(s, policy.Options{Node: "n1"}) }
	if _, err := r.Apply(compile()); err != nil {
		t.Fatal(err)
	}
	resyncMatches := func(step string) {
		t.Helper()
		inc := dumpTable(t, tp.node)
		r2 := tp.renderer(t)
		if _, err := r2.Resync(compile()); err != nil {
			t.Fatal(err)
		}
		full := dumpTable(t, tp.node)
		if !slices.Equal(inc, full) {
			t.Fatalf("%s: incremental and full differ:\nincremental:\n%s\nfull:\n%s", step, strings.Join(inc, "\n"), strings.Join(full, "\n"))
		}
	}

	// A pod's label changes: it leaves the web peer set, and the client's
	// named-port set. No chain changes.
	s.Pods[0].Labels = map[string]string{"app": "web2"}
	st, err := r.Apply(compile())
	if err != nil {
		t.Fatal(err)
	}
	if st.ChainsAdded+st.ChainsRewritten+st.ChainsRemoved != 0 || st.SetsAdded+st.SetsRemoved != 0 || st.ElementsRemoved != 4 || st.ElementsAdded != 0 {
		t.Errorf("label change: %+v, want 4 elements out (two peer sets, two named-port sets) and nothing else", st)
	}
	checkProbes(t, tp, s, []probeCase{{tp.pods[0].v4, tp.pods[1].v4, policy.TCP, 81, false}, {tp.pods[2].v4, tp.pods[0].v4, policy.TCP, 80, false}})
	resyncMatches("label change")

	// Nothing changed: nothing to do.
	if st, err := r.Apply(compile()); err != nil || st != (Stats{}) {
		t.Errorf("same IR again: %+v, %v", st, err)
	}

	// One policy goes: x/b keeps its ingress chain (x/deny-db), rewritten.
	s.Policies = slices.Delete(s.Policies, 0, 1)
	if st, err = r.Apply(compile()); err != nil {
		t.Fatal(err)
	}
	if st.ChainsRewritten != 1 || st.ChainsAdded+st.ChainsRemoved != 0 || st.SetsRemoved != 3 {
		t.Errorf("x/db deleted: %+v, want one chain rewritten, its peer and port sets removed", st)
	}
	checkProbes(t, tp, s, []probeCase{{remoteIP4, tp.pods[1].v4, policy.TCP, 81, false}})
	resyncMatches("policy deleted")

	// Every policy goes: no pod chain, no set but the node's, no map entry.
	s.Policies = nil
	if st, err = r.Apply(compile()); err != nil {
		t.Fatal(err)
	}
	for _, line := range dumpTable(t, tp.node) {
		switch {
		case strings.HasPrefix(line, "chain forward"), strings.HasPrefix(line, "chain input"), strings.HasPrefix(line, "chain output"):
		case strings.HasPrefix(line, "set node4"), strings.HasPrefix(line, "set node6"):
		case strings.HasPrefix(line, "set layout-v"): // the table's layout marker
		case strings.HasPrefix(line, "set in") || strings.HasPrefix(line, "set out"):
			if !strings.HasSuffix(line, ": []") {
				t.Errorf("no policy, a map entry left: %s", line)
			}
		default:
			t.Errorf("no policy, left: %s", line)
		}
	}
	checkProbes(t, tp, s, []probeCase{{tp.pods[2].v4, nodeIP4, policy.TCP, 80, true}})

	// The table goes behind the Renderer's back: the next change fails as
	// a diff, and Apply resyncs.
	if err := tp.renderer(t).Remove(); err != nil {
		t.Fatal(err)
	}
	s.Policies = fixedCluster(tp).Policies
	if _, err := r.Apply(compile()); err != nil {
		t.Fatalf("apply after the table was removed: %v", err)
	}
	checkProbes(t, tp, s, []probeCase{{tp.pods[3].v4, tp.pods[1].v4, policy.TCP, 81, false}})
	resyncMatches("after a lost table")
}

// TestEstablishedFlowsStay pins the choice for connections that a new
// policy would deny: they go on (conntrack lets them through, as in
// Calico and Cilium) until they end; new ones are denied at once.
func TestEstablishedFlowsStay(t *testing.T) {
	tp := newTopology(t, fixedPods)
	s := fixedCluster(tp)
	s.Policies = nil
	r := tp.renderer(t)
	if _, err := r.Apply(policy.Compile(s, policy.Options{Node: "n1"})); err != nil {
		t.Fatal(err)
	}
	a, b := tp.pods[0], tp.pods[1]
	conn, err := tp.dialIn(a.v4, b.v4, 80, waitAllowed)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := echo(conn, "before", waitAllowed); err != nil {
		t.Fatal(err)
	}
	s.Policies = []*networkingv1.NetworkPolicy{netpol("x", "deny-all", nil, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)}
	if _, err := r.Apply(policy.Compile(s, policy.Options{Node: "n1"})); err != nil {
		t.Fatal(err)
	}
	if err := echo(conn, "after", waitAllowed); err != nil {
		t.Errorf("the established connection was cut: %v", err)
	}
	if tp.probe(a.v4, b.v4, policy.TCP, 80, waitDenied) {
		t.Error("a new connection got through the new policy")
	}
}
