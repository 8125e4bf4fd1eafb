package netpol

import (
	"net/netip"
	"slices"
	"time"

	"github.com/podnet/podnet/policy"
)

// reconcileAdmitted is the handshake's fast way: when the caches have not
// changed since the last apply but for pod deletions, and what Admit was
// told since is only the addresses of pods that had none then (a sandbox
// being made), none a deleted pod had, the last IR gets them with
// policy.IR.WithPodAddrs (the IR Compile would make, at the cost of the
// pod's own sets, not of the cluster's; the deleted pods' addresses stay
// in it, as in the kernel, until their batch) and is applied.
// done is false when it cannot tell, and nothing was done: the caller
// compiles. With nothing new at all it only answers the waiting Admits.
func (s *Service) reconcileAdmitted() (done bool, err error) {
	gen := s.reqGen.Load()
	s.mu.Lock()
	base, baseGen, failed := s.ir, s.irGen, s.lastErr != nil
	var keys []policy.PodKey
	for k, a := range s.admitted {
		if have, ok := s.irAdmitted[k]; !ok || !slices.Equal(have, a) {
			keys = append(keys, k)
		}
	}
	news := make(map[policy.PodKey][]netip.Addr, len(keys))
	reused := false
	for _, k := range keys {
		news[k] = s.admitted[k]
		reused = reused || s.deletedPending(news[k])
	}
	s.mu.Unlock()
	if base == nil || failed || reused || s.eagerGen.Load() > baseGen ||
		(len(keys) == 0 && s.cacheGen.Load() != baseGen) { // the deletions' batch
		return false, nil
	}
	ir := base
	slices.SortFunc(keys, policy.PodKey.Compare)
	for _, k := range keys {
		pod, ok := s.cachedPod(k)
		if !ok || len(pod.IPs) > 0 {
			// The status has addresses: they, not Admit's, are the pod's.
			return false, nil
		}
		next, ok := ir.WithPodAddrs(k, news[k], func(ip netip.Addr) bool { return s.heldByOther(k, ip) })
		if !ok {
			return false, nil
		}
		ir = next
		// An event the handlers have not passed on yet (the cache is
		// updated first) may have changed what selects the pod: the
		// answer must be the caches'.
		if !pod.HostNetwork && s.selects(&pod) != inIR(ir, k) {
			return false, nil
		}
	}
	if ir.ChangedFrom(base) {
		start := time.Now()
		s.publishFlowIndex(ir)
		s.rmu.Lock()
		_, err = s.r.Apply(ir)
		s.rmu.Unlock()
		s.m.apply.WithLabelValues("admit").Observe(time.Since(start).Seconds())
		if err != nil {
			s.fail(err)
			return true, err
		}
	}
	s.mu.Lock()
	s.ir, s.appliedGen, s.lastErr = ir, gen, nil
	for k, a := range news {
		s.irAdmitted[k] = a
	}
	s.mu.Unlock()
	s.applied.broadcast()
	s.m.observeSets(ir)
	if sum := s.summary.Load(); sum != nil {
		next := *sum
		next.Applied = time.Now()
		s.summary.Store(&next)
	}
	return true, nil
}

// heldByOther reports whether a pod other than key has ip: in its status,
// or as Admit's.
func (s *Service) heldByOther(key policy.PodKey, ip netip.Addr) bool {
	objs, _ := s.pods.ByIndex(podIPIndex, ip.String()) // fails only for an unknown index
	for _, o := range objs {
		if p, ok := o.(*podObj); ok && p.Key() != key {
			return true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range []map[policy.PodKey][]netip.Addr{s.admitted, s.irAdmitted} {
		for k, ips := range m {
			if k != key && slices.Contains(ips, ip) {
				return true
			}
		}
	}
	return false
}
