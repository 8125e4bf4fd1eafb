package policyrules

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/podnet/podnet/policy"
)

// TestKernelMatchesDecideCluster is TestKernelMatchesDecide with
// ClusterNetworkPolicies: on random clusters with NetworkPolicies and
// one to four ClusterNetworkPolicies of both tiers (few priorities, so
// ties happen; Accept, Deny and Pass; pods, namespaces, networks and
// nodes peers; ports, ranges and named ports), real packets get through
// the node's kernel exactly when policy.Decide allows them.
func TestKernelMatchesDecideCluster(t *testing.T) {
	checkKernelMatchesDecide(t, randomClusterWithTiers)
}

// TestKernelMatchesDecideClusterDenyLog: the same with the deny log,
// which logs before each tier's Deny and must not change a verdict.
func TestKernelMatchesDecideClusterDenyLog(t *testing.T) {
	checkKernelMatchesDecide(t, randomClusterWithTiers, WithDenyLog(DenyLog{Group: 7371, Rate: 10, Burst: 20}))
}

func randomClusterWithTiers(rng *rand.Rand, tp *topology) *policy.Snapshot {
	s := randomCluster(rng, tp)
	for i := range s.Nodes {
		s.Nodes[i].Labels = randomLabels(rng, "role")
	}
	for i := range 1 + rng.IntN(4) {
		s.ClusterPolicies = append(s.ClusterPolicies, policy.ClusterPolicyFromAPI(randomClusterPolicy(rng, fmt.Sprintf("cnp%d", i))))
	}
	return s
}

func labelSelector(m map[string]string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: m}
}

func randomClusterPolicy(rng *rand.Rand, name string) *cnp.ClusterNetworkPolicy {
	p := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Tier = pickOne(rng, []cnp.Tier{cnp.AdminTier, cnp.AdminTier, cnp.BaselineTier})
	p.Spec.Priority = pickOne(rng, []int32{1, 5, 5, 10})
	if rng.IntN(2) == 0 {
		p.Spec.Subject.Namespaces = labelSelector(randomSelector(rng, "team", "env", "kubernetes.io/metadata.name"))
	} else {
		p.Spec.Subject.Pods = &cnp.NamespacedPod{
			NamespaceSelector: *labelSelector(randomSelector(rng, "team", "env")),
			PodSelector:       *labelSelector(randomSelector(rng, "app", "tier")),
		}
	}
	action := func() cnp.ClusterNetworkPolicyRuleAction {
		return pickOne(rng, []cnp.ClusterNetworkPolicyRuleAction{
			cnp.ClusterNetworkPolicyRuleActionAccept, cnp.ClusterNetworkPolicyRuleActionDeny, cnp.ClusterNetworkPolicyRuleActionPass})
	}
	for range rng.IntN(3) {
		r := cnp.ClusterNetworkPolicyIngressRule{Action: action(), Protocols: randomProtocols(rng)}
		for _, peer := range randomClusterPeers(rng, false) {
			r.From = append(r.From, cnp.ClusterNetworkPolicyIngressPeer{Namespaces: peer.Namespaces, Pods: peer.Pods})
		}
		p.Spec.Ingress = append(p.Spec.Ingress, r)
	}
	for range rng.IntN(3) {
		p.Spec.Egress = append(p.Spec.Egress, cnp.ClusterNetworkPolicyEgressRule{Action: action(), To: randomClusterPeers(rng, true), Protocols: randomProtocols(rng)})
	}
	return p
}

var networks = []cnp.CIDR{"10.244.0.0/16", "10.0.0.0/8", "198.18.0.0/15", "198.19.0.0/16", "0.0.0.0/0", "10.245.0.7/32",
	"fd00::/8", "fd00:244::/64", "::/0", "fd00:198:18::/64"}

func randomClusterPeers(rng *rand.Rand, egress bool) []cnp.ClusterNetworkPolicyEgressPeer {
	kinds := 2
	if egress {
		kinds = 4
	}
	var out []cnp.ClusterNetworkPolicyEgressPeer
	for range 1 + rng.IntN(2) {
		var p cnp.ClusterNetworkPolicyEgressPeer
		switch rng.IntN(kinds) {
		case 0:
			p.Namespaces = labelSelector(randomSelector(rng, "team", "env", "kubernetes.io/metadata.name"))
		case 1:
			p.Pods = &cnp.NamespacedPod{
				NamespaceSelector: *labelSelector(randomSelector(rng, "team", "env")),
				PodSelector:       *labelSelector(randomSelector(rng, "app", "tier")),
			}
		case 2:
			p.Networks = []cnp.CIDR{pickOne(rng, networks), pickOne(rng, networks)}
			if p.Networks[0] == p.Networks[1] {
				p.Networks = p.Networks[:1]
			}
		case 3:
			p.Nodes = labelSelector(randomSelector(rng, "role"))
		}
		out = append(out, p)
	}
	return out
}

func randomProtocols(rng *rand.Rand) []cnp.ClusterNetworkPolicyProtocol {
	var out []cnp.ClusterNetworkPolicyProtocol
	for range rng.IntN(3) {
		var p cnp.ClusterNetworkPolicyProtocol
		switch rng.IntN(6) {
		case 0:
			p.TCP = &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnp.Port{Number: 80}}
		case 1:
			p.TCP = &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnp.Port{Range: &cnp.PortRange{Start: 80, End: 81}}}
		case 2:
			p.UDP = &cnp.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnp.Port{Number: 53}}
		case 3:
			p.TCP = &cnp.ClusterNetworkPolicyProtocolTCP{}
		case 4:
			p.TCP = &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnp.Port{Range: &cnp.PortRange{Start: 8000, End: 8080}}}
		case 5:
			p.DestinationNamedPort = pickOne(rng, []string{"http", "dns", "alt"})
		}
		out = append(out, p)
	}
	return out
}

func clusterString(p *policy.ClusterPolicy) string {
	rules := func(rs []policy.ClusterRule) string {
		var out []string
		for _, r := range rs {
			s := r.Action.String()
			for _, peer := range r.Peers {
				switch {
				case peer.Pods != nil:
					s += fmt.Sprintf(" ns %v", peer.Pods.Namespaces.MatchLabels)
					if peer.Pods.Pods != nil {
						s += fmt.Sprintf(" pods %v", peer.Pods.Pods.MatchLabels)
					}
				case peer.Nodes != nil:
					s += fmt.Sprintf(" nodes %v", peer.Nodes.MatchLabels)
				default:
					s += fmt.Sprintf(" nets %v", peer.Networks)
				}
			}
			s += fmt.Sprintf(" protocols %v", r.Protocols)
			if r.Broken != "" {
				s += " broken: " + r.Broken
			}
			out = append(out, "("+s+")")
		}
		return strings.Join(out, " ")
	}
	sub := fmt.Sprintf("ns %v", p.Subject.Namespaces.MatchLabels)
	if p.Subject.Pods != nil {
		sub += fmt.Sprintf(" pods %v", p.Subject.Pods.MatchLabels)
	}
	return fmt.Sprintf("%s %s %d subject %s in %s out %s", p.Name, p.Tier, p.Priority, sub, rules(p.Ingress), rules(p.Egress))
}

// TestKernelMatchesDecideClusterFlowLabels: the same with the flow labels
// and the flow log beside the deny log, which label accepted connections
// and log before each drop, and must not change a verdict.
func TestKernelMatchesDecideClusterFlowLabels(t *testing.T) {
	checkKernelMatchesDecide(t, randomClusterWithTiers, WithFlowLabels(FlowLog{}), WithDenyLog(DenyLog{Group: 7370, Rate: 10, Burst: 20}))
}
