package netpol

import (
	"time"

	"github.com/podnet/podnet/policy"
)

// Summary is what the last successful apply put in the kernel.
type Summary struct {
	Applied time.Time
	// NetworkPolicies and ClusterNetworkPolicies in the cluster as
	// compiled; IsolatedPods of this node (in either direction); Rules
	// the allow and tier rules of their chains.
	NetworkPolicies, ClusterNetworkPolicies, IsolatedPods, Rules int
}

// Status is the last successful apply's summary (false: none yet) and
// the resync interval that bounds its age while the service is healthy.
// It takes no lock.
func (s *Service) Status() (sum Summary, resync time.Duration, ok bool) {
	p := s.summary.Load()
	if p == nil {
		return Summary{}, s.cfg.ResyncInterval, false
	}
	return *p, s.cfg.ResyncInterval, true
}

func summarize(snap *policy.Snapshot, ir *policy.IR) *Summary {
	sum := &Summary{Applied: time.Now(), NetworkPolicies: len(snap.Policies), ClusterNetworkPolicies: len(snap.ClusterPolicies)}
	for i := range ir.Pods {
		if ir.Pods[i].Ingress.Isolated || ir.Pods[i].Egress.Isolated {
			sum.IsolatedPods++
		}
		for _, d := range []*policy.Direction{&ir.Pods[i].Ingress, &ir.Pods[i].Egress} {
			sum.Rules += len(d.Rules) + len(d.Admin) + len(d.Baseline)
		}
	}
	return sum
}
