package k8s_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestFirstPacket is issue 22's first-packet guarantee on a real node
// (the default deployment with --network-policy): with the agent
// stopped, a pod whose egress a NetworkPolicy denies and a pod no policy
// selects are created in the same instant, each fetching from a server
// from its container's first moment. Both start closed; once the agent
// is back the unselected one gets through and the denied one never
// does. Without the handshake the denied pod's first fetch would pass
// (the agent knows nothing of it), and the test fails.
func TestFirstPacket(t *testing.T) {
	c := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The default deployment as shipped: --network-policy, and the
	// policy socket on the host's /run/podnet.
	err := c.Deploy(ctx, cluster.Default, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitAgentReady(ctx, t, c, "")
	pods := c.Client.CoreV1().Pods("default")
	srv := diagPod("fp-server", "serve", "--listen", ":8080")
	if _, err := pods.Create(ctx, srv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv = waitPod(ctx, t, c, "fp-server", corev1.PodRunning)
	url := "http://" + srv.Status.PodIP + ":8080/"

	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fp-no-egress", Namespace: "default"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fp": "denied"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	if _, err := c.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Stop the agent: the DaemonSet selects no node for a while.
	ds := c.Client.AppsV1().DaemonSets("kube-system")
	dsName := "podnet"
	patch := func(sel string) {
		t.Helper()
		if _, err := ds.Patch(ctx, dsName, types.StrategicMergePatchType,
			[]byte(`{"spec":{"template":{"spec":{"nodeSelector":`+sel+`}}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch(`{"podnet.io/first-packet-test":"no-node"}`)
	waitUntil(ctx, t, "the agent pod gone", 3*time.Minute, func() error {
		list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return errString("agent pod still there: " + podSummary(&list.Items[0]))
		}
		return nil
	})

	// The clients: each fetches from its first moment, every 300 ms.
	client := func(name, label string, retry time.Duration) *corev1.Pod {
		p := diagPod(name, "get", url, "--timeout", "300ms", "--retry-for", retry.String())
		p.Labels["fp"] = label
		return p
	}
	for _, p := range []*corev1.Pod{client("fp-denied", "denied", 60*time.Second), client("fp-open", "open", 5*time.Minute)} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPod(ctx, t, c, "fp-denied", corev1.PodRunning)
	waitPod(ctx, t, c, "fp-open", corev1.PodRunning)
	time.Sleep(10 * time.Second)
	for _, name := range []string{"fp-denied", "fp-open"} {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("%s with the agent stopped: %s, want Running (closed, still fetching)", name, podSummary(p))
		}
	}

	// The agent comes back and admits both: the unselected one opens.
	back := time.Now()
	patch(`null`)
	waitAgentReady(ctx, t, c, "")
	waitPod(ctx, t, c, "fp-open", corev1.PodSucceeded)
	t.Logf("the unselected pod fetched %s after the agent was started again", time.Since(back).Round(100*time.Millisecond))
	denied := waitPodDone(ctx, t, c, "fp-denied")
	if denied.Status.Phase != corev1.PodFailed {
		t.Errorf("the pod whose egress is denied: %s, want Failed (no fetch ever passed)", podSummary(denied))
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// waitPodDone waits for the pod to end, either way.
func waitPodDone(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	waitUntil(ctx, t, name+" ended", 3*time.Minute, func() error {
		var err error
		if p, err = c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return nil
		}
		return errString(podSummary(p))
	})
	return p
}
