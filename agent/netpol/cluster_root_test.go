package netpol

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/podnet/podnet/dataplane/policyrules"
	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/policy"
)

// reaches sends a few datagrams from pod's namespace to dst, from a
// socket of its own (a new flow: conntrack lets an allowed flow go on
// after a policy that would deny it, so every probe needs a new source
// port), and reports whether srv received any.
func reaches(t testing.TB, from *testPod, dst netip.AddrPort, srv *udpServer) bool {
	t.Helper()
	before, _ := srv.from(from.addr())
	var c *net.UDPConn
	if err := netns.Do(from.ns, func() (err error) { c, err = net.ListenUDP("udp4", nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 10 {
		_, _ = c.WriteToUDPAddrPort([]byte("x"), dst)
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	after, _ := srv.from(from.addr())
	return after > before
}

// TestClusterPolicyTiers runs the service, its handshake and the podnet
// plugin in a fresh node namespace with pods in namespaces of their own,
// and checks with packets what ClusterNetworkPolicy's tiers do: the
// service enforces NetworkPolicy with the CRD absent (and never lists
// ClusterNetworkPolicies then); once it is served, an Admin Deny
// overrides a NetworkPolicy's allow, an Admin Pass of higher precedence
// hands the connection back to NetworkPolicy, a Baseline Deny applies to
// a pod no NetworkPolicy selects (whose ADD waits for its rules), and a
// nodes peer matches another Node's address by its labels.
func TestClusterPolicyTiers(t *testing.T) {
	n := newNode(t)
	n.c.noCRD.Store(true)
	n.c.addPolicy(denyFrom("x", "np", "db", "web")) // db takes web only
	db, web, other, lone := n.newPod("db", 1), n.newPod("web", 2), n.newPod("other", 3), n.newPod("lone", 4)
	for _, p := range []*testPod{db, web, other, lone} {
		n.c.addPod(apiPod("x", p.name, self, map[string]string{"app": p.name}))
	}
	s := n.startAgent()
	itestutil.Eventually(t, "ready without the CRD", 10*time.Second, func() bool { return s.Ready() == nil })
	for _, p := range []*testPod{db, web, other} {
		n.add(p, true)
		n.c.updatePod(apiPod("x", p.name, self, map[string]string{"app": p.name}, p.addr().String()))
	}
	dbSrv, loneSrv := listenUDP(t, db.ns, 9000), listenUDP(t, lone.ns, 9000)
	toDB, toLone := netip.AddrPortFrom(db.addr(), 9000), netip.AddrPortFrom(lone.addr(), 9000)
	expect := func(what string, from *testPod, dst netip.AddrPort, srv *udpServer, allowed bool) {
		t.Helper()
		itestutil.Eventually(t, what, 10*time.Second, func() bool { return reaches(t, from, dst, srv) == allowed })
	}

	// Without the CRD: NetworkPolicy alone.
	expect("web reaches db (NetworkPolicy allows it)", web, toDB, dbSrv, true)
	expect("other does not reach db (NetworkPolicy isolates db)", other, toDB, dbSrv, false)
	if err := s.Ready(); err != nil {
		t.Fatalf("not ready without the CRD: %v", err)
	}

	// The CRD is installed: the service follows ClusterNetworkPolicies.
	n.c.noCRD.Store(false)
	n.c.addClusterPolicy(cnp("deny-web", cnpv1beta1.AdminTier, 10, "db", cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, "web"))
	expect("web denied by the Admin Deny, whatever NetworkPolicy allows", web, toDB, dbSrv, false)
	cnt, ok := s.counters()
	key := policyrules.ClusterRuleKey{Policy: "deny-web", Tier: policy.AdminTier, Action: policy.Deny, Direction: policyrules.Ingress}
	if !ok || cnt.Cluster[key].Packets == 0 {
		t.Errorf("the Admin Deny counted %+v (read: %v), want packets", cnt.Cluster[key], ok)
	}

	n.c.addClusterPolicy(cnp("pass-web", cnpv1beta1.AdminTier, 5, "db", cnpv1beta1.ClusterNetworkPolicyRuleActionPass, "web"))
	expect("web reaches db again: the Pass before the Deny defers to NetworkPolicy", web, toDB, dbSrv, true)
	expect("other still denied by NetworkPolicy after the Pass", other, toDB, dbSrv, false)

	// A Baseline Deny on a pod no NetworkPolicy selects. Its ADD is a
	// selected pod's: it returns with the pod's rules in place.
	n.c.addClusterPolicy(cnp("base-lone", cnpv1beta1.BaselineTier, 10, "lone", cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, "web"))
	itestutil.Eventually(t, "the Baseline policy cached", 10*time.Second, func() bool { return len(s.clusterPolicyList()) == 3 })
	n.add(lone, true)
	if tb := readTable(t, n.host); !slices.Contains(tb.maps["in4"], lone.addr().String()) {
		t.Errorf("when lone's ADD returned, in4 held %v, want its address %s", tb.maps["in4"], lone.addr())
	}
	n.c.updatePod(apiPod("x", lone.name, self, map[string]string{"app": lone.name}, lone.addr().String()))
	expect("web denied by the Baseline Deny", web, toLone, loneSrv, false)
	expect("other reaches lone: no Baseline rule matches it", other, toLone, loneSrv, true)

	// A nodes peer: another Node's address, by its labels. The address
	// is on the node namespace's lo, where a server listens.
	if err := netns.Do(n.host, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 18, 0, 2), Mask: net.CIDRMask(32, 32)}})
	}); err != nil {
		t.Fatal(err)
	}
	nodeSrv := listenUDP(t, n.host, 9000)
	toNode := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), 9000)
	expect("other reaches the node address before any policy is about it", other, toNode, nodeSrv, true)
	n.c.addLabeledNode("n2", map[string]string{"role": "infra"}, "198.18.0.2")
	nodes := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-infra-nodes"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{Tier: cnpv1beta1.AdminTier, Priority: 20,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Pods: &cnpv1beta1.NamespacedPod{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}}},
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "infra"}}}}}}},
	}
	n.c.addClusterPolicy(nodes)
	expect("other denied the infra node by the nodes peer", other, toNode, nodeSrv, false)
	expect("web, which the policy does not select, reaches it", web, toNode, nodeSrv, true)
}
