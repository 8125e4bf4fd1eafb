package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/podnet/podnet/agent/kubeblocks"
	"github.com/podnet/podnet/agent/source/kubeapi"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// blocksPool is the pool deploy/kubernetes/blocks ships, of /26 blocks.
var blocksPool = netip.MustParsePrefix("10.244.0.0/16")

// TestBlocksTwoNodes runs two real nodes with podnet deployed from
// deploy/kubernetes/blocks: block IPAM on the Kubernetes API (model B),
// the plugins allocating through their node's agent (its socket, which
// serves their reads from a cache and makes their writes), the agents
// reaching the API at the kubernetes Service's address (through each
// node's kube-proxy). Each node's first pod
// claims a block, affine to it and confirmed in its IPAMNode; its pods
// get addresses from it; pods on the two nodes talk without NAT, each
// node routing to the other's block, over host-gw and then, after the
// user's switch to VXLAN restarted the agents, over VXLAN; a warm pod (its node has a block
// with room) costs one block update to create and one to delete, and no
// other podnet write; deleted pods leave no allocation (Check clean).
func TestBlocksTwoNodes(t *testing.T) {
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := c.Deploy(ctx, cluster.Blocks, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
		checkBlocksNode(ctx, t, c, n)
	}

	// The first pod of each node claims its block: cold.
	before := podnetRequests(ctx, t, c)
	var servers []*corev1.Pod
	for _, n := range c.Nodes {
		name := "diag-srv-" + n.Name
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, onNode(n, diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort))), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, waitPod(ctx, t, c, name, corev1.PodRunning))
	}
	logPodnetRequests(t, "the first pod of each node (claims)", before, podnetRequests(ctx, t, c), len(servers))

	blocks := affineBlocks(ctx, t, c)
	for i, n := range c.Nodes {
		peer := c.Nodes[1-i]
		if len(blocks[n.Name]) != 1 || len(blocks[peer.Name]) != 1 {
			t.Fatalf("blocks by node %v: want one each", blocks)
		}
		wantRoutes(t, n, fmt.Sprintf("blackhole %s ", blocks[n.Name][0]),
			fmt.Sprintf("%s via %s dev underlay0 ", blocks[peer.Name][0], peer.IP))
	}
	clients := crossNodeTraffic(ctx, t, c, servers, "host-gw", "via %s dev underlay0")
	// The user's switch to VXLAN restarts the agents: the plugins' socket
	// goes and comes back with them, and new pods allocate through the
	// new agents while the old ones keep their addresses.
	setRoutingMode(ctx, t, c, "vxlan")
	clients = append(clients, crossNodeTraffic(ctx, t, c, servers, "vxlan", "via %s dev podnet.vxlan")...)
	pods := append(servers, clients...)
	pods = append(pods, blocksWritesPerPod(ctx, t, c, 3, blocks)...)

	for _, p := range pods {
		if !inBlockOf(blocks[p.Spec.NodeName], p.Status.PodIP) {
			t.Errorf("pod %s on %s has address %q, not from its node's blocks %v", p.Name, p.Spec.NodeName, p.Status.PodIP, blocks[p.Spec.NodeName])
		}
		if err := c.Client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitNoDiagPods(ctx, t, c)
	for _, n := range c.Nodes {
		nodeKeepsNothingOf(t, n, pods)
	}
	ipamHoldsNothing(ctx, t, c)
	ipamNodeRemovalWithdrawsRoutes(ctx, t, c, c.Nodes[0], c.Nodes[1], blocks[c.Nodes[1].Name][0])
}

// ipamNodeRemovalWithdrawsRoutes lets gone's blocks go as an admin does
// for a node that left (`podnet ipam node rm` with the admin's
// kubeconfig): its IPAMNode and its empty block are deleted, and n stops
// routing to the block.
func ipamNodeRemovalWithdrawsRoutes(ctx context.Context, t *testing.T, c *cluster.Cluster, n, gone *cluster.Node, block netip.Prefix) {
	t.Helper()
	store, err := n.IPAMStoreSpec()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := n.Podnet(ctx, "ipam", "node", "rm", gone.Name, "--store", store); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if blocks := affineBlocks(ctx, t, c); len(blocks[gone.Name]) > 0 {
		t.Errorf("blocks of %s after podnet ipam node rm: %v", gone.Name, blocks[gone.Name])
	}
	start := time.Now()
	for strings.Contains(agentRoutes(t, n), block.String()) {
		if time.Since(start) > time.Minute {
			t.Fatalf("%s still routes to %s 1m after podnet ipam node rm %s:\n%s", n.Name, block, gone.Name, agentRoutes(t, n))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%s: route to %s's block %s withdrawn %s after podnet ipam node rm", n.Name, gone.Name, block, time.Since(start).Round(100*time.Millisecond))
}

// checkBlocksNode checks what the agent did on n, now Ready: its Node
// carries the registration annotations, the plugins' IPAM socket is on
// the node's /run/podnet (the agent serves it from its container, where
// the host's directory is mounted), and the installed config is the
// ConfigMap's with the node's name: the pools and the socket as store.
func checkBlocksNode(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node) {
	t.Helper()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Annotations[kubeapi.AnnotationUnderlayAddress]; got != n.IP {
		t.Errorf("Node %s: annotation %s=%q, want %q", n.Name, kubeapi.AnnotationUnderlayAddress, got, n.IP)
	}
	if fi, err := os.Stat(n.HostPath(kubeblocks.DefaultSocket)); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s on %s: %v (mode %v), want a socket private to root", kubeblocks.DefaultSocket, n.Name, err, fi.Mode())
	}
	conf, err := os.ReadFile(filepath.Join(n.CNIConfDir, "10-podnet.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"store": "agent:` + kubeblocks.DefaultSocket + `"`, `"node": "` + n.Name + `"`, `"cidr": "` + blocksPool.String() + `"`} {
		if !bytes.Contains(conf, []byte(s)) {
			t.Errorf("installed conflist of %s has no %s:\n%s", n.Name, s, conf)
		}
	}
}

// affineBlocks reads the IPAM with the admin's credentials: the blocks
// affine to each node, each confirmed in the node's index and in the
// shipped pool.
func affineBlocks(ctx context.Context, t *testing.T, c *cluster.Cluster) map[string][]netip.Prefix {
	t.Helper()
	st, err := c.Nodes[0].OpenIPAMStore(ctx) // the API: one store for every node
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	infos, err := ipam.New(st, ipam.Config{}).Blocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]netip.Prefix{}
	for _, b := range infos {
		if b.Node == "" || b.Pool != "default" || !blocksPool.Contains(b.CIDR.Addr()) {
			t.Errorf("block %s: node %q, pool %q; want a node's, of pool default %s", b.CIDR, b.Node, b.Pool, blocksPool)
			continue
		}
		out[b.Node] = append(out[b.Node], b.CIDR)
	}
	for node, cidrs := range out {
		kv, err := st.Get(ctx, ipam.Keys{}.Node(node))
		if err != nil {
			t.Fatalf("IPAMNode %s: %v", node, err)
		}
		var ix ipam.NodeIndex
		if err := json.Unmarshal(kv.Value, &ix); err != nil {
			t.Fatal(err)
		}
		for _, cidr := range cidrs {
			if !slices.ContainsFunc(ix.Blocks, func(e ipam.NodeBlock) bool { return e.CIDR == cidr && e.State == ipam.AffinityConfirmed }) {
				t.Errorf("IPAMNode %s: block %s not confirmed: %+v", node, cidr, ix.Blocks)
			}
		}
	}
	t.Logf("blocks by node: %v", out)
	return out
}

func inBlockOf(blocks []netip.Prefix, ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && slices.ContainsFunc(blocks, func(b netip.Prefix) bool { return b.Contains(a) })
}

// ipamHoldsNothing: with every pod gone, no handle holds an address and
// Check, counting every allocation as a leak, finds nothing.
func ipamHoldsNothing(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	rec, err := c.Nodes[0].IPAMRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Handles) > 0 || len(rec.Endpoints) > 0 {
		t.Errorf("IPAM still holds handles %v, endpoints %v", rec.Handles, rec.Endpoints)
	}
	st, err := c.Nodes[0].OpenIPAMStore(ctx) // the API: one store for every node
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rep, err := ipam.New(st, ipam.Config{}).Check(ctx, ipam.CheckOptions{Live: func(string, string) bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Errorf("IPAM check: %+v", rep)
	}
}

// blocksWritesPerPod creates perNode pods on every node at once (each
// node has its block: warm), measures each one's time from create to
// Running, deletes them and waits until they are gone, and reports the
// podnet.io requests meanwhile from apiserver_request_total. A warm ADD
// is one block update, so is a DEL: 2 PUT ipamblocks per pod, and no
// other podnet.io write. It returns the pods (deleted), as they ran.
func blocksWritesPerPod(ctx context.Context, t *testing.T, c *cluster.Cluster, perNode int, blocks map[string][]netip.Prefix) []*corev1.Pod {
	t.Helper()
	before := podnetRequests(ctx, t, c)
	w, err := c.Client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=podnet-diag"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created := map[string]time.Time{}
	for _, n := range c.Nodes {
		for i := range perNode {
			name := fmt.Sprintf("diag-burst-%s-%d", n.Name, i)
			created[name] = time.Now()
			if _, err := c.Client.CoreV1().Pods("default").Create(ctx, onNode(n, diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort))), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	running := untilRunning(ctx, t, w, created)
	var pods []*corev1.Pod
	var lat []time.Duration
	for _, name := range slices.Sorted(maps.Keys(running)) {
		pods = append(pods, running[name].pod)
		lat = append(lat, running[name].at.Sub(created[name]))
	}
	slices.Sort(lat)
	t.Logf("create -> Running (watch) of %d pods created at once, %d per node: min %s, median %s, max %s",
		len(lat), perNode, lat[0].Round(time.Millisecond), lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	mid := podnetRequests(ctx, t, c)
	for _, p := range pods {
		if err := c.Client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		waitPodGone(ctx, t, c, p.Name)
	}
	after := podnetRequests(ctx, t, c)
	logPodnetRequests(t, "warm pods created (ADD)", before, mid, len(pods))
	logPodnetRequests(t, "warm pods deleted (DEL)", mid, after, len(pods))
	writes := podnetWrites(before, after)
	want := map[string]float64{"PUT ipamblocks": 2 * float64(len(pods))}
	if !maps.Equal(writes, want) {
		t.Errorf("podnet.io writes for %d warm pods (ADD and DEL): %v, want %v", len(pods), writes, want)
	}
	if after := affineBlocks(ctx, t, c); !maps.EqualFunc(after, blocks, slices.Equal) {
		t.Errorf("blocks by node changed during the warm pods: %v, were %v", after, blocks)
	}
	return pods
}

type runningPod struct {
	pod *corev1.Pod
	at  time.Time
}

// untilRunning follows w until every pod of want is Running and returns
// each with the time the watch said so.
func untilRunning(ctx context.Context, t *testing.T, w watch.Interface, want map[string]time.Time) map[string]runningPod {
	t.Helper()
	out := map[string]runningPod{}
	timeout := time.After(2 * time.Minute)
	for len(out) < len(want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("pod watch ended")
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || want[p.Name].IsZero() {
				continue
			}
			if _, seen := out[p.Name]; !seen && p.Status.Phase == corev1.PodRunning {
				out[p.Name] = runningPod{p, time.Now()}
			}
		case <-timeout:
			t.Fatalf("pods not Running after 2m: %d of %d are", len(out), len(want))
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	return out
}

// podnetRequests is apiserver_request_total for podnet.io by "VERB
// resource code".
func podnetRequests(ctx context.Context, t *testing.T, c *cluster.Cluster) map[string]float64 {
	t.Helper()
	body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("apiserver /metrics: %v", err)
	}
	out, err := parseCounters(bytes.NewReader(body), "apiserver_request_total", func(l map[string]string) string {
		if l["group"] != "podnet.io" {
			return ""
		}
		return l["verb"] + " " + l["resource"] + " " + l["code"]
	})
	if err != nil {
		t.Fatal(err)
	}
	delete(out, "")
	return out
}

// podnetWrites is the podnet.io writes between two readings, by "VERB
// resource" (every code).
func podnetWrites(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		f := strings.Fields(k)
		if d := v - before[k]; d != 0 && slices.Contains(writeVerbs, f[0]) {
			out[f[0]+" "+f[1]] += d
		}
	}
	return out
}

// logPodnetRequests logs the podnet.io requests between two readings,
// per pod.
func logPodnetRequests(t *testing.T, what string, before, after map[string]float64, pods int) {
	t.Helper()
	var lines []string
	keys := slices.Collect(maps.Keys(after))
	sort.Strings(keys)
	for _, k := range keys {
		if d := after[k] - before[k]; d != 0 {
			lines = append(lines, fmt.Sprintf("  %-36s %4.0f  %5.2f per pod", k, d, d/float64(pods)))
		}
	}
	t.Logf("podnet.io requests, %s, %d pods (apiserver_request_total by verb, resource, code):\n%s", what, pods, strings.Join(lines, "\n"))
}
