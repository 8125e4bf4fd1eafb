package e2e

import (
	"net/netip"
	"os"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/policy"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// TestPolicyNotBypassedBySpoofing: a NetworkPolicy lets a victim pod be
// reached only from a friend pod (podSelector) and from an outside
// prefix (ipBlock). An attacker pod sends UDP, IPv4 and IPv6, to a
// victim on its own node and to one on another node: from its own
// address (the policy drops it: the test sees policy at work), and with
// the friend's address and an address of the ipBlock as forged sources
// (the source guard drops them at the attacker's veth, so the policy
// never sees them); none arrives, while the friend's own packets do.
// host-gw and VXLAN; rp_filter 0 on every node. The policy is compiled
// and programmed per node as the agent's policy service does.
func TestPolicyNotBypassedBySpoofing(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tc := range crossNodeModes {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.u(t), tc.mode, true)
			nodes := c.startNodes(2)
			c.AddPod(nodes[0])
			for _, n := range nodes {
				setRPFilterOff(t, n)
			}
			attacker, friend, localVictim := nodes[0].Pods[0], nodes[0].Pods[1], nodes[0].Pods[2]
			remoteVictim := nodes[1].Pods[0]
			roles := map[*e2enet.Pod]string{attacker: "attacker", friend: "friend", localVictim: "victim", remoteVictim: "victim", nodes[1].Pods[1]: "bystander"}
			snap := spoofPolicySnapshot(roles)
			for _, n := range nodes {
				programPolicy(t, n, snap)
			}
			for _, victim := range []*e2enet.Pod{localVictim, remoteVictim} {
				for _, v4 := range []bool{true, false} {
					own, friendIP, dst := attacker.IP, friend.IP, victim.IP
					outside := netip.MustParseAddr("10.200.0.9")
					if !v4 {
						own, friendIP, dst, outside = attacker.IP6, friend.IP6, victim.IP6, netip.MustParseAddr("fd00:200::9")
					}
					where := "on its node"
					if victim.Node != attacker.Node {
						where = "on the other node"
					}
					// Routed: the next hop is the host end.
					legit := testutil.UDPArrivals(t, friend.NS, victim.NS, podMAC(t, friend), dataplane.RoutedHostMAC, dst, []netip.Addr{friendIP}, spoofTries)
					if legit[friendIP] == 0 {
						t.Fatalf("IPv4=%v, victim %s: the friend's own packets did not arrive: the test proves nothing", v4, where)
					}
					got := testutil.UDPArrivals(t, attacker.NS, victim.NS, podMAC(t, attacker), dataplane.RoutedHostMAC, dst,
						[]netip.Addr{own, friendIP, outside}, spoofTries)
					if got[own] != 0 {
						t.Errorf("IPv4=%v, victim %s: %d of %d packets from the attacker's own address arrived: the policy does not hold", v4, where, got[own], spoofTries)
					}
					for _, src := range []netip.Addr{friendIP, outside} {
						if got[src] != 0 {
							t.Errorf("IPv4=%v, victim %s: %d of %d packets forged from %s, which the policy allows, arrived", v4, where, got[src], spoofTries, src)
						}
					}
				}
			}
			c.DelPods()
			for _, n := range nodes {
				c.CheckMasqClean(n)
				c.CheckPodsGone(n)
			}
		})
	}
}

func setRPFilterOff(t *testing.T, n *e2enet.Node) {
	t.Helper()
	err := netns.Do(n.NS.Path, func() error {
		for _, k := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+k+"/rp_filter", []byte("0"), 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// spoofPolicySnapshot: the pods by role in one namespace, and a policy
// that lets victims be reached from friends and from 10.200.0.0/16 and
// fd00:200::/64 only.
func spoofPolicySnapshot(roles map[*e2enet.Pod]string) *policy.Snapshot {
	const ns = "e2e"
	s := &policy.Snapshot{Namespaces: []policy.Namespace{{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}}}}
	for p, role := range roles {
		pod := policy.Pod{Namespace: ns, Name: p.ID, Node: p.Node.Name, Labels: map[string]string{"role": role}, IPs: []netip.Addr{p.IP}}
		if p.IP6.IsValid() {
			pod.IPs = append(pod.IPs, p.IP6)
		}
		s.Pods = append(s.Pods, pod)
	}
	s.Policies = []*networkingv1.NetworkPolicy{{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victims-hear-friends"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "victim"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "friend"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.200.0.0/16"}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "fd00:200::/64"}},
			}}},
		},
	}}
	return s
}

// programPolicy compiles snap for n and writes it in n's namespace, and
// removes the table when the test ends.
func programPolicy(t *testing.T, n *e2enet.Node, snap *policy.Snapshot) {
	t.Helper()
	var r *policyrules.Renderer
	err := netns.Do(n.NS.Path, func() error {
		var err error
		if r, err = policyrules.New(n.Name); err != nil {
			return err
		}
		_, err = r.Apply(policy.Compile(snap, policy.Options{Node: n.Name}))
		return err
	})
	if err != nil {
		t.Fatalf("policy on %s: %v", n.Name, err)
	}
	t.Cleanup(func() {
		if err := r.Remove(); err != nil {
			t.Errorf("remove the policy table of %s: %v", n.Name, err)
		}
		r.Close()
	})
}
