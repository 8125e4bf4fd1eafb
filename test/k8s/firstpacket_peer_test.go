package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podnet/podnet/connectivity"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// firstPacketPeerEnv names the policy peer TestFirstPacketPeer measures
// (kube-router); unset, the test is skipped: it measures a peer, it
// does not judge podnet, so make test leaves it out.
const firstPacketPeerEnv = "PODNET_FIRSTPACKET_PEER"

// firstPacketLoad is how many selected pods the loaded round creates at
// once.
const firstPacketLoad = 10

// TestFirstPacketPeer is TestFirstPacket pointed at the policy peer:
// podnet without its policy service, kube-router enforcing policy. A
// NetworkPolicy denies the egress of pods labelled fp=denied; each such
// pod probes a server over HTTP from its container's first moment, every
// half second (300 ms to answer), until a probe is blocked, and prints
// how many attempts that took. Every attempt before the blocked one got
// through: a denied packet delivered before the peer's rules were in
// place. Two rounds:
//
//   - peer stopped: kube-router's DaemonSet selects no node, a denied pod
//     is created and runs 10 s, then kube-router is started again;
//   - under load: with kube-router running, firstPacketLoad denied pods
//     are created at once.
//
// A pod no policy selects must fetch in both (the network works). The
// counts are logged and written to $PODNET_FIRSTPACKET_OUT when set;
// denied packets getting through is a finding about the peer, not a
// failure. Run (root, about five minutes):
//
//	cd test/k8s && PODNET_FIRSTPACKET_PEER=kube-router go test -count=1 -v -run '^TestFirstPacketPeer$' .
func TestFirstPacketPeer(t *testing.T) {
	switch peer := os.Getenv(firstPacketPeerEnv); peer {
	case "":
		t.Skipf("%s unset: a measurement of the policy peer (kube-router), not of podnet", firstPacketPeerEnv)
	case "kube-router":
	default:
		t.Fatalf("%s=%q: the peer measured is kube-router", firstPacketPeerEnv, peer)
	}
	c := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	deployKubeRouterPeer(ctx, t, c)
	pods := c.Client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, diagPod("fp-server", "serve", "--listen", ":8080"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := waitPod(ctx, t, c, "fp-server", corev1.PodRunning)
	target := srv.Status.PodIP + ":8080" // diag probe's http target; get's URL is http://<target>/
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fp-no-egress", Namespace: "default"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fp": "denied"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	if _, err := c.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var report []string

	// Round 1: the peer stopped while a denied pod starts.
	setKubeRouterNodes(ctx, t, c, `{"podnet.io/first-packet-test":"no-node"}`)
	createFirstPacketPods(ctx, t, c, target, "fp-stopped-denied")
	// It ends at once if its first probe is blocked.
	time.Sleep(10 * time.Second)
	back := time.Now()
	setKubeRouterNodes(ctx, t, c, `null`)
	if err := c.WaitKubeRouterReady(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-router ready again %s after it was started", time.Since(back).Round(100*time.Millisecond))
	r := firstPacketResult(ctx, t, c, "fp-stopped-denied")
	report = append(report, fmt.Sprintf("peer stopped 10 s: %d of %d probes of the denied pod got through, blocked %d ms after its container started (%s)", r.Attempts-1, r.Attempts, r.Millis, r.Error))

	// Round 2: many selected pods at once, the peer running.
	var names []string
	for i := range firstPacketLoad {
		names = append(names, fmt.Sprintf("fp-load-denied-%d", i))
	}
	createFirstPacketPods(ctx, t, c, target, names...)
	through, pods1 := 0, 0
	var worst int64
	for _, n := range names {
		r := firstPacketResult(ctx, t, c, n)
		if r.Attempts > 1 {
			pods1++
		}
		through += r.Attempts - 1
		worst = max(worst, r.Millis)
		t.Logf("%s: %d probes before the first blocked one, blocked after %d ms (%s)", n, r.Attempts-1, r.Millis, r.Error)
	}
	report = append(report, fmt.Sprintf("under load (%d selected pods at once): %d of them had denied probes get through, %d probes in all; the last blocked %d ms after its container started",
		firstPacketLoad, pods1, through, worst))
	summary := "TestFirstPacketPeer, kube-router " + cluster.KubeRouterVersion + " over podnet without its policy service:\n  " + strings.Join(report, "\n  ") + "\n"
	t.Log(summary)
	if out := os.Getenv("PODNET_FIRSTPACKET_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(summary), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// createFirstPacketPods creates a pod probing target (address:port of
// a diag server) until blocked for each name (labelled fp=denied) and
// an unselected one, fp-open-<first name>, which must fetch from it.
func createFirstPacketPods(ctx context.Context, t *testing.T, c *cluster.Cluster, target string, names ...string) {
	t.Helper()
	pods := c.Client.CoreV1().Pods("default")
	open := diagPod("fp-open-"+names[0], "get", "http://"+target+"/", "--timeout", "300ms", "--retry-for", "2m")
	open.Labels["fp"] = "open"
	for _, n := range names {
		p := diagPod(n, "probe", target, "--kind", "http", "--expect", "blocked", "--timeout", "300ms", "--retry-for", "3m")
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Labels["fp"] = "denied"
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pods.Create(ctx, open, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := waitPodDone(ctx, t, c, open.Name); p.Status.Phase != corev1.PodSucceeded {
		t.Errorf("the unselected pod %s: %s, want Succeeded (it fetched)", open.Name, podSummary(p))
	}
}

// firstPacketResult waits for the probing pod to end and returns what it
// printed.
func firstPacketResult(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) connectivity.ProbeResult {
	t.Helper()
	p := waitPodDone(ctx, t, c, name)
	body, err := c.Client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r connectivity.ProbeResult
	if err := json.Unmarshal(body, &r); err != nil || p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("%s: %s, output %q (%v)", name, podSummary(p), body, err)
	}
	if r.Reached {
		t.Errorf("%s: never blocked in %d attempts: the peer did not enforce the policy", name, r.Attempts)
	}
	return r
}

// setKubeRouterNodes sets kube-router's DaemonSet's nodeSelector (null:
// every node) and, for a selector, waits for its pods to be gone.
func setKubeRouterNodes(ctx context.Context, t *testing.T, c *cluster.Cluster, sel string) {
	t.Helper()
	if _, err := c.Client.AppsV1().DaemonSets(cluster.KubeRouterNamespace).Patch(ctx, cluster.KubeRouterDaemonSet, types.StrategicMergePatchType,
		[]byte(`{"spec":{"template":{"spec":{"nodeSelector":`+sel+`}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if sel == "null" {
		return
	}
	waitUntil(ctx, t, "the kube-router pod gone", 3*time.Minute, func() error {
		list, err := c.Client.CoreV1().Pods(cluster.KubeRouterNamespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-router"})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return errString("kube-router pod still there: " + podSummary(&list.Items[0]))
		}
		return nil
	})
}
