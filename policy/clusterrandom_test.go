package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// addRandomClusterPolicies gives s's nodes random labels and adds up to
// four random ClusterNetworkPolicies, now and then one the API server
// would refuse, so that the differential test covers the tiers and
// their interplay with NetworkPolicy.
func addRandomClusterPolicies(r *rand.Rand, s *Snapshot) {
	for i := range s.Nodes {
		s.Nodes[i].Labels = randomLabels(r, nodeKeys)
	}
	for i := range r.IntN(5) {
		p := randomClusterPolicy(r, fmt.Sprintf("cnp%d", i))
		s.ClusterPolicies = append(s.ClusterPolicies, ClusterPolicyFromAPI(p))
	}
}

var nodeKeys = []string{"role", "zone"}

func randomClusterPolicy(r *rand.Rand, name string) *cnp.ClusterNetworkPolicy {
	p := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Tier = pick(r, []cnp.Tier{cnp.AdminTier, cnp.AdminTier, cnp.BaselineTier})
	if r.IntN(30) == 0 {
		p.Spec.Tier = "Other"
	}
	// Few priorities, so that ties are common.
	p.Spec.Priority = pick(r, []int32{0, 5, 5, 10})
	nsKeysAll := append(slices.Clone(nsKeys), "kubernetes.io/metadata.name")
	switch r.IntN(7) {
	case 0, 1, 2:
		p.Spec.Subject.Namespaces = randomSelector(r, nsKeysAll)
	case 6:
		if r.IntN(4) == 0 { // invalid: both, or none
			if r.IntN(2) == 0 {
				p.Spec.Subject.Namespaces = randomSelector(r, nsKeysAll)
				p.Spec.Subject.Pods = randomNamespacedPod(r)
			}
			break
		}
		fallthrough
	default:
		p.Spec.Subject.Pods = randomNamespacedPod(r)
	}
	for range r.IntN(4) {
		rule := cnp.ClusterNetworkPolicyIngressRule{Action: randomAction(r), Protocols: randomProtocols(r)}
		for _, peer := range randomClusterPeers(r, false) {
			rule.From = append(rule.From, cnp.ClusterNetworkPolicyIngressPeer{Namespaces: peer.Namespaces, Pods: peer.Pods})
		}
		p.Spec.Ingress = append(p.Spec.Ingress, rule)
	}
	for range r.IntN(4) {
		p.Spec.Egress = append(p.Spec.Egress, cnp.ClusterNetworkPolicyEgressRule{
			Action: randomAction(r), To: randomClusterPeers(r, true), Protocols: randomProtocols(r)})
	}
	return p
}

func randomNamespacedPod(r *rand.Rand) *cnp.NamespacedPod {
	return &cnp.NamespacedPod{
		NamespaceSelector: *randomSelector(r, append(slices.Clone(nsKeys), "kubernetes.io/metadata.name")),
		PodSelector:       *randomSelector(r, podKeys),
	}
}

func randomAction(r *rand.Rand) cnp.ClusterNetworkPolicyRuleAction {
	if r.IntN(40) == 0 {
		return "Allow" // unknown: fails closed
	}
	return pick(r, []cnp.ClusterNetworkPolicyRuleAction{
		cnp.ClusterNetworkPolicyRuleActionAccept, cnp.ClusterNetworkPolicyRuleActionDeny, cnp.ClusterNetworkPolicyRuleActionPass})
}

func randomClusterPeers(r *rand.Rand, egress bool) []cnp.ClusterNetworkPolicyEgressPeer {
	var peers []cnp.ClusterNetworkPolicyEgressPeer
	n := 1 + r.IntN(2)
	if r.IntN(40) == 0 {
		n = 0 // invalid: no peers
	}
	kinds := 2
	if egress {
		kinds = 5
	}
	for range n {
		var p cnp.ClusterNetworkPolicyEgressPeer
		switch r.IntN(kinds) {
		case 0:
			p.Namespaces = randomSelector(r, append(slices.Clone(nsKeys), "kubernetes.io/metadata.name"))
		case 1:
			p.Pods = randomNamespacedPod(r)
		case 2, 3:
			for range 1 + r.IntN(2) {
				c := pick(r, cidrs4)
				if r.IntN(3) == 0 {
					c = pick(r, cidrs6)
				}
				p.Networks = append(p.Networks, cnp.CIDR(c)) // 10.0.0.3/24 is not masked: broken
			}
		case 4:
			if r.IntN(6) == 0 {
				p.DomainNames = []cnp.DomainName{"example.com"}
			} else {
				p.Nodes = randomSelector(r, nodeKeys)
			}
		}
		if r.IntN(40) == 0 {
			p = cnp.ClusterNetworkPolicyEgressPeer{} // a newer API's peer: fails closed
		}
		peers = append(peers, p)
	}
	return peers
}

func randomProtocols(r *rand.Rand) []cnp.ClusterNetworkPolicyProtocol {
	var out []cnp.ClusterNetworkPolicyProtocol
	for range r.IntN(3) {
		var dp *cnp.Port
		switch r.IntN(4) {
		case 0: // every port
		case 1, 2:
			dp = &cnp.Port{Number: pick(r, []int32{53, 80, 81, 8080, 9090})}
		case 3:
			s := pick(r, []int32{53, 80, 81, 8000})
			dp = &cnp.Port{Range: &cnp.PortRange{Start: s, End: s + pick(r, []int32{1, 5, 100, 0})}}
		}
		var p cnp.ClusterNetworkPolicyProtocol
		switch r.IntN(5) {
		case 0, 1:
			p.TCP = &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: dp}
		case 2:
			p.UDP = &cnp.ClusterNetworkPolicyProtocolUDP{DestinationPort: dp}
		case 3:
			p.SCTP = &cnp.ClusterNetworkPolicyProtocolSCTP{DestinationPort: dp}
		case 4:
			p.DestinationNamedPort = pick(r, portNames)
		}
		out = append(out, p)
	}
	return out
}
