package k8s_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestRestarts restarts containerd, then kubelet, then the podnet agent
// pod, one at a time, with pods running. After each, the running pods
// keep their sandboxes, addresses and connectivity (pod to pod, node to
// pod), and a new pod starts and gets an address. In the end, with every
// pod deleted, nothing of theirs is left, in the etcd variant, whose
// store (handles, endpoints, `podnet ipam check`) the agent's restart
// must leave consistent.
func TestRestarts(t *testing.T) {
	c := cluster.Start(t)
	n := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	deployPodnet(ctx, t, c, cluster.Etcd, nil)
	seen := sandboxLog{}
	servers := startServers(ctx, t, c, "srv-a", "srv-b")
	seen.record(ctx, t, n)
	sandboxOf := map[string]string{} // pod UID -> ready sandbox ID
	for id, s := range seen {
		if s.Ready {
			sandboxOf[s.PodUID] = id
		}
	}
	all := append([]*corev1.Pod(nil), servers...)
	restarts := []struct {
		name    string
		restart func(t *testing.T)
	}{
		{"containerd", func(t *testing.T) { restartComponent(t, n, "containerd") }},
		{"kubelet", func(t *testing.T) { restartComponent(t, n, "kubelet") }},
		{"agent", func(t *testing.T) { restartAgent(ctx, t, c) }},
	}
	for _, r := range restarts {
		ok := t.Run(r.name, func(t *testing.T) {
			r.restart(t)
			seen.record(ctx, t, n)
			serversKept(ctx, t, c, n, servers, sandboxOf)
			all = append(all, newPodWorks(ctx, t, c, "after-"+r.name, servers[0]))
		})
		if !ok {
			t.FailNow()
		}
	}
	t.Run("DeletedPodsLeaveNothing", func(t *testing.T) {
		deletedPodsLeaveNothing(ctx, t, c, n, seen, all)
	})
}

func restartComponent(t *testing.T, n *cluster.Node, name string) {
	old := n.PID(name)
	start := time.Now()
	if err := n.RestartComponent(name); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s restarted (pid %d, was %d) and up in %s", name, n.PID(name), old, time.Since(start).Round(100*time.Millisecond))
}

// restartAgent deletes the agent pod; the DaemonSet makes a new one.
func restartAgent(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d agent pods, want 1", len(list.Items))
	}
	old := list.Items[0]
	start := time.Now()
	if err := c.Client.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitAgentReady(ctx, t, c, string(old.UID))
	t.Logf("agent pod %s replaced by %s, ready in %s", old.Name, p.Name, time.Since(start).Round(100*time.Millisecond))
}

// serversKept checks that the server pods, n's, are still Running in the
// same sandbox with the same address, and reachable from n and from each
// other.
func serversKept(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node, servers []*corev1.Pod, sandboxOf map[string]string) {
	t.Helper()
	sbs, err := n.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, s := range sbs {
		ready[s.ID] = s.Ready
	}
	for _, s := range servers {
		p, err := c.Client.CoreV1().Pods(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP != s.Status.PodIP {
			t.Errorf("pod %s: %s, address %s; was Running with %s", s.Name, podSummary(p), p.Status.PodIP, s.Status.PodIP)
		}
		if id := sandboxOf[string(s.UID)]; !ready[id] {
			t.Errorf("pod %s: its sandbox %s is no longer ready", s.Name, id)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("pod %s: container %s restarted %d times", s.Name, cs.Name, cs.RestartCount)
			}
		}
	}
	// kubelet may take a moment to see the runtime again; the network
	// itself never went away, so this is about the exec path.
	waitUntil(ctx, t, "connectivity of the running pods", time.Minute, func() error {
		for _, s := range servers {
			if err := nodeToPod(n, s); err != nil {
				return err
			}
		}
		if err := podToPod(ctx, n, servers[0], servers[1]); err != nil {
			return err
		}
		return podToPod(ctx, n, servers[1], servers[0])
	})
}

// newPodWorks starts a client pod that fetches from server, and checks
// it got an address from the pool and the server's answer. It returns
// the pod (Succeeded).
func newPodWorks(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, server *corev1.Pod) *corev1.Pod {
	t.Helper()
	url := fmt.Sprintf("http://%s:%d/", server.Status.PodIP, diagPort)
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, diagPod(name, "get", "--timeout", "10s", url), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(ctx, t, c, name, corev1.PodSucceeded)
	if ip, err := netip.ParseAddr(p.Status.PodIP); err != nil || !shippedPool.Contains(ip) {
		t.Fatalf("new pod %s: address %q not in the pool %s", name, p.Status.PodIP, shippedPool)
	}
	body, err := c.Client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	if want := "hello from " + server.Name + " "; !strings.Contains(string(body), want) {
		t.Fatalf("new pod %s got %q, want %q", name, body, want)
	}
	t.Logf("new pod %s (%s) reached %s", name, p.Status.PodIP, server.Name)
	return p
}
