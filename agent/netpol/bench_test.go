package netpol

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/policy"
	"github.com/podnet/podnet/policy/policytest"
)

// benchObjects is a cluster of 100 namespaces of 50 pods on 50 nodes,
// with 10 policies a namespace (1,000): a default deny, allows from an
// app of the namespace and from other teams' namespaces, egress to DNS.
// The benchmark's node is node7.
func benchObjects() []kruntime.Object {
	var objs []kruntime.Object
	rv := 0
	next := func() string { rv++; return fmt.Sprint(rv) }
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node7", ResourceVersion: next()},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.8"}}}})
	tiers := []string{"web", "api", "db"}
	for i := range 100 {
		ns := fmt.Sprintf("ns%d", i)
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, ResourceVersion: next(), Labels: map[string]string{
			"kubernetes.io/metadata.name": ns, "team": fmt.Sprintf("team%d", i%10)}}})
		for j := range 50 {
			k := i*50 + j
			p := apiPod(ns, fmt.Sprintf("pod%d", j), fmt.Sprintf("node%d", (k*7+i)%50),
				map[string]string{"app": fmt.Sprintf("app%d", j%10), "tier": tiers[j%3]},
				netip.AddrFrom4([4]byte{10, 244, byte(k >> 8), byte(k)}).String())
			p.ResourceVersion = next()
			objs = append(objs, p)
		}
		for n := range 10 {
			np := denyFrom(ns, fmt.Sprintf("np%d", n), fmt.Sprintf("app%d", n), fmt.Sprintf("app%d", (n+1)%10))
			switch n % 3 {
			case 0:
				np.Spec.PodSelector = metav1.LabelSelector{}
				np.Spec.Ingress = nil
			case 1:
				np.Spec.Ingress[0].From = append(np.Spec.Ingress[0].From, networkingv1.NetworkPolicyPeer{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("team%d", n)}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}})
			}
			np.ResourceVersion = next()
			objs = append(objs, np)
		}
	}
	return objs
}

// BenchmarkPolicyChange measures one policy change from the API event to
// the end of the apply that enforces it, debounce included: 1,000
// policies and 5,000 pods in the informers. As root the rules go into a
// fresh network namespace's kernel; otherwise into a recorder (compile
// only).
//
//	go test ./agent/netpol -run '^$' -bench PolicyChange -benchtime 50x
func BenchmarkPolicyChange(b *testing.B) {
	c := newCluster(b)
	c.cs = fake.NewClientset(benchObjects()...)
	c.rv.Store(1 << 20)
	cfg := Config{Node: "node7", Sources: c.sources()}
	kernel := os.Geteuid() == 0
	if kernel {
		_, cfg.NetNS = itestutil.NewNodeNetNS(b)
	}
	s := New(cfg)
	if !kernel {
		r := newRecorder()
		r.changed = make(chan struct{}, 1<<20)
		s.open = func() (renderer, func() ([]netip.Addr, error), func(), error) {
			return r, func() ([]netip.Addr, error) { return nil, nil }, func() {}, nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	select {
	case <-s.FirstApplied():
	case <-time.After(time.Minute):
		b.Fatal("no first apply")
	}
	// ns0/np1 selects pods app1 of ns0; node7 has one of them, its
	// ingress rule a port that changes each time.
	np, err := c.cs.NetworkingV1().NetworkPolicies("ns0").Get(ctx, "np1", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var isolated int
	b.ResetTimer()
	for i := range b.N {
		port := fmt.Sprintf("tcp/%d", 1000+i%60000)
		p := intstr.FromInt32(int32(1000 + i%60000))
		np.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{{Port: &p}}
		np.ResourceVersion = c.nextRV()
		if _, err := c.cs.NetworkingV1().NetworkPolicies("ns0").Update(ctx, np, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		for {
			ch := s.applied.wait()
			s.mu.Lock()
			ir := s.ir
			s.mu.Unlock()
			if hasPortSet(ir, port) {
				isolated = len(ir.Pods)
				break
			}
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				b.Fatalf("change %d not applied", i)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(meanMs(b, s.m.compile), "compile-ms")
	b.ReportMetric(meanMs(b, s.m.apply.WithLabelValues("apply").(prometheus.Histogram)), "apply-ms")
	b.ReportMetric(float64(isolated), "isolated-pods")
	b.ReportMetric(map[bool]float64{true: 1}[kernel], "kernel")
}

// meanMs is a histogram's mean in milliseconds.
func meanMs(b *testing.B, h prometheus.Histogram) float64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		b.Fatal(err)
	}
	if m.Histogram.GetSampleCount() == 0 {
		return 0
	}
	return m.Histogram.GetSampleSum() / float64(m.Histogram.GetSampleCount()) * 1000
}

func hasPortSet(ir *policy.IR, key string) bool {
	for _, p := range ir.PortSets {
		if p.Key == key {
			return true
		}
	}
	return false
}

// BenchmarkPodCacheMemory measures the heap the Pod informer's cache
// keeps per pod (after GC): 5,000 API pods, with strings all their own
// as decoding makes them (6 labels, 2 addresses, 3 named ports), through
// the transform into an indexer like the informer's.
func BenchmarkPodCacheMemory(b *testing.B) {
	benchCacheMemory(b, 5000, "B/pod", func(s *Service, i int) (any, error) {
		return s.slimSharedPod(policytest.DecodedPod(i)) // the API pod is garbage at once, as in the informer
	})
}

// BenchmarkPolicyCacheMemory is what a cached NetworkPolicy costs: 10,000
// of 500 namespaces, their selectors repeating as a cluster's do.
func BenchmarkPolicyCacheMemory(b *testing.B) {
	benchCacheMemory(b, 10000, "B/policy", func(s *Service, i int) (any, error) {
		return s.slimSharedPolicy(decodedPolicy(i/20, i%20))
	})
}

// benchCacheMemory reports the live heap per object of n objects made by
// slim (a service's transform) and kept in an indexer like the informer's.
func benchCacheMemory(b *testing.B, n int, unit string, slim func(s *Service, i int) (any, error)) {
	b.ReportAllocs()
	var per float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := &Service{share: newShareTable()}
		idx := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{})
		for i := range n {
			obj, err := slim(s, i)
			if err == nil {
				err = idx.Add(obj)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
		runtime.KeepAlive(idx)
		runtime.KeepAlive(s)
	}
	b.ReportMetric(per, unit)
}

// decodedPolicy is policy n of namespace k as the informer decodes it
// (fresh strings and maps): BenchmarkPolicyScale's kind (test/k8s).
func decodedPolicy(k, n int) *networkingv1.NetworkPolicy {
	http := intstr.FromString("http")
	tcp := corev1.ProtocolTCP
	p := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("scale-%d", k), Name: fmt.Sprintf("policy-%d", n), UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", ResourceVersion: strconv.Itoa(100000 + n)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", n%10)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &http}},
				From: []networkingv1.NetworkPolicyPeer{
					{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": strconv.Itoa(n % 10)}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", (n+1)%10)}},
					},
					{IPBlock: &networkingv1.IPBlock{CIDR: "172.16.0.0/12", Except: []string{fmt.Sprintf("172.16.%d.0/24", n%256)}}},
				},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
			}},
		},
	}
	// as decoded: fresh strings
	b, _ := json.Marshal(p)
	out := &networkingv1.NetworkPolicy{}
	_ = json.Unmarshal(b, out)
	return out
}
