package k8s_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestWireGuard's operator steps after the switch on: a key rotated
// with `podnet wireguard rotate-key` in the agent's container
// (kubectl exec), and
// encryption turned off again by a rollout.

// agentBinary is the podnet binary in the agent's image (not on PATH).
const agentBinary = "/opt/podnet/bin/podnet"

// execInAgent runs cmd in n's agent container with `kubectl -n
// kube-system exec <pod> -c agent -- cmd`, and returns its stdout and
// stderr.
func execInAgent(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node, cmd ...string) (stdout, stderr string, err error) {
	t.Helper()
	pod, _ := agentOn(ctx, t, c, n)
	k := c.Kubectl(ctx, append([]string{"-n", pod.Namespace, "exec", pod.Name, "-c", "agent", "--"}, cmd...)...)
	var out, errOut bytes.Buffer
	k.Stdout, k.Stderr = &out, &errOut
	if err := k.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("kubectl exec %s -c agent -- %v (agent on %s): %w", pod.Name, cmd, n.Name, err)
	}
	return out.String(), errOut.String(), nil
}

// rotateKey rotates node 1's key as docs/encryption.md says an operator
// does, with the pods probing each other and the reader on: the Node's
// annotation takes the printed key, node 2's podnet.wg peers with it
// (and no longer with the old one), nothing goes in the clear, and
// traffic resumes. It returns the longest gap of a pair.
func (w *wgWorld) rotateKey(ctx context.Context, t *testing.T, tr *traffic) time.Duration {
	t.Helper()
	n1, n2 := w.c.Nodes[0], w.c.Nodes[1]
	old, err := nodeWGOf(ctx, n1)
	if err != nil {
		t.Fatal(err)
	}
	w.cap.Take()
	from := time.Now()
	tr.mark("rotate-key in " + n1.Name + "'s agent")
	stdout, stderr, err := execInAgent(ctx, t, w.c, n1, agentBinary, "wireguard", "rotate-key")
	took := time.Since(from)
	if err != nil {
		t.Fatalf("%v; stderr: %s", err, stderr)
	}
	tr.mark("rotate-key returned")
	printed := strings.TrimSpace(stdout)
	if _, err := wgtypes.ParseKey(printed); err != nil || printed == old.key {
		t.Fatalf("rotate-key printed %q (old key %s): want a new public key: %v", stdout, old.key, err)
	}
	t.Logf("rotate-key in %s's agent returned after %s: printed %s; stderr: %s", n1.Name, took.Round(time.Millisecond), printed, strings.TrimSpace(stderr))
	if now, err := nodeWGOf(ctx, n1); err != nil || now.key != printed {
		t.Errorf("once rotate-key returned: %s's annotation %s is %q (%v), want the printed %s", n1.Name, wgKeyAnnotation, now.key, err, printed)
	}
	waitUntil(ctx, t, n2.Name+" peering with "+n1.Name+"'s new key", time.Minute, func() error {
		if err := peersAndRoutes(n2, map[string]bool{printed: true, old.key: false}, old.podCIDR+" dev "+wgDevice); err != nil {
			return err
		}
		return encryptedTo(ctx, n2, n1)
	})
	tr.mark(n2.Name + " has the new key")
	waitUntil(ctx, t, "the pods reaching each other after the rotation", time.Minute, func() error { return tr.settled(10) })
	tr.mark("every pair through")
	if err := w.exchangeBoth(5 * time.Second); err != nil {
		t.Errorf("after the rotation: %v", err)
	}
	to := time.Now()
	r := windowResult(tr, from, to)
	t.Logf("rotate-key on %s, timeline:\n%s", n1.Name, windowTimeline(tr, r, from, to))
	t.Logf("rotate-key on %s: %s; failed probes: %s", n1.Name, r.summary(len(tr.logs), to.Sub(from)), failedOutcomes(tr, from, to))
	if err := w.take(t, "key rotation").encrypted(1); err != nil {
		t.Errorf("key rotation: %v", err)
	}
	return r.longestGap
}

// turnOff sets the ConfigMap's encryption back to none and rolls the
// DaemonSet under the pods' probes: podnet.wg and its routes go on both
// nodes (a userspace device ends with its agent), each node routes the
// other's pod CIDR through the underlay again, the keys leave the Node
// annotations, the payload is on the wire again, and the pods are the
// same pods. It returns the longest gap of a pair.
func (w *wgWorld) turnOff(ctx context.Context, t *testing.T, tr *traffic) time.Duration {
	t.Helper()
	uids := map[string]string{w.a.Name: string(w.a.UID), w.b.Name: string(w.b.UID)}
	from := time.Now()
	w.cap.Take()
	editConfigMap(ctx, t, w.c, tr, "encryption none", func(d map[string]string) { d["encryption"] = "none" })
	rollDaemonSet(ctx, t, w.c, tr, "restart for encryption none", restartTemplate)
	for i, n := range w.c.Nodes {
		waitUntil(ctx, t, n.Name+" routing to "+w.c.Nodes[1-i].Name+" in the clear", time.Minute, func() error {
			return clearTo(ctx, n, w.c.Nodes[1-i])
		})
	}
	tr.mark("both nodes route in the clear")
	waitUntil(ctx, t, "the pods reaching each other in the clear", 2*time.Minute, func() error { return tr.settled(10) })
	tr.mark("every pair through")
	to := time.Now()
	r := windowResult(tr, from, to)
	t.Logf("turning encryption off, timeline:\n%s", windowTimeline(tr, r, from, to))
	t.Logf("turning encryption off: %s; failed probes: %s", r.summary(len(tr.logs), to.Sub(from)), failedOutcomes(tr, from, to))
	w.take(t, "while the agents rolled back to none")
	for _, n := range w.c.Nodes {
		routes, _ := protoRoutes(n)
		t.Logf("%s with encryption none: no %s, routes %s", n.Name, wgDevice, strings.ReplaceAll(strings.TrimSpace(routes), "\n", "; "))
	}
	w.clearOnTheWire(t)
	for name, uid := range uids {
		p, err := w.c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("after encryption off: pod %s: %v", name, err)
		case string(p.UID) != uid || p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0:
			t.Errorf("after encryption off: pod %s uid %s (was %s), %s, %d restarts; want the same pod running, not restarted",
				name, p.UID, uid, p.Status.Phase, p.Status.ContainerStatuses[0].RestartCount)
		}
	}
	return r.longestGap
}

// clearTo says why n does not yet send to peer's pods in the clear with
// encryption none: podnet.wg still there, a route through it or
// unreachable, no route to peer's pod CIDR, or its own key still
// published.
func clearTo(ctx context.Context, n, peer *cluster.Node) error {
	if out, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "link", "show", wgDevice).CombinedOutput(); err == nil {
		return fmt.Errorf("%s: %s still there: %s", n.Name, wgDevice, out)
	}
	want, err := nodeWGOf(ctx, peer)
	if err != nil {
		return err
	}
	routes, err := protoRoutes(n)
	if err != nil {
		return err
	}
	switch {
	case strings.Contains(routes, wgDevice) || strings.Contains(routes, "unreachable"):
		return fmt.Errorf("%s: routes through %s or unreachable: %s", n.Name, wgDevice, routes)
	case !hasRoute(routes, want.podCIDR):
		return fmt.Errorf("%s: no route to %s's pod CIDR %s: %s", n.Name, peer.Name, want.podCIDR, routes)
	}
	mine, err := nodeWGOf(ctx, n)
	if err != nil {
		return err
	}
	if mine.key != "" {
		return fmt.Errorf("%s: annotation %s still %s", n.Name, wgKeyAnnotation, mine.key)
	}
	return nil
}
