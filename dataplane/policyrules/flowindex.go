package policyrules

import (
	"slices"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/policy"
)

// FlowIndex returns every flow id a Renderer WithFlowLabels writes for
// node's pods in ir, with the rules each one names: the agent reads a
// conntrack label's ids (ParseFlowLabel) and a flow log prefix's
// (ParseFlowPrefix) through it. An allow rule's id names its rule (a
// NetworkPolicy rule, Action Allow; a ClusterNetworkPolicy Accept, Allow,
// or a Baseline Pass, Pass), a ClusterNetworkPolicy Deny's its rule, a
// NetworkPolicy final drop's the policies that isolate the pod in that
// direction (Index -1, Action Deny). An id names one rule, or, for two
// identities whose hashes collide, both. It may hold ids of rules that
// can match nothing, which no nftables rule carries. It is pure: it
// reads ir only.
func FlowIndex(ir *policy.IR, node string) map[uint64][]flows.Rule {
	out := map[uint64][]flows.Rule{}
	add := func(id uint64, rs ...flows.Rule) {
		if _, ok := out[id]; !ok {
			out[id] = nil
		}
		for _, r := range rs {
			if !slices.Contains(out[id], r) {
				out[id] = append(out[id], r)
			}
		}
	}
	forChains(ir, node, func(p *policy.PodRules, d Direction, dir *policy.Direction) {
		for _, r := range dir.Admin {
			if r.Ref.Action != policy.Pass {
				fr := cnpRule(r.Ref, d)
				add(ruleID(fr), fr)
			}
		}
		if !dir.Isolated {
			for _, r := range dir.Baseline {
				fr := cnpRule(r.Ref, d)
				add(ruleID(fr), fr)
			}
			return
		}
		for _, r := range dir.Rules {
			fr := npRule(r.Policy, d, r.Index, "Allow")
			add(ruleID(fr), fr)
		}
		add(dropID(p.Pod, d, dir.IsolatedBy), dropRules(d, dir.IsolatedBy)...)
	})
	return out
}
