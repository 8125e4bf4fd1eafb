package k8s_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestWireGuard's NetworkPolicy and bad-key steps.

const (
	// badWGKey is base64, but of 9 bytes ("not-a-key"), not a key's 32.
	badWGKey = "bm90LWEta2V5"
	// The Node the test adds, with no kubelet behind it: a peer whose key
	// the test controls (its own agent would rewrite it). Its underlay
	// address is on the switch's subnet with nothing there, and nothing
	// is sent to its pod CIDR.
	fakeWGNode         = "podnet-wg-fake"
	fakeWGAddress      = "198.18.0.99"
	fakeWGPodCIDR      = "10.244.250.0/24"
	underlayAnnotation = "podnet.io/underlay-address"
)

// policyOverWireGuard: with encryption on, a NetworkPolicy that denies
// every ingress to wg-b stops wg-a (on the other node) while wg-b still
// reaches wg-a; one that allows wg-role=client lets wg-a through again;
// the reader sees only WireGuard.
func (w *wgWorld) policyOverWireGuard(ctx context.Context, t *testing.T) {
	t.Helper()
	w.cap.Take()
	nps := w.c.Client.NetworkingV1().NetworkPolicies("default")
	server := metav1.LabelSelector{MatchLabels: map[string]string{"wg-role": "server"}}
	deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "wg-deny"}, Spec: networkingv1.NetworkPolicySpec{
		PodSelector: server, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
	}}
	allow := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "wg-allow-client"}, Spec: networkingv1.NetworkPolicySpec{
		PodSelector: server, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"wg-role": "client"}},
		}}}},
	}}
	toB, toA := netip.AddrPortFrom(w.bIP, diagPort), netip.AddrPortFrom(w.aIP, diagPort)
	for _, step := range []struct {
		np        *networkingv1.NetworkPolicy
		connected bool
	}{{deny, false}, {allow, true}} {
		start := time.Now()
		if _, err := nps.Create(ctx, step.np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(ctx, t, fmt.Sprintf("policy %s in force", step.np.Name), time.Minute, func() error {
			return verdictInARow(w.nsA, toB, step.connected, 10)
		})
		if err := verdictInARow(w.nsB, toA, true, 3); err != nil {
			t.Errorf("policy %s: the other way, not under policy: %v", step.np.Name, err)
		}
		t.Logf("policy %s: wg-a to wg-b connected=%v, 10 in a row, %s after it was created", step.np.Name, step.connected, time.Since(start).Round(time.Millisecond))
	}
	if err := w.take(t, "NetworkPolicy deny, then allow").encrypted(1); err != nil {
		t.Errorf("NetworkPolicy: %v", err)
	}
	for _, np := range []string{deny.Name, allow.Name} {
		if err := nps.Delete(ctx, np, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// verdictInARow probes dst from ns n times: each must have connected
// (or, with connected false, not).
func verdictInARow(ns *netns.NetNS, dst netip.AddrPort, connected bool, n int) error {
	for i := range n {
		p := dialFrom(ns, dst, 300*time.Millisecond)
		if (p.result == probeConnected) != connected {
			return fmt.Errorf("probe %d of %d to %s: %s", i+1, n, dst, probeOutcome(p))
		}
	}
	return nil
}

// badKeys: a malformed key in a Node's annotation is skipped with a log
// line naming the node; the agents do not crash and keep their other
// peers, whose traffic (the probes of tr) does not miss a beat. First on
// a Node the test adds (fakeWGNode: no agent rewrites its key), then on
// node 2's own Node, whose agent owns the annotation: the test logs what
// that agent and node 1's do about it.
func (w *wgWorld) badKeys(ctx context.Context, t *testing.T, tr *traffic) {
	t.Helper()
	c := w.c
	n1, n2 := c.Nodes[0], c.Nodes[1]
	_, restarts1 := agentOn(ctx, t, c, n1)
	_, restarts2 := agentOn(ctx, t, c, n2)
	w.cap.Take()
	fakeKey := addFakeWGNode(ctx, t, c)
	waitUntil(ctx, t, n1.Name+" peering with "+fakeWGNode, time.Minute, func() error {
		return peersAndRoutes(n1, map[string]bool{fakeKey: true}, fakeWGPodCIDR+" dev "+wgDevice)
	})
	from := time.Now()
	if err := annotateNode(ctx, c, fakeWGNode, wgKeyAnnotation, badWGKey); err != nil {
		t.Fatal(err)
	}
	tr.mark(fakeWGNode + "'s key made bad")
	waitUntil(ctx, t, n1.Name+" dropping "+fakeWGNode+"'s peer for its bad key", time.Minute, func() error {
		return peersAndRoutes(n1, map[string]bool{fakeKey: false}, "unreachable "+fakeWGPodCIDR)
	})
	if err := encryptedTo(ctx, n1, n2); err != nil {
		t.Errorf("%s's bad key: %s lost its peer %s: %v", fakeWGNode, n1.Name, n2.Name, err)
	}
	line := logLine(agentLog(ctx, t, c, n1), "wireguard peer skipped", fakeWGNode, "not 32 bytes")
	if line == "" {
		t.Errorf("%s's agent logged nothing naming %s for its bad key", n1.Name, fakeWGNode)
	}
	t.Logf("%s's bad key: %s routes its pod CIDR unreachable, keeps %s's peer, and logs: %s; events about %s: %s",
		fakeWGNode, n1.Name, n2.Name, line, fakeWGNode, eventsAbout(ctx, c, fakeWGNode))
	if err := w.exchangeBoth(5 * time.Second); err != nil {
		t.Errorf("with %s's key bad: %v", fakeWGNode, err)
	}
	to := time.Now()
	if r := windowResult(tr, from, to); r.probes == 0 || r.failedAllowed != 0 {
		t.Errorf("%s's key made bad: %s; want no probe between wg-a and wg-b lost", fakeWGNode, r.summary(len(tr.logs), to.Sub(from)))
	}
	w.ownKeyOverwritten(ctx, t, tr)
	for _, r := range []struct {
		n    *cluster.Node
		had  int32
		what string
	}{{n1, restarts1, "first"}, {n2, restarts2, "second"}} {
		if _, now := agentOn(ctx, t, c, r.n); now != r.had {
			t.Errorf("%s's agent restarted %d times during the bad-key steps", r.n.Name, now-r.had)
		}
	}
	if err := w.take(t, "bad keys").encrypted(1); err != nil {
		t.Errorf("bad keys: %v", err)
	}
}

// addFakeWGNode adds fakeWGNode with a valid random key, removed when t
// ends, and returns the key.
func addFakeWGNode(ctx context.Context, t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString(b)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: fakeWGNode, Annotations: map[string]string{
			underlayAnnotation: fakeWGAddress, wgKeyAnnotation: key,
		}},
		Spec: corev1.NodeSpec{PodCIDR: fakeWGPodCIDR, PodCIDRs: []string{fakeWGPodCIDR}},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), fakeWGNode, metav1.DeleteOptions{})
	})
	return key
}

// peersAndRoutes says why n's podnet.wg does not have (true) or lack
// (false) the peers of keys, or why its agent has no route starting with
// route.
func peersAndRoutes(n *cluster.Node, keys map[string]bool, route string) error {
	_, peers, err := wgDeviceOf(n)
	if err != nil {
		return err
	}
	for k, want := range keys {
		if _, ok := peerFor(peers, k); ok != want {
			return fmt.Errorf("%s: peer of key %s there: %v, want %v", n.Name, k, ok, want)
		}
	}
	routes, err := protoRoutes(n)
	if err != nil {
		return err
	}
	if !hasRoute(routes, route) {
		return fmt.Errorf("%s: no route %q: %s", n.Name, route, routes)
	}
	return nil
}

// ownKeyOverwritten sets node 2's own annotation to a bad key, as a hand
// edit would, and logs what happens: whether node 2's agent puts its key
// back (and how fast) and whether node 1's saw the bad value. The test
// puts the key back itself if the agent does not. Either way the nodes
// end up encrypting to each other again.
func (w *wgWorld) ownKeyOverwritten(ctx context.Context, t *testing.T, tr *traffic) {
	t.Helper()
	c := w.c
	n1, n2 := c.Nodes[0], c.Nodes[1]
	before, err := nodeWGOf(ctx, n2)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := annotateNode(ctx, c, n2.Name, wgKeyAnnotation, badWGKey); err != nil {
		t.Fatal(err)
	}
	tr.mark(n2.Name + "'s own key made bad")
	var back time.Duration
	for back == 0 && time.Since(start) < 30*time.Second {
		time.Sleep(100 * time.Millisecond)
		if now, err := nodeWGOf(ctx, n2); err == nil && now.key == before.key {
			back = time.Since(start)
		}
	}
	if back == 0 {
		t.Logf("%s's annotation %s set to %q: its agent did not put its key back within 30s; the test does", n2.Name, wgKeyAnnotation, badWGKey)
		if err := annotateNode(ctx, c, n2.Name, wgKeyAnnotation, before.key); err != nil {
			t.Fatal(err)
		}
	}
	waitEncrypted(ctx, t, c, time.Minute)
	waitUntil(ctx, t, "probes through after "+n2.Name+"'s key came back", time.Minute, func() error { return tr.settled(10) })
	if err := w.exchangeBoth(5 * time.Second); err != nil {
		t.Errorf("after %s's key came back: %v", n2.Name, err)
	}
	// The key is back within a second or so: the window goes on for 2 s
	// more, to count every probe the bad value cost.
	time.Sleep(2 * time.Second)
	to := time.Now()
	r := windowResult(tr, start, to)
	t.Logf("%s's own key made bad and back: %s; failed probes: %s", n2.Name, r.summary(len(tr.logs), to.Sub(start)), failedOutcomes(tr, start, to))
	seen := logLine(agentLog(ctx, t, c, n1), "wireguard peer skipped", n2.Name, "not 32 bytes")
	if seen == "" {
		seen = "nothing (the bad value did not reach its reconcile)"
	}
	if back != 0 {
		t.Logf("%s's annotation %s set to %q: its agent put its key back after %s; %s logged: %s", n2.Name, wgKeyAnnotation, badWGKey, back.Round(time.Millisecond), n1.Name, seen)
	} else {
		t.Logf("%s logged: %s", n1.Name, seen)
	}
}

// eventsAbout lists the reasons and messages of the events whose object
// is called name, in any namespace.
func eventsAbout(ctx context.Context, c *cluster.Cluster, name string) string {
	list, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " | ")
}
