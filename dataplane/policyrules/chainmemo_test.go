package policyrules

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"

	"github.com/podnet/podnet/policy"
)

// TestChainMemo: a Renderer's builds, which take from the last build the
// chains of pods whose rules did not change, are the builds from scratch,
// through a run of admissions (policy.IR.WithPodAddrs: the same rules,
// new addresses) and compiles, with and without folding (a chain that
// tried folding is built again), the deny log and the flow labels.
func TestChainMemo(t *testing.T) {
	opts := []buildOptions{{}, {denyLog: true, flow: true}, {fold: foldLimits{min: 2, cap: 6, budget: 40}}}
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 0xc4a1))
		s := memoCluster(rng)
		for _, o := range opts {
			r := &Renderer{node: "n1", denyLog: map[bool]*DenyLog{true: {Group: 7}}[o.denyLog],
				flowLog: map[bool]*FlowLog{true: {}}[o.flow], fold: o.fold}
			check := func(what string, ir *policy.IR) {
				t.Helper()
				got := r.build(ir)
				want := buildWith(ir, "n1", o)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d %+v, %s: the build with the memo differs from one without", seed, o, what)
				}
			}
			ir := policy.Compile(s, policy.Options{Node: "n1"})
			check("compiled", ir)
			for i := range s.Pods {
				p := &s.Pods[i]
				if p.Node != "n1" || rng.IntN(3) == 0 {
					continue
				}
				a := []netip.Addr{netip.AddrFrom4([4]byte{10, 9, byte(seed), byte(i + 1)})}
				next, ok := ir.WithPodAddrs(p.Key(), a, func(netip.Addr) bool { return false })
				if !ok {
					t.Fatalf("seed %d: WithPodAddrs(%s) refused", seed, p.Key())
				}
				ir = next
				check(fmt.Sprintf("%s admitted", p.Key()), ir)
			}
			check("compiled again", policy.Compile(s, policy.Options{Node: "n1"}))
			// Changes between compiles: the memo keeps the chains of the
			// pods whose rules come out equal, and only those.
			for step := range 6 {
				changeMemoCluster(rng, s, step)
				check(fmt.Sprintf("change %d compiled", step), policy.Compile(s, policy.Options{Node: "n1"}))
			}
		}
	}
}

// changeMemoCluster changes s as step says: one policy replaced by
// another of its name, a pod of n1 relabelled, or a policy gone (one
// added when there is one left).
func changeMemoCluster(rng *rand.Rand, s *policy.Snapshot, step int) {
	switch step % 3 {
	case 0:
		i := rng.IntN(len(s.Policies))
		s.Policies[i] = randomPolicy(rng, s.Policies[i].Name)
	case 1:
		s.Pods[rng.IntN(8)].Labels = randomLabels(rng, "app", "tier")
	default:
		if len(s.Policies) > 1 {
			s.Policies = s.Policies[:len(s.Policies)-1]
		} else {
			s.Policies = append(s.Policies, randomPolicy(rng, "np-added"))
		}
	}
}

// memoCluster is 8 pods of n1, half without addresses, a remote pod, and
// 2 to 9 random policies.
func memoCluster(rng *rand.Rand) *policy.Snapshot {
	s := &policy.Snapshot{Nodes: []policy.Node{{Name: "n1", IPs: []netip.Addr{nodeIP4}}, {Name: "n2", IPs: []netip.Addr{n2IP4}}}}
	for _, ns := range nsNames {
		l := randomLabels(rng, "team", "env")
		l["kubernetes.io/metadata.name"] = ns
		s.Namespaces = append(s.Namespaces, policy.Namespace{Name: ns, Labels: l})
	}
	for i := range 8 {
		p := policy.Pod{Namespace: pickOne(rng, nsNames), Name: fmt.Sprintf("p%d", i), Labels: randomLabels(rng, "app", "tier"), Node: "n1",
			Ports: []policy.NamedPort{{Name: "http", Protocol: policy.TCP, Port: 80}}}
		if i%2 == 0 {
			p.IPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 8, 0, byte(i + 1)}), netip.MustParseAddr(fmt.Sprintf("fd08::%x", i+1))}
		}
		s.Pods = append(s.Pods, p)
	}
	s.Pods = append(s.Pods, policy.Pod{Namespace: pickOne(rng, nsNames), Name: "remote", Labels: randomLabels(rng, "app", "tier"),
		Node: "n2", IPs: []netip.Addr{remoteIP4}})
	for i := range 2 + rng.IntN(8) {
		s.Policies = append(s.Policies, randomPolicy(rng, fmt.Sprintf("np%d", i)))
	}
	return s
}
