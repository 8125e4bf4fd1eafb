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

	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// sandboxLog remembers every pod sandbox a test saw. A deleted pod's
// sandboxes are gone from containerd too, and what they may have left on
// the node (veths, nftables elements, CNI cache entries, IPAM handles,
// endpoints) is found by their IDs.
type sandboxLog map[string]cluster.Sandbox

// record adds the sandboxes containerd has now.
func (l sandboxLog) record(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	sbs, err := c.Sandboxes(ctx)
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
func (l sandboxLog) ofPods(pods []*corev1.Pod) map[string]cluster.Sandbox {
	uids := map[string]bool{}
	for _, p := range pods {
		uids[string(p.UID)] = true
	}
	out := map[string]cluster.Sandbox{}
	for id, s := range l {
		if uids[s.PodUID] {
			out[id] = s
		}
	}
	return out
}

// deletedPodsLeaveNothing deletes the pods and checks that the node and
// the store keep nothing of theirs.
func deletedPodsLeaveNothing(ctx context.Context, t *testing.T, c *cluster.Cluster, seen sandboxLog, pods []*corev1.Pod) {
	t.Helper()
	seen.record(ctx, t, c)
	deletePods(ctx, t, c, pods, 2*time.Minute)
	// kubelet confirms a deletion once the sandbox is stopped (CNI DEL
	// done), so nothing may remain by now.
	if left := leftovers(ctx, t, c, seen, pods); len(left) > 0 {
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

// leftovers lists what the deleted pods left: their sandboxes' veths,
// nftables elements, CNI cache entries, network namespaces, IPAM handles
// and workload endpoints, routes to their addresses (unless a live pod
// has the address now), and whatever `podnet ipam check` reports. When no
// pod with a pod network is left at all, it also lists every per-pod
// record left, whoever it belonged to.
func leftovers(ctx context.Context, t *testing.T, c *cluster.Cluster, seen sandboxLog, pods []*corev1.Pod) []string {
	t.Helper()
	gone := seen.ofPods(pods)
	live, liveIPs := livePodNetwork(ctx, t, c)
	for id := range gone {
		if live[id] {
			t.Fatalf("sandbox %s of a deleted pod is still ready", id)
		}
	}
	all := len(liveIPs) == 0
	var left []string
	left = append(left, vethLeftovers(t, c, gone, all)...)
	left = append(left, nftLeftovers(t, c, gone, all)...)
	left = append(left, ipamLeftovers(ctx, t, c, gone, pods, all)...)
	left = append(left, routeLeftovers(t, c, pods, liveIPs)...)
	cacheOf := gone
	if all {
		cacheOf = seen
	}
	for id, s := range cacheOf {
		for _, f := range cluster.CNICacheEntries(id) {
			left = append(left, fmt.Sprintf("CNI cache entry of sandbox %s (%s/%s): %s", id, s.Namespace, s.Name, f))
		}
		if s.NetNS != "" {
			if _, err := os.Stat(s.NetNS); err == nil {
				left = append(left, fmt.Sprintf("network namespace of sandbox %s (%s/%s): %s", id, s.Namespace, s.Name, s.NetNS))
			}
		}
	}
	if out, err := c.Podnet(ctx, "ipam", "check", "--store", "etcd://"+cluster.EtcdEndpoint); err != nil {
		left = append(left, fmt.Sprintf("podnet ipam check: %v", err))
	} else if !strings.Contains(string(out), "ipam: clean") {
		left = append(left, fmt.Sprintf("podnet ipam check: %s", out))
	}
	return left
}

// livePodNetwork returns the ready sandboxes and the addresses of the
// pods that have a pod network (not the agent's host network).
func livePodNetwork(ctx context.Context, t *testing.T, c *cluster.Cluster) (map[string]bool, map[string]bool) {
	t.Helper()
	sbs, err := c.Sandboxes(ctx)
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

func vethLeftovers(t *testing.T, c *cluster.Cluster, gone map[string]cluster.Sandbox, all bool) []string {
	t.Helper()
	veths, err := c.Veths()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, v := range veths {
		o, ok := tag.ParseAlias(v.Alias)
		switch {
		case ok && hasSandbox(gone, o.ContainerID):
			left = append(left, fmt.Sprintf("veth %s of sandbox %s (alias %q)", v.Name, o.ContainerID, v.Alias))
		case all && v.Name != "underlay0":
			left = append(left, fmt.Sprintf("veth %s (alias %q) with no pod left", v.Name, v.Alias))
		}
	}
	return left
}

func nftLeftovers(t *testing.T, c *cluster.Cluster, gone map[string]cluster.Sandbox, all bool) []string {
	t.Helper()
	elems, err := c.PodNFTElements()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range elems {
		owned := slices.ContainsFunc(strings.Fields(e.Comment), func(f string) bool { return hasSandbox(gone, f) })
		if owned || all {
			left = append(left, "nftables element "+e.String())
		}
	}
	return left
}

func ipamLeftovers(ctx context.Context, t *testing.T, c *cluster.Cluster, gone map[string]cluster.Sandbox, pods []*corev1.Pod, all bool) []string {
	t.Helper()
	rec, err := c.IPAMRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, h := range rec.Handles {
		_, cid, _ := strings.Cut(h, ".")
		if hasSandbox(gone, cid) || (all && !strings.Contains(h, ".gateway.")) {
			left = append(left, "IPAM handle "+h)
		}
	}
	deleted := map[string]bool{}
	for _, p := range pods {
		deleted[p.Namespace+"/"+p.Name] = true
	}
	for _, e := range rec.Endpoints {
		if all || hasSandbox(gone, e.ContainerID) || deleted[e.Namespace+"/"+e.Pod] {
			left = append(left, fmt.Sprintf("workload endpoint %s (container %s, %v)", e.ID(), e.ContainerID, e.IPs))
		}
	}
	return left
}

// routeLeftovers lists the node's routes to the deleted pods' addresses
// that no live pod has taken since.
func routeLeftovers(t *testing.T, c *cluster.Cluster, pods []*corev1.Pod, liveIPs map[string]bool) []string {
	t.Helper()
	routes, err := exec.Command("nsenter", "--net="+c.NetNS, "ip", "-4", "route", "show").CombinedOutput()
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

func hasSandbox(m map[string]cluster.Sandbox, id string) bool {
	_, ok := m[id]
	return ok
}
