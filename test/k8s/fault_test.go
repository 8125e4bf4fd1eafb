package k8s_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/test/k8s/cluster"
)

const burstPods = 30

// TestContainerdKilledDuringBurst kills containerd (SIGKILL, by its PID)
// while kubelet is creating 30 pods, then starts it again. The sandboxes
// it was making are lost: after the restart containerd reports some as
// not ready (kubelet stops them, with a CNI DEL of attachments whose ADD
// result nobody received) and forgets others; kubelet makes new ones.
// Every pod must end Running with an address of its own; after all are
// deleted and the agent's IPAM GC has run, `podnet ipam check` is clean
// and nothing of any sandbox is left on the node or in the store: the
// etcd variant's, where a leaked address would hold a block of the
// cluster's pool.
func TestContainerdKilledDuringBurst(t *testing.T) {
	c := cluster.Start(t)
	n := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// GC every 15 s instead of every 5 min, as a user may choose; the
	// grace (how long an address's attachment must be missing) stays
	// the default minute, which is what keeps a slow ADD's address safe.
	deployPodnet(ctx, t, c, cluster.Etcd, func(ds *appsv1.DaemonSet) {
		cs := ds.Spec.Template.Spec.Containers
		for i := range cs {
			if cs[i].Name == "agent" {
				cs[i].Args = append(cs[i].Args, "--gc-interval=15s")
			}
		}
	})
	seen := sandboxLog{}
	pods := createBurst(ctx, t, c)
	killContainerdMidBurst(ctx, t, n, seen)

	start := time.Now()
	var running []*corev1.Pod
	waitUntil(ctx, t, "every burst pod Running after containerd came back", 15*time.Minute, func() error {
		seen.record(ctx, t, n)
		var err error
		running, err = burstRunning(ctx, c, pods)
		return err
	})
	t.Logf("all %d pods Running %s after containerd came back", burstPods, time.Since(start).Round(time.Second))
	distinctWorkingAddresses(t, n, running)

	seen.record(ctx, t, n)
	deletePods(ctx, t, c, running, 5*time.Minute)
	forgottenByContainerd(ctx, t, n, seen)
	start = time.Now()
	waitNoLeftovers(ctx, t, c, n, seen, running, 5*time.Minute)
	t.Logf("node and store clean %s after the pods were deleted (%d sandboxes seen for %d pods)",
		time.Since(start).Round(time.Second), len(seen), burstPods)
	// Let the agent's GC run on the empty node (every 15 s): it must find
	// nothing to fail on, and release nothing that makes check unclean.
	time.Sleep(20 * time.Second)
	released, failed := agentGCMetrics(t, n)
	if failed != 0 {
		t.Errorf("agent: podnet_agent_gc_errors_total %v: %s", failed, agentGCLog(ctx, c))
	}
	if left := leftovers(ctx, t, c, n, seen, running); len(left) > 0 {
		t.Errorf("after the agent's GC:\n  %s", strings.Join(left, "\n  "))
	}
	t.Logf("agent GC released %v addresses in the whole test; its log: %s", released, agentGCLog(ctx, c))
}

// createBurst creates the burst's pods at once; kubelet starts them in
// parallel.
func createBurst(ctx context.Context, t *testing.T, c *cluster.Cluster) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	for i := range burstPods {
		p, err := c.Client.CoreV1().Pods("default").Create(ctx, diagPod(fmt.Sprintf("burst-%02d", i), "serve", "--listen", fmt.Sprintf(":%d", diagPort)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	return pods
}

// distinctWorkingAddresses checks that every pod has an address of its
// own from the pool, which n reaches.
func distinctWorkingAddresses(t *testing.T, n *cluster.Node, pods []*corev1.Pod) {
	t.Helper()
	addrs := map[netip.Addr]string{}
	for _, p := range pods {
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || !shippedPool.Contains(ip) {
			t.Errorf("pod %s: address %q not in the pool %s", p.Name, p.Status.PodIP, shippedPool)
		}
		if other, dup := addrs[ip]; dup {
			t.Errorf("pods %s and %s both have %s", other, p.Name, ip)
		}
		addrs[ip] = p.Name
		if err := nodeToPod(n, p); err != nil {
			t.Error(err)
		}
	}
}

// waitNoLeftovers polls leftovers on n until there are none, failing t
// with the last list after timeout.
func waitNoLeftovers(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node, seen sandboxLog, pods []*corev1.Pod, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		left := leftovers(ctx, t, c, n, seen, pods)
		if len(left) == 0 {
			return
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s after the pods were deleted, still left:\n  %s", timeout, strings.Join(left, "\n  "))
		}
		time.Sleep(5 * time.Second)
	}
}

// forgottenByContainerd removes what containerd 1.6 forgets when it is
// killed in the middle of RunPodSandbox: its own leaks, not podnet's. A
// sandbox's network namespace is pinned before its network is set up, and
// a sandbox's shim started before the sandbox is recorded; after the
// restart neither is any sandbox's. Namespaces that hold an interface
// are left to the leak check: they would be podnet's. Shims go too, as
// teardown counts every shim left as an error.
func forgottenByContainerd(ctx context.Context, t *testing.T, n *cluster.Node, seen sandboxLog) {
	t.Helper()
	// Once kubelet has removed the deleted pods' sandboxes, their shims
	// exit; those whose task containerd had forgotten do not.
	waitUntil(ctx, t, "kubelet removes the deleted pods' sandboxes", 3*time.Minute, func() error {
		sbs, err := n.Sandboxes(ctx)
		if err != nil {
			return err
		}
		for _, s := range sbs {
			if s.Namespace == "default" {
				return fmt.Errorf("sandbox %s of %s still there", s.ID, s.Name)
			}
		}
		return nil
	})
	var orphans map[int]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if orphans, err = n.OrphanShims(ctx); err != nil {
			t.Fatal(err)
		}
		if len(orphans) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for pid, id := range orphans {
		t.Logf("containerd forgot the task %s of its shim %d when it was killed; killing the shim", id, pid)
		if err := n.KillShim(pid); err != nil {
			t.Error(err)
		}
	}
	seen.record(ctx, t, n)
	for _, tr := range netnsTraces(t, n, seen) {
		if tr.owner != "" {
			continue // a sandbox's: for the leak check
		}
		t.Logf("containerd forgot the %s it made for a sandbox when it was killed; removing it", tr.what)
		if err := n.RemoveEmptyNetNSPin(tr.path); err != nil {
			t.Error(err)
		}
	}
}

// killContainerdMidBurst waits until n's containerd has made a few of the
// burst's sandboxes, so that others are being made, kills it and starts
// it again.
func killContainerdMidBurst(ctx context.Context, t *testing.T, n *cluster.Node, seen sandboxLog) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	made := 0
	for time.Now().Before(deadline) {
		sbs, err := n.Sandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		made = 0
		for _, s := range sbs {
			if s.Namespace == "default" {
				made++
			}
		}
		if made >= 3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	seen.record(ctx, t, n)
	pid := n.PID("containerd")
	if err := n.KillComponent("containerd"); err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd (pid %d) killed with %d of %d sandboxes made", pid, made, burstPods)
	time.Sleep(2 * time.Second)
	start := time.Now()
	if err := n.StartComponent("containerd"); err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd started again (pid %d), up in %s", n.PID("containerd"), time.Since(start).Round(100*time.Millisecond))
}

// burstRunning returns the pods, fresh from the API, once every one is
// Running with an address.
func burstRunning(ctx context.Context, c *cluster.Cluster, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	var waiting []string
	for _, p := range pods {
		cur, err := c.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if cur.Status.Phase != corev1.PodRunning || cur.Status.PodIP == "" {
			waiting = append(waiting, cur.Name+": "+podSummary(cur))
		}
		out = append(out, cur)
	}
	if len(waiting) > 0 {
		return nil, fmt.Errorf("%d pods not Running: %s", len(waiting), strings.Join(waiting, "; "))
	}
	return out, nil
}

// agentGCLog returns what the agent logged about its IPAM GC.
func agentGCLog(ctx context.Context, c *cluster.Cluster) string {
	list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
	if err != nil || len(list.Items) == 0 {
		return fmt.Sprintf("(no agent pod: %v)", err)
	}
	body, err := c.Client.CoreV1().Pods("kube-system").GetLogs(list.Items[0].Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(agent logs: %v)", err)
	}
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.Contains(l, "GC") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "nothing logged (no leak to collect)"
	}
	return strings.Join(lines, "; ")
}

// agentGCMetrics reads the GC counters of n's agent from its metrics
// endpoint (host network: the node's port 9603).
func agentGCMetrics(t *testing.T, n *cluster.Node) (released, failed float64) {
	t.Helper()
	resp, err := n.HTTPClient(10 * time.Second).Get("http://127.0.0.1:9603/metrics")
	if err != nil {
		t.Fatalf("agent metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	found := 0
	for _, l := range strings.Split(string(body), "\n") {
		name, v, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		switch name {
		case "podnet_agent_gc_released_addresses_total":
			found++
			fmt.Sscan(v, &released)
		case "podnet_agent_gc_errors_total":
			found++
			fmt.Sscan(v, &failed)
		}
	}
	if found != 2 {
		t.Fatalf("agent metrics lack the GC counters:\n%s", body)
	}
	return released, failed
}
