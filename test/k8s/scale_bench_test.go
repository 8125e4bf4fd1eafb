package k8s_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/agent/source/kubeapi"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

const (
	// scaleNodesDefault is the cluster size BenchmarkAgent5000Nodes
	// measures; PODNET_SCALE_NODES sets another.
	scaleNodesDefault = 5000
	// scaleAgentNode is the Node of the agent under measurement.
	scaleAgentNode = "scale-agent"
	// scaleIdle is how long the agent is watched idle for its request
	// rate at steady state.
	scaleIdle = 60 * time.Second
)

// scaleAgentAddr is the agent's underlay address: its link holds
// 198.19.0.0/18, in which every fake node's address is, so that host-gw
// routes to all of them are on-link.
var scaleAgentAddr = netip.MustParsePrefix("198.19.0.1/18")

// scaleNodeAddr is fake node i's underlay address, from 198.19.0.2 on.
func scaleNodeAddr(i int) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], 198<<24|19<<16+uint32(i)+2)
	return netip.AddrFrom4(b)
}

// scalePodCIDR is fake node i's podCIDR, a /24 of 10.128.0.0/9.
func scalePodCIDR(i int) netip.Prefix {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], 10<<24|128<<16+uint32(i)<<8)
	return netip.PrefixFrom(netip.AddrFrom4(b), 24)
}

// BenchmarkAgent5000Nodes measures the node-CIDR model (issue 14, model
// A: the Kubernetes datastore, a Node informer, routes to every Node's
// spec.podCIDRs) at 5,000 nodes; BenchmarkAgent5000NodesBlocks does
// model B.
//
// It starts etcd and kube-apiserver alone (cluster.WithControlPlaneOnly:
// no allocator or lifecycle controller writes to the Nodes), creates
// 5,000 Nodes the way registered agents leave them (a /24 podCIDR each,
// the podnet.io annotations with an underlay address), then runs a real
// agent in-process in a node namespace of its own, host-gw, talking to
// the API server from the control plane's namespace. It reports:
//
//   - sync_s: agent start to every remote podCIDR routed (protocol 97
//     routes in its namespace, counted through netlink);
//   - heap_MB: the Go heap the agent holds then (live heap after GC,
//     before and after its start; the informer's cache is in it), and
//     alloc_MB what it allocated to get there;
//   - api_req/s: its requests to the API server while idle for 60 s
//     (podnet_agent_api_requests_total);
//   - del_ms, add_ms: one Node deleted, then one created, to its route
//     withdrawn or programmed.
//
// A benchmark, not a test; as root (minutes):
//
//	cd test/k8s && CI=true go test -run XXX -bench BenchmarkAgent5000Nodes -benchtime 1x -timeout 30m -v .
//
// PODNET_SCALE_NODES=500 measures another size.
func BenchmarkAgent5000Nodes(b *testing.B) {
	n := scaleNodes(b)
	c := cluster.Start(b, cluster.WithControlPlaneOnly())
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	client := scaleClient(b, c)
	start := time.Now()
	createScaleNodes(ctx, b, client, 0, n)
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: scaleAgentNode},
		Spec:       corev1.NodeSpec{PodCIDR: "10.127.0.0/24", PodCIDRs: []string{"10.127.0.0/24"}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d Nodes created in %s", n+1, time.Since(start).Round(time.Millisecond))
	for range b.N {
		// A fresh namespace each run: no route of the last one's counts.
		r := runScaleAgent(ctx, b, c, scaleAgentNetNS(b), n, nodeCIDRScale(client))
		r.report(b, n, "model A")
	}
}

// scaleNodes is the number of fake nodes: scaleNodesDefault, or
// $PODNET_SCALE_NODES.
func scaleNodes(b *testing.B) int {
	n := scaleNodesDefault
	if s := os.Getenv("PODNET_SCALE_NODES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > 16000 {
			b.Fatalf("PODNET_SCALE_NODES=%q: want 1 to 16000", s)
		}
	}
	return n
}

// scaleResult is what one run of the agent measured.
type scaleResult struct {
	sync, del, add      time.Duration
	heap, alloc         float64
	reqRate, serverRate float64
	// The agent's reconciles, each a full one, and their total time: up
	// to ready (the first, which programs every route, and the one its
	// own Node's annotations cause if they arrived by then), and after it
	// (the idle minute's resync, one per Node event).
	syncReconciles, reconciles uint64
	syncReconcile, reconcile   time.Duration
}

// reconcileMean is the mean time of a reconcile after ready.
func (r scaleResult) reconcileMean() time.Duration {
	if r.reconciles == 0 {
		return 0
	}
	return r.reconcile / time.Duration(r.reconciles)
}

func (r scaleResult) report(b *testing.B, n int, model string) {
	b.ReportMetric(r.sync.Seconds(), "sync_s")
	b.ReportMetric(r.heap, "heap_MB")
	b.ReportMetric(r.alloc, "alloc_MB")
	b.ReportMetric(r.reqRate, "api_req/s")
	b.ReportMetric(r.serverRate, "apiserver_node_req/s")
	b.ReportMetric(float64(r.del.Milliseconds()), "del_ms")
	b.ReportMetric(float64(r.add.Milliseconds()), "add_ms")
	b.ReportMetric(float64(r.reconcileMean().Microseconds())/1e3, "reconcile_ms")
	b.Logf("%s, %d Nodes: all routes in %s; heap %.1f MB (allocated %.0f MB on the way); idle over %s: %.3f API requests/s (the agent's count), %.3f requests/s to what it watches (apiserver_request_total); one node's routing source deleted -> route withdrawn %s, created -> route programmed %s; reconciles: %d up to ready taking %s, %d after it %s each on average",
		model, n, r.sync.Round(time.Millisecond), r.heap, r.alloc, scaleIdle, r.reqRate, r.serverRate, r.del.Round(time.Millisecond), r.add.Round(time.Millisecond),
		r.syncReconciles, r.syncReconcile.Round(time.Millisecond), r.reconciles, r.reconcileMean().Round(100*time.Microsecond))
}

// scaleModel is what differs between the IPAM models at scale: the
// agent's datastore, what the benchmark deletes and creates again to
// withdraw and restore one node's route, and which of the API server's
// request counters the agent's watches move.
type scaleModel struct {
	kube func(cfg *rest.Config) *agent.KubeConfig
	// remove and restore take fake node i's route source away and back.
	remove, restore func(ctx context.Context, i int) error
	// serverRequests sums apiserver_request_total of the resources the
	// agent follows.
	resources []string
}

// nodeCIDRScale is model A: Nodes and their podCIDRs.
func nodeCIDRScale(client *kubernetes.Clientset) scaleModel {
	return scaleModel{
		kube: func(cfg *rest.Config) *agent.KubeConfig { return &agent.KubeConfig{REST: cfg} },
		remove: func(ctx context.Context, i int) error {
			return client.CoreV1().Nodes().Delete(ctx, scaleNodeName(i), metav1.DeleteOptions{})
		},
		restore: func(ctx context.Context, i int) error {
			return createScaleNodesErr(ctx, client, i, 1)
		},
		resources: []string{" core/nodes/"},
	}
}

// runScaleAgent runs the agent in ns until it has been measured, and
// stops it. Its routes stay in ns (as on a real node whose agent
// restarts); the namespace's removal takes them.
func runScaleAgent(ctx context.Context, b *testing.B, c *cluster.Cluster, ns string, n int, m scaleModel) scaleResult {
	b.Helper()
	reg := prometheus.NewRegistry()
	cfg := rest.CopyConfig(c.Config)
	cfg.UserAgent = "podnet-agent"
	heapBefore, allocBefore := liveHeap()
	a, err := agent.New(agent.Config{
		Node: scaleAgentNode, Kube: m.kube(cfg), NetNS: ns, Mode: route.ModeHostGW,
		Registry: reg, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		b.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	var r scaleResult
	start := time.Now()
	wg.Go(func() {
		if err := a.Run(actx); err != nil {
			b.Error(err)
		}
	})
	waitScaleRoutes(ctx, b, ns, n, -1, true, 10*time.Minute)
	r.sync = time.Since(start)
	heapAfter, allocAfter := liveHeap()
	r.heap, r.alloc = (heapAfter-heapBefore)/1e6, (allocAfter-allocBefore)/1e6
	select {
	case <-a.ReadyC():
	case <-time.After(2 * time.Minute):
		b.Fatalf("agent not ready 2m after its routes: %v", a.Ready())
	}
	r.syncReconciles, r.syncReconcile = reconciles(b, reg)
	before, serverBefore := apiRequests(b, reg), resourceRequests(ctx, b, c, m.resources)
	time.Sleep(scaleIdle)
	r.reqRate = (apiRequests(b, reg) - before) / scaleIdle.Seconds()
	// The API server's own count: only the agent uses these resources
	// now (no controller runs, the benchmark's client is idle). A watch
	// counts when it ends.
	r.serverRate = (resourceRequests(ctx, b, c, m.resources) - serverBefore) / scaleIdle.Seconds()
	start = time.Now()
	if err := m.remove(ctx, 0); err != nil {
		b.Fatal(err)
	}
	waitScaleRoutes(ctx, b, ns, n-1, 0, false, time.Minute)
	r.del = time.Since(start)
	start = time.Now()
	if err := m.restore(ctx, 0); err != nil {
		b.Fatal(err)
	}
	waitScaleRoutes(ctx, b, ns, n, 0, true, time.Minute)
	r.add = time.Since(start)
	r.reconciles, r.reconcile = reconciles(b, reg)
	r.reconciles -= r.syncReconciles
	r.reconcile -= r.syncReconcile
	return r
}

// liveHeap returns the live heap after a collection and the bytes
// allocated so far.
func liveHeap() (heap, alloc float64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc), float64(ms.TotalAlloc)
}

// apiRequests sums podnet_agent_api_requests_total.
func apiRequests(b *testing.B, reg *prometheus.Registry) float64 {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "podnet_agent_api_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// reconciles returns podnet_agent_reconcile_duration_seconds's count and
// sum.
func reconciles(b *testing.B, reg *prometheus.Registry) (uint64, time.Duration) {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "podnet_agent_reconcile_duration_seconds" || len(mf.GetMetric()) == 0 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		return h.GetSampleCount(), time.Duration(h.GetSampleSum() * float64(time.Second))
	}
	return 0, 0
}

// resourceRequests sums apiserver_request_total of the resources whose
// keys contain one of subs (every verb and subresource).
func resourceRequests(ctx context.Context, b *testing.B, c *cluster.Cluster, subs []string) float64 {
	b.Helper()
	var sum float64
	for k, v := range apiserverRequests(ctx, b, c) {
		for _, sub := range subs {
			if strings.Contains(k, sub) {
				sum += v
			}
		}
	}
	return sum
}

// scaleClient is a client of the benchmark's own, with a rate limit far
// above client-go's default 5 requests/s so that thousands of Nodes are
// created in seconds, not minutes.
func scaleClient(b *testing.B, c *cluster.Cluster) *kubernetes.Clientset {
	b.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 2000, 2000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return client
}

func scaleNodeName(i int) string { return fmt.Sprintf("scale-node-%d", i) }

// createScaleNodes creates fake nodes from to from+n-1, 32 at a time:
// each with its podCIDR and the annotations its agent would have written.
func createScaleNodes(ctx context.Context, b *testing.B, client *kubernetes.Clientset, from, n int) {
	b.Helper()
	if err := createScaleNodesErr(ctx, client, from, n); err != nil {
		b.Fatal(err)
	}
}

func createScaleNodesErr(ctx context.Context, client *kubernetes.Clientset, from, n int) error {
	idx := make(chan int)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range min(32, n) {
		wg.Go(func() {
			for i := range idx {
				name := scaleNodeName(i)
				addr := scaleNodeAddr(i)
				cidr := scalePodCIDR(i).String()
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
						"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					}, Annotations: kubeapi.NodeAnnotations(clusterstate.NodeRecord{
						Name: name, Address: addr, VTEPIP: addr, VTEPMAC: clusterstate.VTEPMAC(name).String(),
					})},
					Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
				}
				if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("create Node %s: %w", name, err):
					default:
					}
				}
			}
		})
	}
	for i := from; i < from+n; i++ {
		idx <- i
	}
	close(idx)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// scaleAgentNetNS makes the agent's node namespace: its underlay link, a
// veth into a namespace of its own that stands for the network, holds
// scaleAgentAddr and the default route.
func scaleAgentNetNS(b *testing.B) string {
	b.Helper()
	name, path := testutil.NewNodeNetNS(b)
	outside, _ := testutil.NewNetNS(b)
	for _, args := range [][]string{
		{"-n", name, "link", "add", "underlay0", "type", "veth", "peer", "name", "uplink0", "netns", outside},
		{"-n", name, "addr", "add", scaleAgentAddr.String(), "dev", "underlay0"},
		{"-n", name, "link", "set", "underlay0", "up"},
		{"-n", name, "route", "add", "default", "dev", "underlay0"},
		{"-n", outside, "link", "set", "uplink0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			b.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	return path
}

// waitScaleRoutes waits until ns holds want routes of the agent's via a
// fake node and, unless node is -1, a route to node's podCIDR or none as
// present says.
func waitScaleRoutes(ctx context.Context, b *testing.B, ns string, want, node int, present bool, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, has, err := scaleRoutes(ns, node)
		if err != nil {
			b.Fatal(err)
		}
		if got == want && (node < 0 || has == present) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.Fatalf("%d routes via fake nodes after %s (route to node %d: %v), want %d", got, timeout, node, has, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scaleRoutes counts the agent's routes (protocol 97) via a gateway in
// ns, and says whether one goes to node's podCIDR.
func scaleRoutes(ns string, node int) (n int, has bool, err error) {
	var cidr netip.Prefix
	if node >= 0 {
		cidr = scalePodCIDR(node)
	}
	err = netns.Do(ns, func() error {
		routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: route.RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if r.Gw == nil || r.Dst == nil {
				continue
			}
			n++
			if p, ok := netip.AddrFromSlice(r.Dst.IP); ok && cidr.IsValid() && p.Unmap() == cidr.Addr() {
				has = true
			}
		}
		return nil
	})
	return n, has, err
}
