package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/source/kubeapi"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestNodeCIDRTwoNodes runs two real nodes with podnet deployed from
// deploy/kubernetes, the default: no etcd, the Kubernetes API as
// datastore, pods addressed from their Node's podCIDRs.
// Each agent annotates its Node and installs the config only once the
// Node has the podCIDRs kube-controller-manager allocates, so each node
// turns Ready after its config names them; its pods get addresses from
// them; pods on the two nodes talk without NAT over host-gw, then over
// VXLAN; creating and deleting pods makes no podnet write to the API
// (apiserver_request_total, and the agents' own request counters); and
// deleting a Node withdraws the routes to its podCIDRs from the other.
func TestNodeCIDRTwoNodes(t *testing.T) {
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := c.Deploy(ctx, cluster.Default, nil); err != nil {
		t.Fatal(err)
	}
	podCIDRs, servers := nodeCIDRServers(ctx, t, c)
	for i, n := range c.Nodes {
		peer := c.Nodes[1-i]
		wantRoutes(t, n, fmt.Sprintf("blackhole %s ", podCIDRs[n.Name][0]),
			fmt.Sprintf("%s via %s dev underlay0 ", podCIDRs[peer.Name][0], peer.IP))
	}
	clients := crossNodeTraffic(ctx, t, c, servers, "host-gw", "via %s dev underlay0")
	pods := append(servers, clients...)
	pods = append(pods, apiWritesPerPod(ctx, t, c, 3)...)

	setRoutingMode(ctx, t, c, "vxlan")
	pods = append(pods, crossNodeTraffic(ctx, t, c, servers, "vxlan", "via %s dev podnet.vxlan")...)
	for _, p := range pods {
		want := podCIDRs[p.Spec.NodeName][0]
		if a, err := netip.ParseAddr(p.Status.PodIP); err != nil || !want.Contains(a) {
			t.Errorf("pod %s on %s has address %q, not from the node's podCIDR %s", p.Name, p.Spec.NodeName, p.Status.PodIP, want)
		}
		if err := c.Client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitNoDiagPods(ctx, t, c)
	for _, n := range c.Nodes {
		nodeKeepsNothingOf(t, n, pods)
	}
	nodeDeletionWithdrawsRoutes(ctx, t, c, c.Nodes[0], c.Nodes[1], podCIDRs[c.Nodes[1].Name])
}

// nodeCIDRServers waits for every node of the default deployment to turn
// Ready, checks it as TestNodeCIDRTwoNodes does (checkNodeCIDRNode), and
// starts a diag server on each: the nodes' podCIDRs and the servers.
func nodeCIDRServers(ctx context.Context, t *testing.T, c *cluster.Cluster) (map[string][]netip.Prefix, []*corev1.Pod) {
	t.Helper()
	podCIDRs := map[string][]netip.Prefix{}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
		podCIDRs[n.Name] = checkNodeCIDRNode(ctx, t, c, n)
	}
	return podCIDRs, diagServers(ctx, t, c, "a")
}

// checkNodeCIDRNode checks what the agent did on n, now Ready: its Node
// carries the registration annotations, and the installed config hands
// out addresses from the Node's podCIDRs, in the node's own store, and
// excludes the cluster's CIDR from masquerade; the node turned Ready
// after that config was written. It returns the podCIDRs.
func checkNodeCIDRNode(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node) []netip.Prefix {
	t.Helper()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cidrs := kubeapi.PodCIDRsOf(node)
	if len(cidrs) != 1 || !netip.MustParsePrefix(cluster.ClusterCIDR).Contains(cidrs[0].Addr()) || cidrs[0].Bits() != 24 {
		t.Fatalf("Node %s: podCIDRs %v, want one /24 of %s", n.Name, cidrs, cluster.ClusterCIDR)
	}
	for k, want := range map[string]string{
		kubeapi.AnnotationUnderlayAddress: n.IP,
		kubeapi.AnnotationVTEPMAC:         clusterstate.VTEPMAC(n.Name).String(),
	} {
		if got := node.Annotations[k]; got != want {
			t.Errorf("Node %s: annotation %s=%q, want %q", n.Name, k, got, want)
		}
	}
	path := filepath.Join(n.CNIConfDir, "10-podnet.conflist")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			MasqExclude []string `json:"masqExclude"`
			IPAM        struct {
				Store string `json:"store"`
				Node  string `json:"node"`
				Pools []struct {
					CIDR string `json:"cidr"`
				} `json:"pools"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil || len(conf.Plugins) == 0 {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	p := conf.Plugins[0]
	if len(p.IPAM.Pools) != 1 || p.IPAM.Pools[0].CIDR != cidrs[0].String() || p.IPAM.Node != n.Name ||
		p.IPAM.Store != "bolt:/var/lib/podnet/ipam.db" || !slices.Equal(p.MasqExclude, []string{cluster.ClusterCIDR}) {
		t.Errorf("%s: want the pool %s of node %s in bolt:/var/lib/podnet/ipam.db and masqExclude %s:\n%s", path, cidrs[0], n.Name, cluster.ClusterCIDR, b)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's Ready condition follows the config: the transition
	// (to the second) is not before the file was written.
	if r := readyCondition(node); r == nil || r.LastTransitionTime.Time.Before(fi.ModTime().Truncate(time.Second)) {
		t.Errorf("Node %s: Ready %v, before its config was written at %s", n.Name, r, fi.ModTime())
	}
	t.Logf("%s: podCIDRs %v, annotations %s=%s %s=%s", n.Name, cidrs, kubeapi.AnnotationUnderlayAddress,
		node.Annotations[kubeapi.AnnotationUnderlayAddress], kubeapi.AnnotationVTEPMAC, node.Annotations[kubeapi.AnnotationVTEPMAC])
	return cidrs
}

// agentRoutes is what n's agent routes (proto 97), one route a line.
func agentRoutes(t *testing.T, n *cluster.Node) string {
	t.Helper()
	out, err := protoRoutes(n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantRoutes checks that n's agent routes hold each of want (a route's
// text up to its attributes).
func wantRoutes(t *testing.T, n *cluster.Node, want ...string) {
	t.Helper()
	routes := agentRoutes(t, n)
	for _, w := range want {
		if !strings.Contains(routes, w) {
			t.Errorf("%s: no route %q among the agent's:\n%s", n.Name, w, routes)
		}
	}
}

// nodeDeletionWithdrawsRoutes deletes gone's Node and waits until n
// routes nothing to its podCIDRs and has no VXLAN neighbour for it.
func nodeDeletionWithdrawsRoutes(ctx context.Context, t *testing.T, c *cluster.Cluster, n, gone *cluster.Node, cidrs []netip.Prefix) {
	t.Helper()
	wantRoutes(t, n, cidrs[0].String()+" via "+gone.IP+" dev podnet.vxlan ")
	if err := c.Client.CoreV1().Nodes().Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		routes := agentRoutes(t, n)
		neigh, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "neigh", "show", "dev", "podnet.vxlan").CombinedOutput()
		if err != nil {
			t.Fatalf("ip neigh on %s: %v: %s", n.Name, err, neigh)
		}
		if !strings.Contains(routes, cidrs[0].String()) && !strings.Contains(string(neigh), gone.IP+" ") {
			t.Logf("%s: routes to %s (%s) withdrawn %s after its Node was deleted; left:\n%s", n.Name, gone.Name, cidrs[0],
				time.Since(start).Round(100*time.Millisecond), routes)
			return
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("%s still routes to deleted Node %s 2m later:\n%s\nneighbours:\n%s", n.Name, gone.Name, routes, neigh)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
