package netpol

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/policy"
)

const self = "n1"

// cluster is a fake API for the informers: unit tests of the event to
// snapshot path only. Every write gets a new resource version, as the
// API server gives it (the fake's tracker keeps objects as given, and an
// update with an unchanged version is taken for a resync).
type cluster struct {
	t  testing.TB
	cs *fake.Clientset
	// cnp holds the ClusterNetworkPolicies: a tracker of their own (the
	// typed fake clientset of network-policy-api v0.3.0 cannot create
	// one: its field manager lacks the v1beta1 schema).
	cnp k8stesting.ObjectTracker
	rv  atomic.Int64
	// noCRD makes discovery say ClusterNetworkPolicies are not served;
	// discoveries counts its answers.
	noCRD       atomic.Bool
	discoveries atomic.Int64
}

func newCluster(t testing.TB) *cluster {
	scheme := runtime.NewScheme()
	if err := cnpv1beta1.Install(scheme); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, cs: fake.NewClientset(),
		cnp: k8stesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())}
}

var (
	cnpResource = ClusterPolicyVersion.WithResource(ClusterPolicyResource)
	cnpKind     = ClusterPolicyVersion.WithKind("ClusterNetworkPolicy")
)

func (c *cluster) sources() Sources {
	core, netv1 := c.cs.CoreV1(), c.cs.NetworkingV1()
	mk := func(l cache.ListWithContextFunc, w cache.WatchFuncWithContext) cache.ListerWatcher {
		return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{ListWithContextFunc: l, WatchFuncWithContext: w}, c.cs)
	}
	return Sources{
		Policies: mk(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return netv1.NetworkPolicies("").List(ctx, o)
		}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return netv1.NetworkPolicies("").Watch(ctx, o)
		}),
		Namespaces: mk(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Namespaces().List(ctx, o)
		},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Namespaces().Watch(ctx, o)
			}),
		Pods: mk(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Pods("").List(ctx, o)
		},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Pods("").Watch(ctx, o)
			}),
		Nodes: mk(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Nodes().List(ctx, o)
		},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return core.Nodes().Watch(ctx, o)
			}),
		ClusterPolicies: cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				if c.noCRD.Load() {
					c.t.Error("ClusterNetworkPolicies listed while not served")
				}
				return c.cnp.List(cnpResource, cnpKind, "")
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return c.cnp.Watch(cnpResource, "")
			}}, c.cs),
		ClusterPoliciesServed: func(context.Context) (bool, error) {
			c.discoveries.Add(1)
			return !c.noCRD.Load(), nil
		},
	}
}

func (c *cluster) addClusterPolicy(p *cnpv1beta1.ClusterNetworkPolicy) {
	c.t.Helper()
	p.ResourceVersion = c.nextRV()
	c.must(c.cnp.Create(cnpResource, p, ""))
}

func (c *cluster) deleteClusterPolicy(name string) {
	c.t.Helper()
	c.must(c.cnp.Delete(cnpResource, "", name))
}

func (c *cluster) nextRV() string { return fmt.Sprint(c.rv.Add(1)) }

func (c *cluster) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) addNamespace(name string, labels map[string]string) {
	c.t.Helper()
	_, err := c.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, ResourceVersion: c.nextRV()}}, metav1.CreateOptions{})
	c.must(err)
}

func (c *cluster) addNode(name string, ips ...string) {
	c.t.Helper()
	c.addLabeledNode(name, nil, ips...)
}

func (c *cluster) addLabeledNode(name string, labels map[string]string, ips ...string) {
	c.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, ResourceVersion: c.nextRV()}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	_, err := c.cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	c.must(err)
}

func apiPod(ns, name, node string, labels map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func (c *cluster) addPod(p *corev1.Pod) {
	c.t.Helper()
	p.ResourceVersion = c.nextRV()
	_, err := c.cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	c.must(err)
}

func (c *cluster) updatePod(p *corev1.Pod) {
	c.t.Helper()
	p.ResourceVersion = c.nextRV()
	_, err := c.cs.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{})
	c.must(err)
}

func (c *cluster) deletePod(ns, name string) {
	c.t.Helper()
	c.must(c.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}))
}

func (c *cluster) addPolicy(np *networkingv1.NetworkPolicy) {
	c.t.Helper()
	np.ResourceVersion = c.nextRV()
	_, err := c.cs.NetworkingV1().NetworkPolicies(np.Namespace).Create(context.Background(), np, metav1.CreateOptions{})
	c.must(err)
}

func (c *cluster) deletePolicy(ns, name string) {
	c.t.Helper()
	c.must(c.cs.NetworkingV1().NetworkPolicies(ns).Delete(context.Background(), name, metav1.DeleteOptions{}))
}

// denyFrom is a policy isolating the pods app=<app> of ns for ingress,
// allowing only app=<from> of ns.
func denyFrom(ns, name, app, from string) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	if from != "" {
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": from}}}}}}
	}
	return np
}

// recorder is a renderer that keeps the IRs it was given.
type recorder struct {
	mu      sync.Mutex
	irs     []*policy.IR
	failing error
	changed chan struct{}
	// hold, while set, holds every Apply until it is closed.
	hold chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1000)} }

func (r *recorder) Apply(ir *policy.IR) (policyrules.Stats, error) {
	r.mu.Lock()
	hold := r.hold
	r.mu.Unlock()
	if hold != nil {
		<-hold
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing != nil {
		return policyrules.Stats{}, r.failing
	}
	r.irs = append(r.irs, ir)
	r.changed <- struct{}{}
	return policyrules.Stats{}, nil
}

func (r *recorder) Resync(ir *policy.IR) (policyrules.Stats, error) { return r.Apply(ir) }
func (r *recorder) Counters() (policyrules.Counters, error)         { return policyrules.Counters{}, nil }
func (r *recorder) Close() error                                    { return nil }

func (r *recorder) fail(err error) {
	r.mu.Lock()
	r.failing = err
	r.mu.Unlock()
}

func (r *recorder) applies() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.irs)
}

func (r *recorder) last() *policy.IR {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.irs) == 0 {
		return nil
	}
	return r.irs[len(r.irs)-1]
}

// waitIR waits until the last IR applied satisfies ok.
func (r *recorder) waitIR(t testing.TB, what string, ok func(*policy.IR) bool) *policy.IR {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if ir := r.last(); ir != nil && ok(ir) {
			return ir
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; last IR: %+v", what, r.last())
		}
	}
}

// startService runs a service of cfg on c with r as its renderer until
// the test ends.
func startService(t testing.TB, c *cluster, r renderer, cfg Config, localIPs ...netip.Addr) *Service {
	t.Helper()
	cfg.Node = self
	cfg.Sources = c.sources()
	s := New(cfg)
	s.open = func() (renderer, func() ([]netip.Addr, error), func(), error) {
		return r, func() ([]netip.Addr, error) { return localIPs, nil }, func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func podRules(ir *policy.IR, ns, name string) *policy.PodRules {
	for i := range ir.Pods {
		if ir.Pods[i].Pod == (policy.PodKey{Namespace: ns, Name: name}) {
			return &ir.Pods[i]
		}
	}
	return nil
}

func peerAddrs(ir *policy.IR) []netip.Addr {
	var out []netip.Addr
	for _, s := range ir.PeerSets {
		out = append(out, s.V4...)
		out = append(out, s.V6...)
	}
	return out
}
