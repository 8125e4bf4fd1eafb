package netpol

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/policy"
)

// cnp is a ClusterNetworkPolicy of tier selecting the pods app=<app> of
// every namespace, with one ingress rule of action from app=<from>.
func cnp(name string, tier cnpv1beta1.Tier, priority int32, app string, action cnpv1beta1.ClusterNetworkPolicyRuleAction, from string) *cnpv1beta1.ClusterNetworkPolicy {
	return &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{Tier: tier, Priority: priority,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Pods: &cnpv1beta1.NamespacedPod{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Name: "r0", Action: action,
				From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": from}}}}}}}},
	}
}

func adminRules(ir *policy.IR, ns, name string) int {
	if pr := podRules(ir, ns, name); pr != nil {
		return len(pr.Ingress.Admin)
	}
	return -1
}

// TestClusterPoliciesFollowTheCRD: without the CRD the service syncs,
// applies and is ready without ever listing ClusterNetworkPolicies;
// once discovery serves them it follows them (within CRDRecheck), and
// when the CRD goes their rules go.
func TestClusterPoliciesFollowTheCRD(t *testing.T) {
	c := newCluster(t)
	c.noCRD.Store(true)
	c.addNamespace("x", nil)
	c.addNode(self, "198.18.0.1")
	c.addPod(apiPod("x", "db", self, map[string]string{"app": "db"}, "10.244.0.2"))
	c.addPod(apiPod("x", "web", "n2", map[string]string{"app": "web"}, "10.244.1.2"))
	c.addPolicy(denyFrom("x", "np", "db", "web"))
	c.addClusterPolicy(cnp("deny-web", cnpv1beta1.AdminTier, 10, "db", cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, "web"))
	r := newRecorder()
	s := startService(t, c, r, Config{CRDRecheck: 20 * time.Millisecond})

	ir := r.waitIR(t, "NetworkPolicy enforced without the CRD", func(ir *policy.IR) bool { return podRules(ir, "x", "db") != nil })
	if n := adminRules(ir, "x", "db"); n != 0 {
		t.Errorf("Admin rules without the CRD: %d", n)
	}
	itestutil.Eventually(t, "ready without the CRD", 5*time.Second, func() bool { return s.Ready() == nil })
	itestutil.Eventually(t, "discovery asked again", 5*time.Second, func() bool { return c.discoveries.Load() >= 3 })

	c.noCRD.Store(false)
	r.waitIR(t, "the Admin rule once the CRD is served", func(ir *policy.IR) bool { return adminRules(ir, "x", "db") == 1 })

	c.deleteClusterPolicy("deny-web")
	r.waitIR(t, "the Admin rule gone with its policy", func(ir *policy.IR) bool { return adminRules(ir, "x", "db") == 0 })
	c.addClusterPolicy(cnp("deny-web", cnpv1beta1.AdminTier, 10, "db", cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, "web"))
	r.waitIR(t, "the Admin rule back", func(ir *policy.IR) bool { return adminRules(ir, "x", "db") == 1 })

	c.noCRD.Store(true)
	r.waitIR(t, "the Admin rule gone with the CRD", func(ir *policy.IR) bool { return adminRules(ir, "x", "db") == 0 })
	if err := s.Ready(); err != nil {
		t.Errorf("Ready after the CRD went: %v", err)
	}
}

// TestClusterPoliciesServedAtStart: when the CRD is there at start the
// first apply already has the ClusterNetworkPolicies (an Admin Deny is
// never opened by a first apply without it).
func TestClusterPoliciesServedAtStart(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addNode(self, "198.18.0.1")
	c.addPod(apiPod("x", "db", self, map[string]string{"app": "db"}, "10.244.0.2"))
	c.addClusterPolicy(cnp("deny-web", cnpv1beta1.AdminTier, 10, "db", cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, "web"))
	r := newRecorder()
	startService(t, c, r, Config{})
	r.waitIR(t, "a first apply", func(*policy.IR) bool { return true })
	r.mu.Lock()
	first := r.irs[0]
	r.mu.Unlock()
	if n := adminRules(first, "x", "db"); n != 1 {
		t.Errorf("first apply: %d Admin rules for x/db, want 1", n)
	}
}

// TestAdmitClusterPolicy: a pod only a ClusterNetworkPolicy selects is
// selected: its ADD waits for its rules.
func TestAdmitClusterPolicy(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	c.addPod(apiPod("x", "db", self, map[string]string{"app": "db"}))
	c.addPod(apiPod("x", "web", self, map[string]string{"app": "web"}))
	c.addClusterPolicy(cnp("base", cnpv1beta1.BaselineTier, 10, "db", cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, "web"))
	r := newRecorder()
	s := startService(t, c, r, Config{Debounce: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sel, err := s.Admit(ctx, "x", "db", []netip.Addr{addr("10.244.0.9")})
	if err != nil || !sel {
		t.Fatalf("Admit of a pod a ClusterNetworkPolicy selects = %v, %v; want selected", sel, err)
	}
	if pr := podRules(r.last(), "x", "db"); pr == nil || len(pr.Ingress.Baseline) != 1 {
		t.Errorf("rules when Admit returned: %+v, want x/db's Baseline rule", pr)
	}
	if sel, err := s.Admit(ctx, "x", "web", []netip.Addr{addr("10.244.0.10")}); err != nil || sel {
		t.Errorf("Admit of a pod nothing selects = %v, %v; want not selected", sel, err)
	}
}

// TestClusterPoliciesGoneBeforeSync: a CRD served at start and removed
// before its informer synced (its list fails from then on) holds
// neither Ready nor the first apply past the next discovery.
func TestClusterPoliciesGoneBeforeSync(t *testing.T) {
	c := newCluster(t)
	c.addNamespace("x", nil)
	src := c.sources()
	var asked atomic.Int64
	src.ClusterPoliciesServed = func(context.Context) (bool, error) { return asked.Add(1) == 1, nil }
	gone := func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return nil, apierrors.NewNotFound(cnpv1beta1.Resource(ClusterPolicyResource), "")
	}
	src.ClusterPolicies = cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: gone,
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			_, err := gone(ctx, o)
			return nil, err
		}}, c.cs)
	r := newRecorder()
	s := New(Config{Node: self, Sources: src, CRDRecheck: 20 * time.Millisecond})
	s.open = func() (renderer, func() ([]netip.Addr, error), func(), error) {
		return r, func() ([]netip.Addr, error) { return nil, nil }, func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	itestutil.Eventually(t, "ready once the CRD is seen gone", 10*time.Second, func() bool { return s.Ready() == nil })
	if asked.Load() < 2 {
		t.Errorf("ready after %d discoveries, want the second to have let the informer go", asked.Load())
	}
}
