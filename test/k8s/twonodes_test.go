package k8s_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestTwoNodes runs two real nodes, each a kubelet and a containerd in
// network and mount namespaces of its own on one underlay, with podnet
// deployed from deploy/kubernetes/etcd (block IPAM in the cluster's
// etcd; TestNodeCIDRTwoNodes runs the default). Pods on the two nodes talk without
// NAT over the routing mode the shipped ConfigMap picks (auto, which is
// host-gw between nodes on one L2), then over VXLAN after the user's edit
// of routing_mode and a restart of the agents; the pods started before
// the switch keep talking. Deleting the pods leaves nothing on either
// node.
func TestTwoNodes(t *testing.T) {
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := c.Deploy(ctx, cluster.Etcd, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	var servers []*corev1.Pod
	for _, n := range c.Nodes {
		name := "diag-srv-" + n.Name
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, onNode(n, diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort))), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, waitPod(ctx, t, c, name, corev1.PodRunning))
	}
	clients := crossNodeTraffic(ctx, t, c, servers, "host-gw", "via %s dev underlay0")

	setRoutingMode(ctx, t, c, "vxlan")
	clients = append(clients, crossNodeTraffic(ctx, t, c, servers, "vxlan", "via %s dev podnet.vxlan")...)

	pods := append(servers, clients...)
	for _, p := range pods {
		if err := c.Client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitNoDiagPods(ctx, t, c)
	for _, n := range c.Nodes {
		nodeKeepsNothingOf(t, n, pods)
	}
}

// crossNodeTraffic waits until each node routes to the other's pods as
// the mode does (route is the route's expected text, %s the peer's
// underlay address), then has a client pod on each node fetch from the
// server on the other node: the server must see the client pod's own
// address. It returns the client pods.
func crossNodeTraffic(ctx context.Context, t *testing.T, c *cluster.Cluster, servers []*corev1.Pod, mode, route string) []*corev1.Pod {
	t.Helper()
	for i, n := range c.Nodes {
		peer := c.Nodes[1-i]
		want := fmt.Sprintf(route, peer.IP)
		var last string
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(last, want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s has no %q route to %s's pods; agent routes:\n%s", mode, n.Name, want, peer.Name, last)
			}
			time.Sleep(time.Second)
			out, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-4", "route", "show", "proto", "97").CombinedOutput()
			if err != nil {
				t.Fatalf("ip route on %s: %v: %s", n.Name, err, out)
			}
			last = string(out)
		}
		t.Logf("%s: %s routes: %s", mode, n.Name, strings.TrimSpace(last))
	}
	var clients []*corev1.Pod
	for i, n := range c.Nodes {
		srv := servers[1-i]
		name := fmt.Sprintf("diag-cl-%s-%s", mode, n.Name)
		url := fmt.Sprintf("http://%s:%d/", srv.Status.PodIP, diagPort)
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, onNode(n, diagPod(name, "get", "--timeout", "10s", url)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cl := waitPod(ctx, t, c, name, corev1.PodSucceeded)
		body, err := c.Client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs of %s: %v", name, err)
		}
		if !strings.Contains(string(body), "to "+cl.Status.PodIP+":") {
			t.Fatalf("%s: %s (%s on %s) got %q from %s on %s; want the answer to its own address",
				mode, name, cl.Status.PodIP, n.Name, body, srv.Status.PodIP, srv.Spec.NodeName)
		}
		t.Logf("%s: %s -> %s: %s", mode, n.Name, srv.Spec.NodeName, strings.TrimSpace(string(body)))
		clients = append(clients, cl)
	}
	return clients
}

// setRoutingMode makes the user's edit of the ConfigMap's routing_mode
// and restarts the agents (the DaemonSet reads it at start), then waits
// until the new agents are ready.
func setRoutingMode(ctx context.Context, t *testing.T, c *cluster.Cluster, mode string) {
	t.Helper()
	cms := c.Client.CoreV1().ConfigMaps("kube-system")
	cm, err := cms.Get(ctx, "podnet-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["routing_mode"] = mode
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := c.Client.CoreV1().Pods("kube-system")
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=podnet"}
	old, err := pods.List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	gone := map[string]bool{}
	for _, p := range old.Items {
		gone[string(p.UID)] = true
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		list, err := pods.List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, p := range list.Items {
			if !gone[string(p.UID)] && podReady(&p) {
				ready++
			}
		}
		if ready == len(c.Nodes) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d podnet agents ready 3m after switching to %s", ready, len(c.Nodes), mode)
		}
		time.Sleep(time.Second)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitNoDiagPods waits until every diag pod is gone from the API: each
// node's kubelet has run its CNI DEL.
func waitNoDiagPods(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=podnet-diag"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods still there 2m after deletion", len(list.Items))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// nodeKeepsNothingOf checks that node n holds no veth but its underlay,
// no route to the pods' addresses and no CNI cache entry of their
// sandboxes.
func nodeKeepsNothingOf(t *testing.T, n *cluster.Node, pods []*corev1.Pod) {
	t.Helper()
	links, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-o", "link", "show", "type", "veth").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link on %s: %v: %s", n.Name, err, links)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(links)), "\n") {
		if l != "" && !strings.Contains(l, " underlay0@") {
			t.Errorf("veth left on %s: %s", n.Name, l)
		}
	}
	routes, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-4", "route", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip route on %s: %v: %s", n.Name, err, routes)
	}
	for _, p := range pods {
		for _, r := range strings.Split(string(routes), "\n") {
			if strings.HasPrefix(r, p.Status.PodIP+" ") {
				t.Errorf("route to deleted pod %s left on %s: %s", p.Name, n.Name, r)
			}
		}
	}
	cache, _ := filepath.Glob(filepath.Join(n.CNICacheDir, "results", "*"))
	if len(cache) > 0 {
		var names []string
		for _, f := range cache {
			names = append(names, filepath.Base(f))
		}
		// Only the agent's pod (host network) could have none; every
		// entry left is a pod sandbox's.
		t.Errorf("CNI cache entries left on %s: %v", n.Name, names)
	}
}

// onNode pins the pod to node n.
func onNode(n *cluster.Node, p *corev1.Pod) *corev1.Pod {
	p.Spec.NodeName = n.Name
	return p
}
