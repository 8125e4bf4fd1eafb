package netpol

import (
	"net/netip"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/policy"
)

// The flow capture's questions (agent/flowcap's Resolver and RuleIndex):
// which pod holds an address, and which rules a rule id names. Both are
// asked for every connection of the node, so neither waits on the apply:
// ResolveAddr reads the Pod informer's index (the store's own read lock,
// which an informer's write and the snapshot's List hold briefly) and the
// admitted addresses (s.mu, held briefly); FlowRules reads an atomic
// pointer. Neither takes rmu, which an apply holds for as long as the
// kernel takes.

// podIPIndex indexes the Pod cache by address.
const podIPIndex = "ip"

// podIPIndexFunc keys a pod by its addresses. A host-network pod has
// none of its own (policy.PodFromAPI keeps none): its node's address is
// not a pod's.
func podIPIndexFunc(obj any) ([]string, error) {
	p, ok := obj.(*podObj)
	if !ok || p.HostNetwork || len(p.IPs) == 0 {
		return nil, nil
	}
	keys := make([]string, len(p.IPs))
	for i, ip := range p.IPs {
		keys[i] = ip.String()
	}
	return keys, nil
}

// ResolveAddr returns the namespace and name of the pod that holds a,
// and whether it runs on this node; empty names when no pod does (a
// node's address, one outside the cluster) or the caches have not synced
// yet. A pod CNI ADD told Admit of, whose status has no addresses yet, is
// this node's. When two pods hold a (a pod deleted and its address given
// to a new one before the deletion reached the cache), the first by
// namespace and name answers.
func (s *Service) ResolveAddr(a netip.Addr) (namespace, pod string, local bool) {
	a = a.Unmap().WithZone("")
	select {
	case <-s.synced: // s.pods is set before
		objs, _ := s.pods.ByIndex(podIPIndex, a.String()) // fails only for an unknown index
		var best *podObj
		for _, o := range objs {
			if p, ok := o.(*podObj); ok && (best == nil || podLess(p.Key(), best.Key())) {
				best = p
			}
		}
		if best != nil {
			return best.Namespace, best.Name, best.Node == s.cfg.Node
		}
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ips := range s.admitted {
		for _, ip := range ips {
			if ip.Unmap() == a {
				return k.Namespace, k.Name, true
			}
		}
	}
	return "", "", false
}

func podLess(a, b policy.PodKey) bool {
	return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
}

// flowIndex is what FlowRules reads: the index of the IR being applied
// and of the one before it, so that a connection the kernel labelled
// under the rules still in place while an apply runs is named too (an id
// is a hash of its rule's identity: a rule in both has the same).
type flowIndex struct {
	cur, prev map[uint64][]flows.Rule
}

// publishFlowIndex makes ir's rule ids FlowRules' answer, before ir is
// applied (a connection the new rules label is named from its first
// packet on).
func (s *Service) publishFlowIndex(ir *policy.IR) {
	if s.cfg.FlowIndex == nil {
		return
	}
	next := &flowIndex{cur: s.cfg.FlowIndex(ir, s.cfg.Node)}
	if old := s.flowIndex.Load(); old != nil {
		next.prev = old.cur
	}
	s.flowIndex.Store(next)
}

// FlowRules names the rules behind a rule id of the node's policy rules
// (a conntrack label's half, a drop's NFLOG prefix); nil for an unknown
// id, or when Config.FlowIndex is not set. The slice is shared: read it,
// never write it.
func (s *Service) FlowRules(id uint64) []flows.Rule {
	fi := s.flowIndex.Load()
	if fi == nil {
		return nil
	}
	if rs, ok := fi.cur[id]; ok {
		return rs
	}
	return fi.prev[id]
}
