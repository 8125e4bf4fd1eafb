package netpol

import (
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/podnet/podnet/policy"
)

// TestStatusTakesNoLock: Status answers while the service's lock is
// held (as by a reconcile), so /status never waits for a rebuild.
func TestStatusTakesNoLock(t *testing.T) {
	s := New(Config{Node: "n1"})
	s.mu.Lock()
	s.rmu.Lock()
	defer s.mu.Unlock()
	defer s.rmu.Unlock()
	done := make(chan bool)
	go func() { _, _, ok := s.Status(); done <- ok }()
	select {
	case ok := <-done:
		if ok {
			t.Error("a summary before any apply")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Status waits for the service's lock")
	}
	ir := &policy.IR{Pods: []policy.PodRules{
		{Ingress: policy.Direction{Isolated: true, Rules: make([]*policy.Rule, 2)}, Egress: policy.Direction{Admin: make([]*policy.TierRule, 1)}},
		{Egress: policy.Direction{Baseline: make([]*policy.TierRule, 3)}},
	}}
	s.summary.Store(summarize(&policy.Snapshot{Policies: make([]*networkingv1.NetworkPolicy, 4)}, ir))
	sum, resync, ok := s.Status()
	if !ok || sum.NetworkPolicies != 4 || sum.IsolatedPods != 1 || sum.Rules != 6 || resync != DefaultResyncInterval || sum.Applied.IsZero() {
		t.Errorf("%+v %v %v", sum, resync, ok)
	}
}
