package k8s_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/agent/netpol"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// The cluster BenchmarkPolicyScale builds: policyScalePods pods in
// namespaces of policyScalePerNS, policyScalePolicies NetworkPolicies
// spread evenly over them, and policyScaleLocal of the pods on the
// agent's node. PODNET_POLICY_SCALE_PODS and _POLICIES set other sizes.
const (
	policyScalePods     = 50000
	policyScalePolicies = 10000
	policyScalePerNS    = 100
	policyScaleLocal    = 100
	policyScaleApps     = 10 // app labels per namespace
)

// BenchmarkPolicyScale measures the agent's NetworkPolicy service (issue
// 22's memory goal: at most 1 KiB of agent memory per remote pod) in a
// cluster of 50,000 pods and 10,000 policies.
//
// It starts etcd and kube-apiserver alone (cluster.WithControlPlaneOnly)
// and creates the objects through the API as a cluster's controllers and
// kubelets would leave them: namespaces labelled team=<k mod 10>; in each,
// 100 pods labelled app=app-<j mod 10>, bound to 500 nodes that do not
// run (spec.nodeName; no kubelet, so nothing else touches them), one
// named container port, and a status with a pod IP (as a kubelet writes
// it); and 20 policies per namespace, each selecting one app and allowing
// ingress on the named port from that app's pods in namespaces of one
// team and from an ipBlock with an except, and egress to its namespace.
// policyScaleLocal of the pods are on the agent's node. Then it runs the
// policy service in-process, in a node namespace of its own, and
// reports:
//
//   - sync_s: service start to the first apply (every informer synced,
//     the node's policy in the kernel);
//   - heap_MB and B/remote_pod: the live heap the service holds then
//     (after a collection, less the heap before it started), in all and
//     per pod of the cluster;
//   - enforce_p50_ms and enforce_max_ms: a NetworkPolicy created through
//     the API that selects a local pod no policy selected, to its chain
//     in the kernel, policyScaleProbes times (deleted, and its rules
//     gone, in between).
//
// With PODNET_POLICY_SCALE_PEER=kube-router, kube-router's policy
// controller is measured after it on the same objects (runKubeRouterScale:
// kr_sync_s, kr_rss_MB, kr_heap_MB, kr_heap_B/pod).
//
// A benchmark, not a test; as root (creating the objects takes minutes):
//
//	cd test/k8s && CI=true go test -run XXX -bench BenchmarkPolicyScale -benchtime 1x -timeout 60m -v .
func BenchmarkPolicyScale(b *testing.B) {
	pods := scaleEnv(b, "PODNET_POLICY_SCALE_PODS", policyScalePods)
	policies := scaleEnv(b, "PODNET_POLICY_SCALE_POLICIES", policyScalePolicies)
	c := cluster.Start(b, cluster.WithControlPlaneOnly())
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	client := scaleClient(b, c)
	start := time.Now()
	namespaces := (pods + policyScalePerNS - 1) / policyScalePerNS
	scaleParallel(ctx, b, namespaces, func(k int) error {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: scaleNSName(k), Labels: map[string]string{"team": strconv.Itoa(k % 10)}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		// The service account controller's part: pods are admitted only
		// with their service account there.
		_, err = client.CoreV1().ServiceAccounts(scaleNSName(k)).Create(ctx, &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		return err
	})
	scaleParallel(ctx, b, pods, func(i int) error { return createScalePod(ctx, client, i) })
	scaleParallel(ctx, b, policies, func(i int) error {
		k := i % namespaces
		_, err := client.NetworkingV1().NetworkPolicies(scaleNSName(k)).Create(ctx, scalePolicy(k, i/namespaces), metav1.CreateOptions{})
		return err
	})
	b.Logf("%d namespaces, %d pods (%d on the agent's node), %d NetworkPolicies created in %s",
		namespaces, pods, policyScaleLocal, policies, time.Since(start).Round(time.Second))

	for range b.N {
		_, nsPath := testutil.NewNodeNetNS(b)
		r := runPolicyService(ctx, b, c, client, nsPath)
		b.ReportMetric(r.sync.Seconds(), "sync_s")
		b.ReportMetric(r.heap/1e6, "heap_MB")
		b.ReportMetric(r.heap/float64(pods), "B/remote_pod")
		slices.Sort(r.enforce)
		p50, worst := r.enforce[len(r.enforce)/2], r.enforce[len(r.enforce)-1]
		b.ReportMetric(float64(p50.Microseconds())/1e3, "enforce_p50_ms")
		b.ReportMetric(float64(worst.Microseconds())/1e3, "enforce_max_ms")
		b.Logf("policy service, %d pods and %d policies: first apply after %s; heap %.1f MB, %.0f B per pod of the cluster; a new policy for a local pod enforced after its create: p50 %s, max %s of %d (%v)",
			pods, policies, r.sync.Round(time.Millisecond), r.heap/1e6, r.heap/float64(pods),
			p50.Round(time.Millisecond), worst.Round(time.Millisecond), len(r.enforce), r.enforce)
	}
	switch peer := os.Getenv(policyScalePeerEnv); peer {
	case "":
	case "kube-router":
		kr := runKubeRouterScale(ctx, b, c, client)
		if kr.gaveUp != "" {
			b.ReportMetric(kr.rss/1e6, "kr_rss_MB_at_stop")
			b.Logf("kube-router %s did not survive %d pods and %d policies: %s, %s after start",
				cluster.KubeRouterVersion, pods, policies, kr.gaveUp, kr.sync.Round(time.Second))
			return
		}
		b.ReportMetric(kr.sync.Seconds(), "kr_sync_s")
		b.ReportMetric(kr.rss/1e6, "kr_rss_MB")
		b.ReportMetric(kr.heap/1e6, "kr_heap_MB")
		b.ReportMetric(kr.heap/float64(pods), "kr_heap_B/pod")
		b.Logf("kube-router %s, %d pods and %d policies: first full sync after %s; VmRSS %.1f MB, Go heap in use %.1f MB (%.0f B per pod of the cluster; its own start included, garbage not collected)",
			cluster.KubeRouterVersion, pods, policies, kr.sync.Round(time.Millisecond), kr.rss/1e6, kr.heap/1e6, kr.heap/float64(pods))
	default:
		b.Fatalf("%s=%q: the peer measured is kube-router", policyScalePeerEnv, peer)
	}
}

func scaleEnv(b *testing.B, name string, def int) int {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

func scaleNSName(k int) string { return fmt.Sprintf("scale-ns-%d", k) }

// createScalePod creates pod i and writes its status as a kubelet would.
func createScalePod(ctx context.Context, client *kubernetes.Clientset, i int) error {
	k, j := i/policyScalePerNS, i%policyScalePerNS
	node := fmt.Sprintf("scale-node-%d", i%500)
	// Each node's own address as hostIP, as a kubelet writes it (podnet
	// goes by spec.nodeName; kube-router by hostIP).
	hostIP := fmt.Sprintf("198.19.%d.%d", 1+(i%500)/250, 2+(i%500)%250)
	if i < policyScaleLocal {
		node, hostIP = scaleAgentNode, scaleLocalHostIP
	}
	ip := fmt.Sprintf("10.%d.%d.%d", 128+i>>16, (i>>8)&255, i&255)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: scaleNSName(k), Name: fmt.Sprintf("pod-%d", j), Labels: map[string]string{
			"app": fmt.Sprintf("app-%d", j%policyScaleApps), "pod-template-hash": fmt.Sprintf("h%d", j%3)}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
	}
	created, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: hostIP}
	_, err = client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// scalePolicy is namespace k's policy number n.
func scalePolicy(k, n int) *networkingv1.NetworkPolicy {
	http := intstr.FromString("http")
	tcp := corev1.ProtocolTCP
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: scaleNSName(k), Name: fmt.Sprintf("policy-%d", n)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", n%policyScaleApps)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &http}},
				From: []networkingv1.NetworkPolicyPeer{
					{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": strconv.Itoa(n % 10)}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", (n+1)%policyScaleApps)}},
					},
					{IPBlock: &networkingv1.IPBlock{CIDR: "172.16.0.0/12", Except: []string{fmt.Sprintf("172.16.%d.0/24", n%256)}}},
				},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
			}},
		},
	}
}

// scaleParallel runs f(0) to f(n-1), 32 at a time, and fails b with the
// first error.
func scaleParallel(ctx context.Context, b *testing.B, n int, f func(i int) error) {
	b.Helper()
	idx := make(chan int)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range min(32, n) {
		wg.Go(func() {
			for i := range idx {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("item %d: %w", i, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		select {
		case idx <- i:
		case <-ctx.Done():
		}
	}
	close(idx)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

type policyScaleResult struct {
	sync time.Duration
	// enforce are the probe policy's create-to-kernel times.
	enforce []time.Duration
	heap    float64
}

// policyScaleProbes is how many times the probe policy is created.
const policyScaleProbes = 10

// runPolicyService runs the policy service for the agent's node in ns
// until it has been measured, then stops it and removes its table.
func runPolicyService(ctx context.Context, b *testing.B, c *cluster.Cluster, client *kubernetes.Clientset, ns string) policyScaleResult {
	b.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.UserAgent = "podnet-agent"
	heapBefore, _ := liveHeap()
	src, err := netpol.NewSources(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	svc := netpol.New(netpol.Config{Node: scaleAgentNode, NetNS: ns, Sources: src, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
		removePolicyTable(b, ns)
	}()
	var r policyScaleResult
	start := time.Now()
	wg.Go(func() {
		if err := svc.Run(sctx); err != nil && sctx.Err() == nil {
			b.Error(err)
		}
	})
	select {
	case <-svc.FirstApplied():
	case <-time.After(20 * time.Minute):
		b.Fatalf("no first apply 20m after start: %v", svc.Ready())
	}
	r.sync = time.Since(start)
	heapAfter, _ := liveHeap()
	r.heap = heapAfter - heapBefore

	// Local pod 0 of namespace 0 is selected by its app's policies. A
	// label no policy selects takes it out of them (its elements go),
	// then the probe policy selects it again.
	selected := isolatedLocal(b, ns)
	if _, err := client.CoreV1().Pods(scaleNSName(0)).Patch(ctx, "pod-0", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"app":"enforce-probe"}}}`), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for isolatedLocal(b, ns) >= selected {
		if time.Now().After(deadline) {
			b.Fatal("pod-0 still isolated a minute after no policy selects it")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The probe policy created and deleted policyScaleProbes times: the
	// time from each create to its chain in the kernel.
	before := isolatedLocal(b, ns)
	for range policyScaleProbes {
		start = time.Now()
		if _, err := client.NetworkingV1().NetworkPolicies(scaleNSName(0)).Create(ctx, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "enforce-probe"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "enforce-probe"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			},
		}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for isolatedLocal(b, ns) == before {
			if time.Since(start) > time.Minute {
				b.Fatalf("the probe policy not enforced a minute after its create")
			}
			time.Sleep(time.Millisecond)
		}
		r.enforce = append(r.enforce, time.Since(start))
		if err := client.NetworkingV1().NetworkPolicies(scaleNSName(0)).Delete(ctx, "enforce-probe", metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for isolatedLocal(b, ns) != before {
			if time.Now().After(deadline) {
				b.Fatal("the probe policy's rules still there a minute after its delete")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return r
}

// isolatedLocal counts the elements of the policy table's dispatch maps
// in ns: one per isolated local pod, direction and address.
func isolatedLocal(b *testing.B, ns string) int {
	b.Helper()
	n := 0
	err := netns.Do(ns, func() error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		t := &nftables.Table{Name: policyrules.TableName, Family: nftables.TableFamilyINet}
		for _, m := range []string{"in4", "out4"} {
			elems, err := conn.GetSetElements(&nftables.Set{Table: t, Name: m, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict})
			if err != nil {
				return err
			}
			n += len(elems)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// removePolicyTable removes what the service left in ns: its table
// stays when it stops, as on a node whose agent restarts.
func removePolicyTable(b *testing.B, ns string) {
	b.Helper()
	err := netns.Do(ns, func() error {
		r, err := policyrules.New(scaleAgentNode)
		if err != nil {
			return err
		}
		defer r.Close()
		return r.Remove()
	})
	if err != nil {
		b.Error(err)
	}
}
