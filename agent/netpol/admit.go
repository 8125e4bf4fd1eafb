package netpol

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/podnet/podnet/policy"
)

// Admit is CNI ADD's first-packet handshake (Admission serves it on the
// node's socket, and calls it for the pods plugins closed): ADD tells the agent the identity and
// addresses of a pod whose sandbox it is wiring, before the pod's status
// has them in the API, and returns only when the pod is closed as its
// policies say.
//
// Admit waits until the informers have synced and the pod is in the
// cache (it exists in the API before its sandbox does; the watch may lag
// behind). It then records ips for the pod until its status has
// addresses of its own. When no NetworkPolicy of the pod's namespace and
// no ClusterNetworkPolicy with rules selects the pod it returns at once with selected false: the pod is not
// isolated; its addresses go into the sets of the rules that name it as
// a peer with the next apply, asked for but not waited for, and a policy
// that comes later finds them recorded.
// Otherwise it asks for a rebuild and returns selected true once an apply
// that saw ips has succeeded (selected false if, meanwhile, no policy
// selects it any more).
//
// It returns ctx's error, wrapped with what it was waiting for, when ctx
// ends first: the caller must then keep the pod closed.
func (s *Service) Admit(ctx context.Context, namespace, name string, ips []netip.Addr) (selected bool, err error) {
	key := policy.PodKey{Namespace: namespace, Name: name}
	select {
	case <-s.synced:
	case <-ctx.Done():
		return false, fmt.Errorf("admit %s: informers not synced: %w", key, ctx.Err())
	}
	var pod policy.Pod
	for {
		ch := s.events.wait()
		if p, ok := s.cachedPod(key); ok {
			pod = p
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false, fmt.Errorf("admit %s: pod not in the agent's cache: %w", key, ctx.Err())
		}
	}
	if pod.HostNetwork {
		return false, nil
	}
	addrs := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		if ip = ip.Unmap().WithZone(""); ip.IsValid() && !slices.Contains(addrs, ip) {
			addrs = append(addrs, ip)
		}
	}
	s.mu.Lock()
	s.admitted[key] = addrs
	s.mu.Unlock()
	if !s.selects(&pod) {
		// Nothing waits, but the node's rules that name the pod as a
		// peer should have it before its first packet to them: the fast
		// way adds it at once (reconcileAdmitted), not at the status'
		// update.
		s.askSoon()
		return false, nil
	}
	gen := s.reqGen.Add(1)
	s.askSoon()
	for {
		ch := s.applied.wait()
		s.mu.Lock()
		done, ir := s.appliedGen >= gen, s.ir
		s.mu.Unlock()
		if done {
			return inIR(ir, key), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			lastErr := s.lastErr
			s.mu.Unlock()
			if lastErr != nil {
				return true, fmt.Errorf("admit %s: rules not applied (last error: %v): %w", key, lastErr, ctx.Err())
			}
			return true, fmt.Errorf("admit %s: rules not applied: %w", key, ctx.Err())
		}
	}
}

// cachedPod returns the pod's slim object from the cache.
func (s *Service) cachedPod(key policy.PodKey) (policy.Pod, bool) {
	obj, ok, err := s.pods.GetByKey(key.String())
	if err != nil || !ok {
		return policy.Pod{}, false
	}
	p, ok := obj.(*podObj)
	if !ok {
		return policy.Pod{}, false
	}
	return p.Pod, true
}

// podUID is the cached pod's UID, empty when the cache has none.
func (s *Service) podUID(key policy.PodKey) types.UID {
	obj, ok, err := s.pods.GetByKey(key.String())
	if err != nil || !ok {
		return ""
	}
	if p, ok := obj.(*podObj); ok {
		return p.uid
	}
	return ""
}

// selects reports whether a NetworkPolicy of the pod's namespace, or a
// ClusterNetworkPolicy with rules, selects it: then the pod gets chains
// of its own. A selector that does not parse selects nothing, as in
// Compile; so does a ClusterNetworkPolicy of a namespace the cache does
// not have yet (its labels are unknown).
func (s *Service) selects(pod *policy.Pod) bool {
	objs, err := s.policies.ByIndex(cache.NamespaceIndex, pod.Namespace)
	if err != nil {
		return true // cannot tell: wait for the rules
	}
	set := labels.Set(pod.Labels)
	for _, o := range objs {
		np, ok := o.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err == nil && sel.Matches(set) {
			return true
		}
	}
	cnps := s.clusterPolicyList()
	if len(cnps) == 0 {
		return false
	}
	nsObj, ok, err := s.namespaces.GetByKey(pod.Namespace)
	if err != nil {
		return true
	}
	ns, _ := nsObj.(*namespaceObj)
	if !ok || ns == nil {
		return false
	}
	for _, o := range cnps {
		p, ok := o.(*clusterPolicyObj)
		if !ok || p.Invalid != "" || len(p.Ingress)+len(p.Egress) == 0 {
			continue
		}
		if matches(&p.Subject.Namespaces, ns.Labels) && (p.Subject.Pods == nil || matches(p.Subject.Pods, pod.Labels)) {
			return true
		}
	}
	return false
}

// matches reports whether the label selector ls matches l; one that
// does not parse matches nothing.
func matches(ls *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	return err == nil && sel.Matches(labels.Set(l))
}

func inIR(ir *policy.IR, key policy.PodKey) bool {
	return ir != nil && ir.PodRules(key) != nil
}
