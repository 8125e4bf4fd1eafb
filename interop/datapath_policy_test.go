package interop

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/policy"
)

// policyNode is the node name the policy paths compile for, and
// policySnapshotNS the namespace of their pods.
const (
	policyNode       = "dp-node"
	policySnapshotNS = "dp"
)

// policyPath is the routed same-node path with n NetworkPolicies that
// select the server, programmed in the node namespace by policyrules as
// the agent's policy service does. Each policy allows ingress from pods
// with a label of its own, one of n-1 other pods (in the snapshot only,
// off this node) or, for the last, the client: the client's first
// packet is judged against every rule of the server's chain, the worst
// case. With n = 0 the table is there and isolates nothing. cnps Admin
// ClusterNetworkPolicies select the server too, each denying
// ingress from pods of a label the client does not have: the client's
// first packet is judged against each of their rules before the
// NetworkPolicies' (issue 23's "100 ClusterNetworkPolicies beside 1,000
// NetworkPolicies").
func policyPath(t testing.TB, n, cnps int) *dpPath {
	t.Helper()
	p, _ := policyPathWith(t, n, cnps)
	return p
}

// policyPathWith is policyPath with the renderer's options, and returns
// the IR it programmed as well.
func policyPathWith(t testing.TB, n, cnps int, opts ...policyrules.Option) (*dpPath, *policy.IR) {
	t.Helper()
	p := sameNode(t, podnetConf(t, "routed"))
	s := policySnapshot(p.clientAddr, p.addr, n)
	addClusterPolicies(s, cnps)
	ir := policy.Compile(s, policy.Options{Node: policyNode})
	f, err := os.Open(filepath.Join("/run/netns", p.node))
	if err != nil {
		t.Fatal(err)
	}
	r, err := policyrules.New(policyNode, append([]policyrules.Option{policyrules.WithNetNSFd(int(f.Fd()))}, opts...)...)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	// Before the pods' DEL (cleanups run last first).
	t.Cleanup(func() {
		if err := r.Remove(); err != nil {
			t.Errorf("remove the policy table: %v", err)
		}
		r.Close()
		f.Close()
	})
	if _, err := r.Apply(ir); err != nil {
		t.Fatalf("program %d policies: %v", n, err)
	}
	return p, ir
}

// policySnapshot is the cluster policySnapshot's paths model: a client
// and a server pod on the node, n-1 other pods elsewhere, and n policies
// selecting the server, the i-th allowing pods labelled peer=p<i>.
func policySnapshot(client, server netip.Addr, n int) *policy.Snapshot {
	const ns = policySnapshotNS
	s := &policy.Snapshot{
		Namespaces: []policy.Namespace{{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		Pods: []policy.Pod{
			{Namespace: ns, Name: "server", Node: policyNode, Labels: map[string]string{"app": "server"}, IPs: []netip.Addr{server}},
			{Namespace: ns, Name: "client", Node: policyNode, Labels: map[string]string{"app": "client", "peer": fmt.Sprintf("p%d", n-1)}, IPs: []netip.Addr{client}},
		},
	}
	for i := range n {
		if i < n-1 {
			s.Pods = append(s.Pods, policy.Pod{Namespace: ns, Name: fmt.Sprintf("peer-%d", i), Node: "elsewhere",
				Labels: map[string]string{"peer": fmt.Sprintf("p%d", i)},
				IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)})}})
		}
		s.Policies = append(s.Policies, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("allow-%04d", i)},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"peer": fmt.Sprintf("p%d", i)}}}},
				}},
			},
		})
	}
	return s
}

// addClusterPolicies adds n Admin-tier ClusterNetworkPolicies to s, the
// i-th at priority i, whose subject is the server and whose
// one ingress rule denies pods labelled cnp-peer=c<i>: a pod of its own
// off the node, never the client, so that the client's packets walk
// every one of them and none decides.
func addClusterPolicies(s *policy.Snapshot, n int) {
	for i := range n {
		s.Pods = append(s.Pods, policy.Pod{Namespace: policySnapshotNS, Name: fmt.Sprintf("cnp-peer-%d", i), Node: "elsewhere",
			Labels: map[string]string{"cnp-peer": "c" + strconv.Itoa(i)},
			IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)})}})
		s.ClusterPolicies = append(s.ClusterPolicies, policy.ClusterPolicyFromAPI(&cnpv1beta1.ClusterNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("admin-%03d", i)},
			Spec: cnpv1beta1.ClusterNetworkPolicySpec{
				Tier:     cnpv1beta1.AdminTier,
				Priority: int32(i),
				Subject: cnpv1beta1.ClusterNetworkPolicySubject{Pods: &cnpv1beta1.NamespacedPod{
					NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": policySnapshotNS}},
					PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
				}},
				Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
					Name:   "deny-c" + strconv.Itoa(i),
					Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
					From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{
						PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"cnp-peer": "c" + strconv.Itoa(i)}},
					}}},
				}},
			},
		}))
	}
}

// TestPolicySnapshot: the client is allowed by the last policy alone,
// and nothing else reaches the server.
func TestPolicySnapshot(t *testing.T) {
	client, server := netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("10.244.1.3")
	s := policySnapshot(client, server, 100)
	d := policy.Decide(s, s.EndpointFor(client), s.EndpointFor(server), policy.TCP, 5201)
	if !d.Allowed {
		t.Fatalf("client to server: %v, want allowed", d)
	}
	if d := policy.Decide(s, s.EndpointFor(netip.MustParseAddr("10.99.0.7")), s.EndpointFor(server), policy.TCP, 5201); !d.Allowed {
		t.Errorf("peer-7 to server: %v, want allowed by allow-0007", d)
	}
	if d := policy.Decide(s, s.EndpointFor(netip.MustParseAddr("10.98.0.1")), s.EndpointFor(server), policy.TCP, 5201); d.Allowed {
		t.Errorf("an outside address to server: %v, want denied", d)
	}
	addClusterPolicies(s, 10)
	if d := policy.Decide(s, s.EndpointFor(client), s.EndpointFor(server), policy.TCP, 5201); !d.Allowed {
		t.Errorf("client to server beside ClusterNetworkPolicies: %v, want allowed", d)
	}
	if d := policy.Decide(s, s.EndpointFor(netip.MustParseAddr("10.97.0.7")), s.EndpointFor(server), policy.TCP, 5201); d.Allowed {
		t.Errorf("cnp-peer-7 to server: %v, want denied by admin-007", d)
	}
	ir := policy.Compile(s, policy.Options{Node: policyNode})
	if got := len(ir.Pods); got != 1 {
		t.Fatalf("the IR isolates %d pods on the node, want the server alone", got)
	}
	if in := ir.Pods[0].Ingress; len(in.Admin) != 10 || len(in.Rules) != 100 {
		t.Errorf("the server's ingress has %d Admin rules and %d NetworkPolicy rules, want 10 and 100", len(in.Admin), len(in.Rules))
	}
}
