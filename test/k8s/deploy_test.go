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

// agentSelector selects podnet's agent pods (the DaemonSet's).
const agentSelector = "app.kubernetes.io/name=podnet"

// deployPodnet applies the variant of deploy/kubernetes, after edit (if
// not nil) has changed the DaemonSet as a user tuning it would, and waits
// until every node is Ready and an agent pod ready.
func deployPodnet(ctx context.Context, t *testing.T, c *cluster.Cluster, v cluster.Variant, edit func(*appsv1.DaemonSet)) {
	t.Helper()
	err := c.Deploy(ctx, v, func(m *cluster.Manifests) {
		if edit != nil {
			edit(m.DaemonSet)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitUntil(ctx, t, n.Name+" Ready after podnet was applied", 3*time.Minute, func() error {
			obj, err := n.Object(ctx)
			if err != nil {
				return err
			}
			if r := readyCondition(obj); r == nil || r.Status != corev1.ConditionTrue {
				return fmt.Errorf("node not ready: %v", r)
			}
			return nil
		})
	}
	waitAgentReady(ctx, t, c, "")
}

// waitAgentReady waits for a ready agent pod whose UID is not oldUID,
// and returns it.
func waitAgentReady(ctx context.Context, t *testing.T, c *cluster.Cluster, oldUID string) *corev1.Pod {
	t.Helper()
	var agent *corev1.Pod
	waitUntil(ctx, t, "podnet agent pod ready", 3*time.Minute, func() error {
		list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
		if err != nil {
			return err
		}
		for i := range list.Items {
			p := &list.Items[i]
			if string(p.UID) == oldUID || p.DeletionTimestamp != nil {
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					agent = p
					return nil
				}
			}
			return fmt.Errorf("agent pod %s not ready: %s", p.Name, podSummary(p))
		}
		return fmt.Errorf("no new agent pod among %d", len(list.Items))
	})
	return agent
}

// waitUntil polls cond every half second until it returns nil, failing t
// with cond's last error after timeout.
func waitUntil(ctx context.Context, t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// startServers creates `podnet diag serve` pods and returns them Running,
// each with one address from the pool.
func startServers(ctx context.Context, t *testing.T, c *cluster.Cluster, names ...string) []*corev1.Pod {
	t.Helper()
	for _, name := range names {
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var pods []*corev1.Pod
	for _, name := range names {
		p := waitPod(ctx, t, c, name, corev1.PodRunning)
		if ip, err := netip.ParseAddr(p.Status.PodIP); err != nil || !shippedPool.Contains(ip) {
			t.Fatalf("pod %s: address %q not in the pool %s", name, p.Status.PodIP, shippedPool)
		}
		pods = append(pods, p)
	}
	return pods
}

// nodeToPod fetches the server pod's page from n's network namespace.
func nodeToPod(n *cluster.Node, p *corev1.Pod) error {
	resp, err := n.HTTPClient(10 * time.Second).Get(fmt.Sprintf("http://%s:%d/", p.Status.PodIP, diagPort))
	if err != nil {
		return fmt.Errorf("node to pod %s (%s): %w", p.Name, p.Status.PodIP, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "hello from "+p.Name+" ") {
		return fmt.Errorf("node to pod %s (%s): %q", p.Name, p.Status.PodIP, body)
	}
	return nil
}

// podToPod fetches to's page from inside from, which runs on n (exec
// through n's CRI), and checks that to saw from's own address: pod to pod
// is not NATed.
func podToPod(ctx context.Context, n *cluster.Node, from, to *corev1.Pod) error {
	url := fmt.Sprintf("http://%s:%d/", to.Status.PodIP, diagPort)
	out, err := n.Exec(ctx, from.Namespace, from.Name, "diag", 30*time.Second,
		"/opt/podnet/bin/podnet", "diag", "get", "--timeout", "10s", url)
	if err != nil {
		return fmt.Errorf("pod %s to pod %s: %w", from.Name, to.Name, err)
	}
	if !strings.Contains(string(out), "hello from "+to.Name+" ") || !strings.Contains(string(out), "to "+from.Status.PodIP+":") {
		return fmt.Errorf("pod %s to pod %s: %q, want %s's answer to %s", from.Name, to.Name, out, to.Name, from.Status.PodIP)
	}
	return nil
}
