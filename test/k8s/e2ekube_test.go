package k8s_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/agent/cniinstall"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/agent/source/kubeapi"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
	"github.com/podnet/podnet/test/e2e/e2enet"
	"github.com/podnet/podnet/test/k8s/cluster"
)

const (
	// e2eNodes is how many simulated nodes each topology runs.
	e2eNodes = 3
	// e2eRouteBound bounds how long a Node change (deleted, registered
	// again) takes to reach every other node's routes: a watch event and
	// one reconcile, milliseconds on an idle machine; the bound leaves
	// room for a loaded one and still catches a route kept until a
	// resync or a restart.
	e2eRouteBound = 10 * time.Second
)

// TestE2EKube is test/e2e's simulated multi-node network (package
// e2enet) on the Kubernetes datastore, node-CIDR model (issue 14, model
// A), against a real kube-apiserver: no etcd for podnet, no kubelet, no
// controllers. The test does what they would: it creates each Node (the
// kubelet's registration) and then sets its spec.podCIDRs
// (kube-controller-manager --allocate-node-cidrs). Each node is a
// namespace with forwarding off running a real `podnet agent
// --datastore kubernetes` process with the shipped node-CIDR ConfigMap
// (routing_mode, cluster_cidr with its documented dual-stack edit, the
// conflist), which reaches the API server over the underlay. Pods are
// namespaces wired by the real plugin with the config the agent
// installed.
//
// It checks, on one L2 segment (the shipped auto mode picks host-gw) and
// across a router (VXLAN): no config before the Node has podCIDRs; the
// config installed from them; every pod pair talks both ways, IPv4 and
// IPv6, and sees the other's own address (no NAT); traffic to a host
// outside the pools leaves under the node's address; deleting a Node
// withdraws the routes to its podCIDRs (and over VXLAN the entries for
// its VTEP) from every other node within e2eRouteBound, and registering
// it again brings them back; and after
// every pod is deleted, no veth, pod route, masquerade set element,
// address allocation or CNI cache entry is left.
func TestE2EKube(t *testing.T) {
	c := cluster.Start(t, cluster.WithControlPlaneOnly())
	shipped := loadShipped(t, c.ModuleRoot)
	for _, tc := range []struct {
		name     string
		underlay func(testing.TB) *e2enet.Underlay
		routed   bool
	}{
		{"switch", e2enet.NewSwitch, false},
		{"router", e2enet.NewRouter, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runKubeE2E(t, newKubeE2E(t, c, shipped, tc.underlay(t)), transport(t, shipped.mode, tc.routed))
		})
	}
}

// transport is the way the routes between nodes go under mode: auto
// picks host-gw on one segment and VXLAN across a router.
func transport(t *testing.T, mode route.Mode, routed bool) route.Mode {
	switch {
	case mode == route.ModeAuto && routed:
		return route.ModeVXLAN
	case mode == route.ModeAuto:
		return route.ModeHostGW
	case mode == route.ModeHostGW && routed:
		t.Fatalf("routing_mode %s cannot carry pod traffic across a router", mode)
	}
	return mode
}

// kubeE2E is e2enet's cluster on the Kubernetes datastore.
type kubeE2E struct {
	*e2enet.Cluster
	t       *testing.T
	c       *cluster.Cluster
	shipped e2eShipped
}

func newKubeE2E(t *testing.T, c *cluster.Cluster, shipped e2eShipped, u *e2enet.Underlay) *kubeE2E {
	t.Helper()
	e := &kubeE2E{Cluster: e2enet.New(t, u, shipped.mode), t: t, c: c, shipped: shipped}
	kubeconfig := writeKubeconfig(t, c, e.Dir, serveAPI(t, c, u))
	e.NetConf = filepath.Join(e.Dir, e2eConfKey)
	if err := os.WriteFile(e.NetConf, shipped.conflist, 0o644); err != nil {
		t.Fatal(err)
	}
	e.Network = e2enet.Network{Name: shipped.network, Exclude: shipped.clusterCIDRs}
	var cidrs []string
	for _, p := range shipped.clusterCIDRs {
		cidrs = append(cidrs, p.String())
	}
	e.AgentFlags = func(n *e2enet.Node) []string {
		return []string{"--datastore", "kubernetes", "--kubeconfig", kubeconfig,
			"--cluster-cidr", strings.Join(cidrs, ","), "--store", e.store(n)}
	}
	return e
}

// store is n's node-local IPAM store, the DaemonSet's
// bolt:/var/lib/podnet/ipam.db on a node of its own.
func (e *kubeE2E) store(n *e2enet.Node) string { return "bolt:" + filepath.Join(n.Dir, "ipam.db") }

func runKubeE2E(t *testing.T, e *kubeE2E, mode route.Mode) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var nodes []*e2enet.Node
	for i := 1; i <= e2eNodes; i++ {
		nodes = append(nodes, e.startNode(ctx, i))
	}
	for _, n := range nodes {
		e.AddPod(n)
		e.AddPod(n)
	}
	for _, n := range nodes {
		e.WaitRoutes(n.Name, n.Pools, e2enet.Without(nodes, n), true, e2eRouteBound)
		e.CheckForwarding(n)
		e.checkInstalled(n)
	}
	e.CheckTransport(nodes[0], nodes[1], nodes[1].Pools, mode, e.linkLocal6(ctx, nodes[1]))
	e.CheckTraffic()

	// n3's Node is deleted: the other nodes withdraw its routes. Then it
	// registers again with the same podCIDRs (its agent still runs and
	// annotates it) and they route it again.
	n3 := nodes[2]
	e.WaitVXLANPeer(n3, nodes[:2], mode == route.ModeVXLAN, 0)
	if err := e.c.Client.CoreV1().Nodes().Delete(ctx, n3.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := e.WaitRoutes(n3.Name, n3.Pools, nodes[:2], false, e2eRouteBound)
	t.Logf("Node %s deleted: its routes (%v) withdrawn from the other %d nodes after %v", n3.Name, n3.Pools, len(nodes)-1, took)
	// Over VXLAN the other nodes also forget its VTEP (neighbour and
	// forwarding entries): a later node with its address must not get
	// n3's traffic under n3's MAC.
	e.WaitVXLANPeer(n3, nodes[:2], false, e2eRouteBound)
	start := time.Now()
	registerNode(ctx, t, e.c, n3.Name)
	allocatePodCIDRs(ctx, t, e.c, n3.Name, n3.Pools)
	e.WaitRoutes(n3.Name, n3.Pools, nodes[:2], true, e2eRouteBound)
	e.WaitVXLANPeer(n3, nodes[:2], mode == route.ModeVXLAN, e2eRouteBound)
	t.Logf("Node %s registered again: routed on the other nodes after %v", n3.Name, time.Since(start))
	e.CheckTraffic()

	e.DelPods()
	for _, n := range nodes {
		e.CheckMasqClean(n)
		e.CheckPodsGone(n)
		e.checkStoreEmpty(ctx, n)
	}
}

// startNode adds node i and starts its agent the way a cluster does:
// the Node is registered without podCIDRs, and the agent installs no
// config (and is not ready) until they are set.
func (e *kubeE2E) startNode(ctx context.Context, i int) *e2enet.Node {
	t := e.t
	t.Helper()
	n := e.AddNode(i, e.shipped.podCIDRs(i)...)
	registerNode(ctx, t, e.c, n.Name)
	e.LaunchAgent(n)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := e.Ready(n)
		if err != nil && strings.Contains(err.Error(), "no spec.podCIDRs") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s on a Node without podCIDRs: readiness %v, want not ready for want of spec.podCIDRs", n.Name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(e.ConfPath(n)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("agent %s on a Node without podCIDRs: config %s: %v, want none", n.Name, e.ConfPath(n), err)
	}
	allocatePodCIDRs(ctx, t, e.c, n.Name, n.Pools)
	e.WaitReady(n)
	return n
}

// linkLocal6 is n's IPv6 link-local underlay address as its agent
// annotated its Node: the IPv6 host-gw next hop.
func (e *kubeE2E) linkLocal6(ctx context.Context, n *e2enet.Node) netip.Addr {
	e.t.Helper()
	node, err := e.c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	rec, ok := kubeapi.NodeRecordFromNode(node)
	if !ok || rec.Address != n.Addr || !rec.LinkLocal6.IsLinkLocalUnicast() {
		e.t.Fatalf("Node %s: annotations %v, want underlay address %s and a link-local IPv6 address", n.Name, node.Annotations, n.Addr)
	}
	return rec.LinkLocal6
}

// checkInstalled: the agent installed the plugins, and the shipped
// conflist with what the node-CIDR model fills in and nothing else: the
// node's name, one pool per podCIDR, the node-local store, and the
// cluster CIDRs as masqExclude; and, as the shipped conflist sets no
// mtu, the pod MTU of the routing mode over the underlay's 1500 bytes.
func (e *kubeE2E) checkInstalled(n *e2enet.Node) {
	t := e.t
	t.Helper()
	var want map[string]any
	if err := json.Unmarshal(e.shipped.conflist, &want); err != nil {
		t.Fatal(err)
	}
	var pools, exclude []any
	for _, p := range n.Pools {
		pools = append(pools, map[string]any{"name": cniinstall.NodeCIDRPoolName(p), "cidr": p.String(), "blockSize": float64(cniinstall.NodeCIDRBlockSize(p))})
	}
	for _, p := range e.shipped.clusterCIDRs {
		exclude = append(exclude, p.String())
	}
	podMTU, err := route.PodMTU(e.shipped.mode, 1500, false)
	if err != nil {
		t.Fatal(err)
	}
	plugins, _ := want["plugins"].([]any)
	for _, p := range plugins {
		pm, _ := p.(map[string]any)
		if ipamConf, _ := pm["ipam"].(map[string]any); ipamConf["type"] == "podnet-ipam" {
			ipamConf["node"], ipamConf["pools"], ipamConf["store"] = n.Name, pools, e.store(n)
			pm["masqExclude"] = exclude
		}
		if pm["type"] == "podnet" && pm["mtu"] == nil {
			pm["mtu"] = float64(podMTU)
		}
	}
	b, err := os.ReadFile(e.ConfPath(n))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", e.ConfPath(n), err)
	}
	if !reflect.DeepEqual(got, want) {
		wb, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("node %s installed:\n%s\nwant the shipped conflist with its podCIDRs, store and cluster CIDRs:\n%s", n.Name, b, wb)
	}
	for _, p := range []string{"podnet", "podnet-ipam"} {
		if _, err := os.Stat(filepath.Join(n.Dir, "bin", p)); err != nil {
			t.Fatal(err)
		}
	}
}

// checkStoreEmpty, once every pod is deleted: n's store holds no
// allocated address and no endpoint, and its CNI cache no result.
func (e *kubeE2E) checkStoreEmpty(ctx context.Context, n *e2enet.Node) {
	t := e.t
	t.Helper()
	s, err := bolt.Open(ctx, bolt.Options{Path: strings.TrimPrefix(e.store(n), "bolt:")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := ipam.New(s, ipam.Config{})
	blocks, err := a.Blocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Errorf("node %s: no block in its store %s: its pods' addresses came from elsewhere", n.Name, e.store(n))
	}
	for _, b := range blocks {
		if b.Allocated != 0 || b.Pool == "" || !slices.ContainsFunc(n.Pools, func(p netip.Prefix) bool { return p.Contains(b.CIDR.Addr()) }) {
			t.Errorf("node %s after DEL of every pod: block %+v, want one of its podCIDRs' with nothing allocated", n.Name, b)
		}
	}
	eps, err := a.Endpoints(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) > 0 {
		t.Errorf("node %s after DEL of every pod: endpoints left in its store: %+v", n.Name, eps)
	}
	if left, _ := filepath.Glob(filepath.Join(n.Dir, "cache", "results", "*")); len(left) > 0 {
		t.Errorf("node %s after DEL of every pod: CNI cache entries left: %v", n.Name, left)
	}
}
