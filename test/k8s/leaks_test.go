package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// sandboxLog remembers every pod sandbox a test saw. A deleted pod's
// sandboxes are gone from containerd too, and what they may have left on
// the node (veths, nftables elements, CNI cache entries, IPAM handles,
// endpoints) is found by their IDs.
type sandboxLog map[string]cluster.Sandbox

// record adds the sandboxes n's containerd has now.
func (l sandboxLog) record(ctx context.Context, t *testing.T, n *cluster.Node) {
	t.Helper()
	sbs, err := n.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sbs {
		if old, ok := l[s.ID]; ok && s.NetNS == "" {
			s.NetNS = old.NetNS // a stopped sandbox no longer says
		}
		l[s.ID] = s
	}
}

// ofPods returns the sandboxes of the pods.
func (l sandboxLog) ofPods(pods []*corev1.Pod) sandboxLog {
	uids := map[string]bool{}
	for _, p := range pods {
		uids[string(p.UID)] = true
	}
	out := sandboxLog{}
	for id, s := range l {
		if uids[s.PodUID] {
			out[id] = s
		}
	}
	return out
}

// trace is one thing podnet or the runtime keeps for a pod sandbox.
type trace struct {
	owner string // the sandbox (container) ID, "" if none is named
	kind  string // veth, nft, handle, endpoint, cache, netns
	what  string
	path  string // of a netns trace: the namespace's pin
}

// deletedPodsLeaveNothing deletes the pods, n's, and checks that n and
// the store keep nothing of theirs. It first checks that it sees each
// kind of trace of the pods that are running, so that a check that finds
// nothing cannot pass by looking in the wrong place.
func deletedPodsLeaveNothing(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node, seen sandboxLog, pods []*corev1.Pod) {
	t.Helper()
	seen.record(ctx, t, n)
	have := map[string]map[string]bool{}
	for _, tr := range traces(ctx, t, n, seen) {
		if have[tr.owner] == nil {
			have[tr.owner] = map[string]bool{}
		}
		have[tr.owner][tr.kind] = true
	}
	for id, s := range seen.ofPods(pods) {
		if !s.Ready {
			continue
		}
		for _, kind := range []string{"veth", "nft", "handle", "endpoint", "cache", "netns"} {
			if !have[id][kind] {
				t.Errorf("running pod %s (sandbox %s): no %s found; the leak check would miss it", s.Name, id, kind)
			}
		}
	}
	deletePods(ctx, t, c, pods, 2*time.Minute)
	// kubelet confirms a deletion once the sandbox is stopped (CNI DEL
	// done), so nothing may remain by now.
	if left := leftovers(ctx, t, c, n, seen, pods); len(left) > 0 {
		t.Errorf("deleted pods left:\n  %s", strings.Join(left, "\n  "))
	}
}

// deletePods deletes the pods and waits until they are gone from the API.
func deletePods(ctx context.Context, t *testing.T, c *cluster.Cluster, pods []*corev1.Pod, timeout time.Duration) {
	t.Helper()
	for _, p := range pods {
		err := c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(timeout)
	for _, p := range pods {
		for {
			_, err := c.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s still there %s after deletion", p.Name, timeout)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// traces lists what n and the store its plugins write keep per sandbox: veths (by
// their alias), podnet's nftables elements (by their comments), IPAM
// handles and workload endpoints, and for the sandboxes in seen their
// CNI cache entries and network namespaces (the machine's, shared with
// other clusters, so looked up by ID only).
func traces(ctx context.Context, t *testing.T, n *cluster.Node, seen sandboxLog) []trace {
	t.Helper()
	var out []trace
	veths, err := n.Veths()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range veths {
		if v.Name == "underlay0" {
			continue
		}
		o, _ := tag.ParseAlias(v.Alias)
		out = append(out, trace{owner: o.ContainerID, kind: "veth", what: fmt.Sprintf("veth %s (alias %q)", v.Name, v.Alias)})
	}
	elems, err := n.PodNFTElements()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range elems {
		// "<container ID> <ifname>" (masquerade), "<network> <container
		// ID> <ifname>" (host ports, the guard's pods set).
		f := strings.Fields(e.Comment)
		owner := ""
		if len(f) >= 2 {
			owner = f[len(f)-2]
		}
		if e.Table == dataplane.GuardTableName && owner == "" {
			// Keyed by the host veth, named after the sandbox.
			veth, _, _ := strings.Cut(e.Key, " ")
			for id := range seen {
				if dataplane.HostVethName(id, "eth0") == veth {
					owner = id
				}
			}
		}
		out = append(out, trace{owner: owner, kind: "nft", what: "nftables element " + e.String()})
	}
	rec, err := n.IPAMRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range rec.Handles {
		if !strings.Contains(h, ".gateway.") {
			_, cid, _ := strings.Cut(h, ".")
			out = append(out, trace{owner: cid, kind: "handle", what: "IPAM handle " + h})
		}
	}
	for _, e := range rec.Endpoints {
		out = append(out, trace{owner: e.ContainerID, kind: "endpoint", what: fmt.Sprintf("workload endpoint %s (container %s, %v)", e.ID(), e.ContainerID, e.IPs)})
	}
	for id, s := range seen {
		for _, f := range n.CNICacheEntries(id) {
			out = append(out, trace{owner: id, kind: "cache", what: fmt.Sprintf("CNI cache entry %s (%s/%s)", f, s.Namespace, s.Name)})
		}
	}
	return append(out, netnsTraces(t, n, seen)...)
}

// netnsTraces lists the pods' network namespaces that are still pinned:
// every pin of n's containerd, and the namespaces of the
// sandboxes in seen, wherever they are.
func netnsTraces(t *testing.T, n *cluster.Node, seen sandboxLog) []trace {
	t.Helper()
	pins, err := n.NetNSPins()
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for id, s := range seen {
		if s.NetNS == "" {
			continue
		}
		owner[s.NetNS] = id
		if _, err := os.Stat(s.NetNS); err == nil && !slices.Contains(pins, s.NetNS) {
			pins = append(pins, s.NetNS)
		}
	}
	var out []trace
	for _, p := range pins {
		of := "no sandbox's"
		if s, ok := seen[owner[p]]; ok {
			of = "sandbox of " + s.Namespace + "/" + s.Name
		}
		out = append(out, trace{owner: owner[p], kind: "netns", path: p, what: fmt.Sprintf("network namespace %s (%s)", p, of)})
	}
	return out
}

// leftovers lists what the deleted pods left on n and in its store: the traces of their
// sandboxes, workload endpoints under their names, routes to their
// addresses (unless a live pod has the address now), and whatever
// `podnet ipam check` reports. When no pod with a pod network is left at
// all, every trace is a leftover, whoever it belonged to.
func leftovers(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node, seen sandboxLog, pods []*corev1.Pod) []string {
	t.Helper()
	gone := seen.ofPods(pods)
	live, liveIPs := livePodNetwork(ctx, t, c, n)
	for id, s := range gone {
		if live[id] {
			t.Fatalf("sandbox %s of deleted pod %s is still ready", id, s.Name)
		}
	}
	all := len(liveIPs) == 0
	deleted := map[string]bool{}
	for _, p := range pods {
		deleted[p.Namespace+"/"+p.Name] = true
	}
	var left []string
	for _, tr := range traces(ctx, t, n, seen) {
		_, owned := gone[tr.owner]
		byName := tr.kind == "endpoint" && slices.ContainsFunc(pods, func(p *corev1.Pod) bool {
			return strings.Contains(tr.what, "/"+p.Namespace+"/"+p.Name+"/")
		})
		if owned || byName || all {
			left = append(left, tr.what)
		}
	}
	left = append(left, routeLeftovers(t, n, pods, liveIPs)...)
	store, err := n.IPAMStoreSpec()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := n.Podnet(ctx, "ipam", "check", "--store", store); err != nil {
		left = append(left, fmt.Sprintf("podnet ipam check: %v", err))
	} else if !strings.Contains(string(out), "ipam: clean") {
		left = append(left, fmt.Sprintf("podnet ipam check: %s", out))
	}
	return left
}

// livePodNetwork returns n's ready sandboxes and the addresses of the
// pods that have a pod network (not the agent's host network).
func livePodNetwork(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node) (map[string]bool, map[string]bool) {
	t.Helper()
	sbs, err := n.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, s := range sbs {
		if s.Ready {
			ready[s.ID] = true
		}
	}
	list, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]bool{}
	for _, p := range list.Items {
		if !p.Spec.HostNetwork && p.Status.PodIP != "" {
			ips[p.Status.PodIP] = true
		}
	}
	return ready, ips
}

// routeLeftovers lists n's routes to the deleted pods' addresses that no
// live pod has taken since.
func routeLeftovers(t *testing.T, n *cluster.Node, pods []*corev1.Pod, liveIPs map[string]bool) []string {
	t.Helper()
	routes, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-4", "route", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip route: %v: %s", err, routes)
	}
	var left []string
	for _, p := range pods {
		if p.Status.PodIP == "" || liveIPs[p.Status.PodIP] {
			continue
		}
		for _, r := range strings.Split(string(routes), "\n") {
			if strings.HasPrefix(r, p.Status.PodIP+" ") {
				left = append(left, fmt.Sprintf("route to deleted pod %s: %s", p.Name, r))
			}
		}
	}
	return left
}
