package netpol

import (
	"cmp"
	"net/netip"
	"slices"
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/policy"
)

func TestSlimPodKey(t *testing.T) {
	obj, err := slimPod(apiPod("x", "a", self, map[string]string{"app": "a"}, "10.244.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil || key != "x/a" {
		t.Fatalf("key %q, %v; want x/a", key, err)
	}
	p := obj.(*podObj)
	if !slices.Equal(p.IPs, []netip.Addr{addr("10.244.0.2")}) || p.Labels["app"] != "a" || len(p.Ports) != 1 {
		t.Errorf("slim pod %+v", p.Pod)
	}
	if tomb := (cache.DeletedFinalStateUnknown{Key: "x/a", Obj: p}); func() any { o, _ := slimPod(tomb); return o }() != any(tomb) {
		t.Error("a tombstone is not passed through")
	}
}

func TestBuildSnapshotAdmitted(t *testing.T) {
	pod := func(name string, ips ...string) *podObj {
		p := &podObj{Pod: policy.Pod{Namespace: "x", Name: name, Node: self}}
		for _, ip := range ips {
			p.IPs = append(p.IPs, addr(ip))
		}
		return p
	}
	admitted := map[policy.PodKey][]netip.Addr{
		{Namespace: "x", Name: "new"}:  {addr("10.0.0.1")}, // status has none yet: used
		{Namespace: "x", Name: "old"}:  {addr("10.0.0.2")}, // status has its own: stale
		{Namespace: "x", Name: "gone"}: {addr("10.0.0.3")}, // not in the cache: stale
	}
	s, stale := buildSnapshot(contents{pods: []any{pod("new"), pod("old", "10.0.0.9")}},
		snapshotInput{node: self, admitted: admitted, localIPs: []netip.Addr{addr("::ffff:192.0.2.1")}})
	if !slices.Equal(s.Pods[0].IPs, []netip.Addr{addr("10.0.0.1")}) || !slices.Equal(s.Pods[1].IPs, []netip.Addr{addr("10.0.0.9")}) {
		t.Errorf("pods %+v", s.Pods)
	}
	slices.SortFunc(stale, func(a, b policy.PodKey) int { return cmp.Compare(a.Name, b.Name) })
	if want := []policy.PodKey{{Namespace: "x", Name: "gone"}, {Namespace: "x", Name: "old"}}; !slices.Equal(stale, want) {
		t.Errorf("stale %v, want %v", stale, want)
	}
	if len(s.Nodes) != 1 || s.Nodes[0].Name != self || !slices.Equal(s.Nodes[0].IPs, []netip.Addr{addr("192.0.2.1")}) {
		t.Errorf("nodes %+v, want this node with its local address unmapped", s.Nodes)
	}
}

func TestCountSeries(t *testing.T) {
	c := policyrules.Counters{
		Allowed: map[policyrules.RuleKey]policyrules.Count{{Policy: "x/db", Direction: policyrules.Ingress, Index: 1}: {Packets: 3}},
		Denied: map[policyrules.PodDirection]policyrules.Count{
			{Pod: policy.PodKey{Namespace: "x", Name: "a"}, Direction: policyrules.Ingress}: {Packets: 2},
			{Pod: policy.PodKey{Namespace: "x", Name: "b"}, Direction: policyrules.Ingress}: {Packets: 5},
			{Pod: policy.PodKey{Namespace: "x", Name: "b"}, Direction: policyrules.Egress}:  {Packets: 1},
		},
		Cluster: map[policyrules.ClusterRuleKey]policyrules.Count{
			{Policy: "deny-web", Tier: policy.AdminTier, Action: policy.Deny, Direction: policyrules.Ingress, Index: 0}: {Packets: 4},
		},
	}
	got := map[string]uint64{}
	for _, s := range countSeries(c) {
		k := "allowed"
		if s.denied {
			k = "denied"
		}
		if s.cluster {
			k = "cluster"
		}
		for _, l := range s.labels {
			k += " " + l
		}
		got[k] = s.packets
	}
	want := map[string]uint64{"allowed x db ingress 1": 3, "denied x ingress": 7, "denied x egress": 1, "cluster Admin deny-web Deny ingress 0": 4}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

// TestBuildSnapshotNodesAndClusterPolicies: every Node is in the
// snapshot (nodes peers), this node's with its local addresses added to
// a copy (the cache's stays as it was), and the cached
// ClusterNetworkPolicies as they are.
func TestBuildSnapshotNodesAndClusterPolicies(t *testing.T) {
	selfNode := &nodeObj{Node: policy.Node{Name: self, IPs: []netip.Addr{addr("198.18.0.1")}}}
	other := &nodeObj{Node: policy.Node{Name: "n2", IPs: []netip.Addr{addr("198.18.0.2")}, Labels: map[string]string{"role": "db"}}}
	cnp := &clusterPolicyObj{ClusterPolicy: policy.ClusterPolicy{Name: "deny", Tier: policy.AdminTier}}
	s, _ := buildSnapshot(contents{nodes: []any{other, selfNode}, clusterPolicies: []any{cnp}},
		snapshotInput{node: self, localIPs: []netip.Addr{addr("192.0.2.1")}})
	if len(s.Nodes) != 2 || s.Nodes[0].Name != "n2" || s.Nodes[0].Labels["role"] != "db" ||
		!slices.Equal(s.Nodes[1].IPs, []netip.Addr{addr("198.18.0.1"), addr("192.0.2.1")}) {
		t.Errorf("nodes %+v, want n2 as cached and this node with its local address", s.Nodes)
	}
	if !slices.Equal(selfNode.IPs, []netip.Addr{addr("198.18.0.1")}) {
		t.Errorf("the cached Node was changed: %v", selfNode.IPs)
	}
	if len(s.ClusterPolicies) != 1 || s.ClusterPolicies[0].Name != "deny" {
		t.Errorf("cluster policies %+v", s.ClusterPolicies)
	}
	s, _ = buildSnapshot(contents{}, snapshotInput{node: self, localIPs: []netip.Addr{addr("192.0.2.1")}})
	if len(s.Nodes) != 1 || s.Nodes[0].Name != self || len(s.ClusterPolicies) != 0 {
		t.Errorf("without a cached Node: %+v, want this node with its local address", s)
	}
}
