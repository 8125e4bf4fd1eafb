package k8s_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestWireGuard is issue 31's judges on real nodes: two nodes, podnet
// deployed from deploy/kubernetes (the Kubernetes datastore, node-CIDR
// model; the keys in the Node annotation), a pod on each, an AF_PACKET
// reader on node 1's switch port the whole time.
//
//   - Encryption none, as shipped: a random payload the pods exchange
//     over TCP and UDP is on the wire (so the check can fail).
//   - The operator's switch: the ConfigMap's encryption set to wireguard
//     and the DaemonSet rolled, the pods probing each other 25 times a
//     second: the longest gap is logged (strict mode refuses traffic
//     between an encrypting node and one that has no key yet).
//   - The dashboard's WireGuard panels query metrics the agents export.
//   - On the wire: the payload never appears, no frame carries a pod
//     address, and between the nodes only UDP to or from 51871 (and the
//     host's own TCP to the API server and kubelet); podnet.wg on each
//     node has the other as its peer, and routes to the other's pod CIDR
//     go through it.
//   - Strict mode: UDP 51871 dropped on the switch: the pods see loss,
//     nothing in the clear; traffic resumes once the drop goes.
//   - Node 1's agent killed with SIGKILL: its pods' traffic is refused,
//     never in the clear, and flows encrypted again once the kubelet
//     has restarted the container (the gap is logged).
//   - NetworkPolicy over the encrypted path: a deny on the server
//     blocks the client on the other node, an allow lets it through.
//   - Malformed keys in the Node annotation (wireguard_faults_test.go).
//   - Node 1's key rotated with `podnet wireguard rotate-key`, run in its
//     agent container with kubectl exec, under the probes: the
//     annotation and node 2's peer take the printed key, nothing in the
//     clear, the gap logged (wireguard_ops_test.go).
//   - At the end, encryption turned off by the ConfigMap and a rollout
//     under the probes: podnet.wg and its routes gone, the keys
//     withdrawn from the Nodes, the payload in the clear again, the
//     pods the same; the gap logged.
//
// IPv4 only: the cluster's pods, Services and underlay are IPv4 (one
// ClusterCIDR); IPv6 pods over WireGuard are judged by test/e2e's
// TestWireGuardOnTheWire.
func TestWireGuard(t *testing.T) {
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	deployPodnet(ctx, t, c, cluster.Default, nil)
	w := newWGWorld(ctx, t, c)
	w.clearOnTheWire(t)

	tr := startTraffic(w.pairs())
	t.Cleanup(tr.stop)
	waitUntil(ctx, t, "the pods reaching each other", 2*time.Minute, func() error { return tr.settled(10) })
	gapOn, tailOn := w.turnOn(ctx, t, tr)
	checkNodesWG(ctx, t, c)
	checkDashboard(ctx, t, c, func(panel string) bool { return strings.HasPrefix(panel, "WireGuard/") })
	w.hostToRemotePod(t)
	w.encryptedOnTheWire(t, "encryption on")
	resumed := w.strictBlocked(ctx, t, tr)
	gapKill := w.agentKilled(ctx, t, tr)
	w.badKeys(ctx, t, tr)
	gapRotate := w.rotateKey(ctx, t, tr)
	tr.stop()

	w.policyOverWireGuard(ctx, t)
	w.encryptedOnTheWire(t, "encryption on, after the policy")
	off := startTraffic(w.pairs())
	t.Cleanup(off.stop)
	waitUntil(ctx, t, "the pods probing each other before encryption off", time.Minute, func() error { return off.settled(10) })
	gapOff := w.turnOff(ctx, t, off)
	off.stop()
	t.Logf("TestWireGuard figures: longest gap of a pod pair while encryption was rolled out %s (the last failure %s after both nodes had each other's peer); traffic back %s after UDP %d was let through again; longest gap after kill -9 of node 1's agent %s; after rotate-key on node 1 %s; while encryption was rolled back to none %s",
		gapOn.Round(time.Millisecond), tailOn.Round(time.Millisecond), resumed.Round(time.Millisecond), wgPort, gapKill.Round(time.Millisecond), gapRotate.Round(time.Millisecond), gapOff.Round(time.Millisecond))
}

// wgWorld is TestWireGuard's pods and reader: wg-a on node 1 (the
// client, as policy sees it), wg-b on node 2 (the server), both serving
// diagPort.
type wgWorld struct {
	c        *cluster.Cluster
	a, b     *corev1.Pod
	nsA, nsB *netns.NetNS
	aIP, bIP netip.Addr
	cap      *cluster.Capture
	payload  []byte
	nodes    map[netip.Addr]bool
}

func newWGWorld(ctx context.Context, t *testing.T, c *cluster.Cluster) *wgWorld {
	t.Helper()
	w := &wgWorld{c: c, payload: secretPayload(t), nodes: map[netip.Addr]bool{}}
	for i, name := range []string{"wg-a", "wg-b"} {
		p := onNode(c.Nodes[i], diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort)))
		p.Labels["wg-role"] = map[int]string{0: "client", 1: "server"}[i]
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.a, w.b = waitPod(ctx, t, c, "wg-a", corev1.PodRunning), waitPod(ctx, t, c, "wg-b", corev1.PodRunning)
	w.nsA, w.nsB = openPodNetNS(ctx, t, c, w.a), openPodNetNS(ctx, t, c, w.b)
	w.aIP, w.bIP = netip.MustParseAddr(w.a.Status.PodIP), netip.MustParseAddr(w.b.Status.PodIP)
	for _, n := range c.Nodes {
		w.nodes[netip.MustParseAddr(n.IP)] = true
	}
	var err error
	if w.cap, err = c.Nodes[0].CaptureSwitchPort(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.cap.Close() })
	t.Logf("wg-a %s on %s, wg-b %s on %s; reading %s, the switch's port to %s", w.aIP, c.Nodes[0].Name, w.bIP, c.Nodes[1].Name, w.cap.Link(), c.Nodes[0].Name)
	return w
}

// pairs are the probes of the rollout and the faults: each pod to the
// other's diagPort.
func (w *wgWorld) pairs() []trafficPair {
	return []trafficPair{
		{name: "wg-a -> wg-b", path: "cross-node", ns: w.nsA, dst: netip.AddrPortFrom(w.bIP, diagPort), allowed: true},
		{name: "wg-b -> wg-a", path: "cross-node", ns: w.nsB, dst: netip.AddrPortFrom(w.aIP, diagPort), allowed: true},
	}
}

// take reads the window's frames and logs what they hold.
func (w *wgWorld) take(t *testing.T, what string) wireReport {
	t.Helper()
	frames, dropped := w.cap.Take()
	r := readWire(frames, dropped, w.payload, w.nodes)
	t.Logf("on the wire, %s: %s", what, r)
	return r
}

// exchangeBoth has each pod send the payload to the other over TCP and
// UDP.
func (w *wgWorld) exchangeBoth(timeout time.Duration) error {
	if err := exchange(w.nsA, w.nsB, w.bIP, w.payload, timeout); err != nil {
		return fmt.Errorf("wg-a -> wg-b: %w", err)
	}
	if err := exchange(w.nsB, w.nsA, w.aIP, w.payload, timeout); err != nil {
		return fmt.Errorf("wg-b -> wg-a: %w", err)
	}
	return nil
}

// clearOnTheWire: with encryption none the payload is on the wire, each
// way over TCP and UDP, with the pods' addresses: the reader works.
func (w *wgWorld) clearOnTheWire(t *testing.T) {
	t.Helper()
	w.cap.Take()
	if err := w.exchangeBoth(5 * time.Second); err != nil {
		t.Fatalf("encryption none: %v", err)
	}
	r := w.take(t, "encryption none")
	if r.payload < 8 || r.podAddressed == 0 || r.dropped != 0 {
		t.Fatalf("encryption none: want the payload in 8 frames at least (each way, TCP and UDP, sent and echoed) and pod addresses: %s", r)
	}
}

// encryptedOnTheWire: the pods exchange the payload each way, and the
// reader sees it only as WireGuard.
func (w *wgWorld) encryptedOnTheWire(t *testing.T, what string) {
	t.Helper()
	w.cap.Take()
	if err := w.exchangeBoth(5 * time.Second); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	// Each exchange's payload goes by four times at least (over TCP and
	// UDP, sent and echoed), each time in a frame of its own.
	if err := w.take(t, what).encrypted(8); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// turnOn sets the ConfigMap's encryption to wireguard and rolls the
// DaemonSet, as an operator would, with the pods probing each other. It
// returns the longest gap of a pair, and how long after both nodes had
// each other's peer and routes (as polled) a probe still failed: the
// wait for encrypted reachability once the keys are there.
func (w *wgWorld) turnOn(ctx context.Context, t *testing.T, tr *traffic) (gap, tail time.Duration) {
	t.Helper()
	from := time.Now()
	w.cap.Take()
	editConfigMap(ctx, t, w.c, tr, "encryption wireguard", func(d map[string]string) { d["encryption"] = "wireguard" })
	rollDaemonSet(ctx, t, w.c, tr, "restart for encryption wireguard", restartTemplate)
	waitEncrypted(ctx, t, w.c, 2*time.Minute)
	encrypting := time.Now()
	tr.mark("both nodes encrypting")
	atEncrypting := wgState(w.c)
	waitUntil(ctx, t, "the pods reaching each other through podnet.wg", 2*time.Minute, func() error { return tr.settled(10) })
	tr.mark("every pair through")
	t.Logf("podnet.wg when both nodes encrypted (%s): %s", encrypting.UTC().Format("15:04:05.000"), atEncrypting)
	t.Logf("podnet.wg when every pair was through (%s): %s", time.Now().UTC().Format("15:04:05.000"), wgState(w.c))
	to := time.Now()
	r := windowResult(tr, from, to)
	t.Logf("turning encryption on, timeline:\n%s", windowTimeline(tr, r, from, to))
	t.Logf("turning encryption on: %s; failed probes: %s", r.summary(len(tr.logs), to.Sub(from)), failedOutcomes(tr, from, to))
	tail = max(0, lastFailure(tr, from, to).Sub(encrypting))
	t.Logf("turning encryption on: the last failed probe started %s after both nodes had each other's peer and routes", tail.Round(time.Millisecond))
	w.take(t, "while the agents rolled (in the clear until a node encrypts)")
	return r.longestGap, tail
}

// lastFailure is when the last failed probe started in [from, to) began.
func lastFailure(tr *traffic, from, to time.Time) time.Time {
	last := from
	for _, l := range tr.logs {
		l.mu.Lock()
		for _, p := range l.probes {
			if p.done && !p.ok && p.start.After(last) && p.start.Before(to) {
				last = p.start
			}
		}
		l.mu.Unlock()
	}
	return last
}

// windowResult is tr's result for the probes started in [from, to),
// once every one of them has ended: a probe still waiting for its answer
// at to would not count.
func windowResult(tr *traffic, from, to time.Time) trafficResult {
	time.Sleep(time.Until(to.Add(trafficTimeout + 100*time.Millisecond)))
	return tr.result(from, to)
}

// windowTimeline is tr's timeline of the steps and failed stretches in
// [from, to].
func windowTimeline(tr *traffic, r trafficResult, from, to time.Time) string {
	sub := &traffic{}
	for _, e := range tr.events {
		if !e.at.Before(from) && !e.at.After(to) {
			sub.events = append(sub.events, e)
		}
	}
	return sub.timeline(r, from)
}

// strictBlocked drops UDP to wgPort on the switch (a bridge table in the
// outside network's namespace, the harness's): the pods' probes and
// exchange fail, the reader sees WireGuard and nothing in the clear;
// once the drop goes, traffic resumes. It returns how long after.
func (w *wgWorld) strictBlocked(ctx context.Context, t *testing.T, tr *traffic) time.Duration {
	t.Helper()
	w.cap.Take()
	ns := netns.NamedPath(w.c.OutsideNetNS)
	nftIn(t, ns, fmt.Sprintf("add table bridge podnet_wg_judge\n"+
		"add chain bridge podnet_wg_judge judge { type filter hook forward priority 0; }\n"+
		"add rule bridge podnet_wg_judge judge udp dport %d drop\n", wgPort))
	removed := false
	remove := func() {
		if !removed {
			removed = true
			nftIn(t, ns, "delete table bridge podnet_wg_judge\n")
		}
	}
	t.Cleanup(remove)
	from := time.Now()
	tr.mark(fmt.Sprintf("UDP %d dropped on the switch", wgPort))
	if err := exchange(w.nsA, w.nsB, w.bIP, w.payload, 3*time.Second); err == nil {
		t.Errorf("UDP %d dropped on the switch, yet wg-a's exchange with wg-b got through", wgPort)
	} else {
		t.Logf("UDP %d dropped: wg-a to wg-b fails, as it should: %v", wgPort, err)
	}
	to := time.Now()
	r := windowResult(tr, from, to)
	t.Logf("UDP %d dropped: %s; failed probes: %s", wgPort, r.summary(len(tr.logs), to.Sub(from)), failedOutcomes(tr, from, to))
	if r.probes == 0 || r.failedAllowed != r.probes {
		t.Errorf("UDP %d dropped: %d of %d probes failed; want every one", wgPort, r.failedAllowed, r.probes)
	}
	if err := w.take(t, fmt.Sprintf("UDP %d dropped", wgPort)).encrypted(1); err != nil {
		t.Errorf("UDP %d dropped: %v", wgPort, err)
	}
	remove()
	tr.mark("drop removed")
	start := time.Now()
	waitUntil(ctx, t, "traffic back once UDP is let through", time.Minute, func() error {
		return exchange(w.nsA, w.nsB, w.bIP, w.payload, 2*time.Second)
	})
	resumed := time.Since(start)
	t.Logf("UDP %d let through again: an exchange done after %s", wgPort, resumed.Round(time.Millisecond))
	waitUntil(ctx, t, "probes through again", time.Minute, func() error { return tr.settled(10) })
	if err := w.take(t, "after the drop went").encrypted(1); err != nil {
		t.Errorf("after the drop: %v", err)
	}
	return resumed
}

// failedOutcomes counts the failed probes started in [from, to) by what
// each saw, per pair: refused at once (no route to host) or lost (no
// answer).
func failedOutcomes(tr *traffic, from, to time.Time) string {
	var out []string
	for _, l := range tr.logs {
		n := map[string]int{}
		l.mu.Lock()
		for _, p := range l.probes {
			if p.done && !p.ok && !p.start.Before(from) && p.start.Before(to) {
				// "error after 1ms: no route to host": the error alone.
				why := p.why
				if _, err, ok := strings.Cut(why, ": "); ok && strings.HasPrefix(why, "error after ") {
					why = err
				}
				n[why]++
			}
		}
		l.mu.Unlock()
		out = append(out, fmt.Sprintf("%s %v", l.pair.name, n))
	}
	return strings.Join(out, ", ")
}

// nftIn runs the nft script in the network namespace at ns.
func nftIn(t *testing.T, ns, script string) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("nft %q in %s: %v: %s", script, ns, err, out.String())
	}
}

// agentKilled kills node 1's agent with SIGKILL under the probes: its
// userspace device ends with it, the pods' traffic is refused (strict
// mode's unreachable routes under podnet.wg's), never sent in the clear,
// and flows encrypted again once the kubelet has restarted the agent.
// It returns the longest gap of a pair.
func (w *wgWorld) agentKilled(ctx context.Context, t *testing.T, tr *traffic) time.Duration {
	t.Helper()
	w.cap.Take()
	from := time.Now()
	killAgent(ctx, t, w.c, w.c.Nodes[0], tr, 1)
	waitEncrypted(ctx, t, w.c, 2*time.Minute)
	tr.mark("both nodes encrypting")
	waitUntil(ctx, t, "the pods reaching each other after the kill", 2*time.Minute, func() error { return tr.settled(10) })
	tr.mark("every pair through")
	to := time.Now()
	r := windowResult(tr, from, to)
	t.Logf("kill -9 of %s's agent, timeline:\n%s", w.c.Nodes[0].Name, windowTimeline(tr, r, from, to))
	t.Logf("kill -9 of %s's agent: %s; failed probes: %s", w.c.Nodes[0].Name, r.summary(len(tr.logs), to.Sub(from)), failedOutcomes(tr, from, to))
	if err := w.take(t, "agent killed until traffic was back").encrypted(1); err != nil {
		t.Errorf("agent killed: %v", err)
	}
	return r.longestGap
}
