package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestConfigChange is issue 30's config-change judge beyond
// routing_mode (TestRoutingModeChange), on two nodes with the default
// deployment, under TestRollingUpgrade's probes (upgWorld):
//
//  1. a ConfigMap the agent cannot use (routing_mode "hostgw") and a
//     rolling restart: the first new agent is NotReady saying why, the
//     rollout stalls there, and that node's routes, conflist and policy
//     table are left as they were; then the ConfigMap is fixed and
//     rolled;
//  2. --policy-deny-log added to the agent's args and rolled: a denied
//     probe shows in the new agent's log; then the args rolled back;
//  3. --network-policy removed and rolled (the policy table goes, the
//     denied pairs connect), then put back and rolled;
//  4. mtu 1400 in the ConfigMap's conflist and rolled: a new pod gets
//     it, a running pod keeps its MTU until restarted.
//
// No allowed probe may fail in the whole test; no denied probe may get
// through while policy is on (see policyOffAndOn for the window).
func TestConfigChange(t *testing.T) {
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	deployPodnet(ctx, t, c, cluster.Default, nil)
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	pairs, out := upgWorld(ctx, t, c)
	tr, from := startUpgTraffic(ctx, t, pairs)

	unusableConfigMap(ctx, t, c, tr)
	denyLogOnOff(ctx, t, c, tr)
	offAt, onAt := policyOffAndOn(ctx, t, c, tr)
	podMTUChange(ctx, t, c, tr)
	time.Sleep(2 * time.Second)

	r := judgeTraffic(t, tr, out, from)
	off := tr.result(offAt, onAt)
	deniedOn := r.deniedThrough - off.deniedThrough
	t.Logf("of the denied probes that got through, %d came while policy was off or coming back (+%.1fs to +%.1fs; not counted) and %d while it was on",
		off.deniedThrough, offAt.Sub(from).Seconds(), onAt.Sub(from).Seconds(), deniedOn)
	if r.failedAllowed != 0 || deniedOn != 0 {
		t.Errorf("%d allowed probes failed, %d denied probes got through while policy was on; want 0 and 0 (timeline above)",
			r.failedAllowed, deniedOn)
	}
}

// unusableConfigMap sets routing_mode to "hostgw" (a typo of host-gw)
// and restarts the DaemonSet. The first new agent must run degraded:
// NotReady, /readyz naming the key and value, podnet_agent_config_valid
// 0, and nothing on its node touched (agent.Degraded); with
// maxUnavailable 1 the rollout stops there, the other node keeping its
// old agent. Then routing_mode is restored and the rollout completes.
func unusableConfigMap(ctx context.Context, t *testing.T, c *cluster.Cluster, tr *traffic) {
	t.Helper()
	before := map[string]nodeState{}
	for _, n := range c.Nodes {
		before[n.Name] = nodeStateOf(t, n)
	}
	old := agentUIDs(ctx, t, c)
	editConfigMap(ctx, t, c, tr, "routing_mode hostgw (a typo)", func(d map[string]string) { d["routing_mode"] = "hostgw" })
	updateDaemonSet(ctx, t, c, tr, "restart with routing_mode hostgw", restartTemplate)

	var bad *corev1.Pod
	waitUntil(ctx, t, "a new agent pod running", 2*time.Minute, func() error {
		for uid, p := range agentUIDs(ctx, t, c) {
			if old[uid] == nil && agentRunning(p) {
				bad = p
				return nil
			}
		}
		return fmt.Errorf("no new agent container running yet")
	})
	n := nodeNamed(t, c, bad.Spec.NodeName)
	waitUntil(ctx, t, "/readyz of "+n.Name+"'s new agent naming routing_mode hostgw", time.Minute, func() error {
		code, body, err := agentHTTP(n, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "routing_mode") || !strings.Contains(body, "hostgw") {
			return fmt.Errorf("/readyz %d: %q; want 503 naming routing_mode and hostgw", code, body)
		}
		t.Logf("%s's agent /readyz: %d %s", n.Name, code, strings.TrimSpace(body))
		return nil
	})
	tr.mark(n.Name + "'s new agent degraded: /readyz 503 naming routing_mode hostgw")
	if _, body, err := agentHTTP(n, "/metrics"); err != nil || !strings.Contains(body, "podnet_agent_config_valid 0") {
		t.Errorf("%s's agent /metrics: no podnet_agent_config_valid 0 (%v)", n.Name, err)
	}
	// kubelet's probe event carries only the status code; kubectl logs
	// must say why.
	if l := agentLogLine(ctx, t, c, bad, "routing_mode", "hostgw"); l == "" {
		t.Errorf("%s's degraded agent logged no line naming routing_mode and hostgw", n.Name)
	} else {
		t.Logf("%s's degraded agent: %s", n.Name, l)
	}
	// Three readiness periods (10 s each): kubelet has probed it, and the
	// DaemonSet controller would have moved on to the other node if it
	// were going to.
	time.Sleep(30 * time.Second)
	rolloutStalled(ctx, t, c, bad, old)
	if after := nodeStateOf(t, n); !after.equal(before[n.Name]) {
		t.Errorf("%s changed under the degraded agent:\nbefore: %s\nafter:  %s", n.Name, before[n.Name], after)
	}
	editConfigMap(ctx, t, c, tr, "routing_mode auto again", func(d map[string]string) { d["routing_mode"] = "auto" })
	rollDaemonSet(ctx, t, c, tr, "restart with routing_mode auto", restartTemplate)
}

// rolloutStalled checks that bad is not ready, with the reason in its
// Ready condition or a probe event, and that no other node's agent was
// replaced: old's pods on the other nodes are still there.
func rolloutStalled(ctx context.Context, t *testing.T, c *cluster.Cluster, bad *corev1.Pod, old map[string]*corev1.Pod) {
	t.Helper()
	p, err := c.Client.CoreV1().Pods("kube-system").Get(ctx, bad.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if podReady(p) {
		t.Errorf("agent pod %s on %s is Ready with routing_mode hostgw", p.Name, p.Spec.NodeName)
	}
	evs, err := c.Client.CoreV1().Events("kube-system").List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + p.Name + ",reason=Unhealthy",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		t.Logf("event on %s: %s (x%d)", p.Name, e.Message, e.Count)
	}
	if len(evs.Items) == 0 {
		t.Errorf("no Unhealthy event for %s: kubelet did not report the failed readiness probe", p.Name)
	}
	now := agentUIDs(ctx, t, c)
	for uid, o := range old {
		if o.Spec.NodeName != p.Spec.NodeName && now[uid] == nil {
			t.Errorf("%s's old agent pod %s was replaced: the rollout went on past a NotReady agent", o.Spec.NodeName, o.Name)
		}
	}
	if len(now) != len(c.Nodes) {
		t.Errorf("%d agent pods during the stalled rollout, want %d", len(now), len(c.Nodes))
	}
}

// denyLogOnOff rolls --policy-deny-log in, checks that the denied probes
// of upg-clb1 to upg-srv1 (dropped by node 1's ingress) are logged by
// the new agent through the table's "podnet-deny" log rule, and rolls it
// out again.
func denyLogOnOff(ctx context.Context, t *testing.T, c *cluster.Cluster, tr *traffic) {
	t.Helper()
	rollDaemonSet(ctx, t, c, tr, "agent args + --policy-deny-log", agentArgs(withArg("--policy-deny-log")))
	n := c.Nodes[0]
	if table := policyTable(t, n); !strings.Contains(table, `log prefix "podnet-deny ingress default/upg-srv1"`) {
		t.Errorf("%s: no podnet-deny log rule for upg-srv1 in the policy table:\n%s", n.Name, table)
	}
	waitUntil(ctx, t, "a denied probe to upg-srv1 in "+n.Name+"'s agent log", 30*time.Second, func() error {
		p, _ := agentOn(ctx, t, c, n)
		l := agentLogLine(ctx, t, c, p, "packet denied by network policy", "pod=default/upg-srv1 ")
		if l == "" {
			return fmt.Errorf("no deny line for upg-srv1 in %s's log", p.Name)
		}
		t.Logf("%s's agent: %s", n.Name, l)
		return nil
	})
	tr.mark("deny log line seen")
	rollDaemonSet(ctx, t, c, tr, "agent args - --policy-deny-log", agentArgs(withoutArg("--policy-deny-log")))
	if table := policyTable(t, n); strings.Contains(table, "podnet-deny") {
		t.Errorf("%s: the policy table still logs after --policy-deny-log went:\n%s", n.Name, table)
	}
}

// policyOffAndOn rolls the agents without --network-policy, checks that
// every node's policy table is gone and the denied pairs connect, then
// rolls --network-policy back in. It returns when the first rollout
// started and when the second was done: the window in which denied
// probes may get through. Policy is off as soon as the first node's
// agent is replaced, and back on only when both nodes' agents are (a
// pair is denied by the destination's ingress or the source's egress,
// one node each, and a node's table is in place only once its agent
// is ready), so the whole of both rollouts is left out of the denied
// count; no allowed probe may fail in it.
func policyOffAndOn(ctx context.Context, t *testing.T, c *cluster.Cluster, tr *traffic) (off, on time.Time) {
	t.Helper()
	off = time.Now()
	rollDaemonSet(ctx, t, c, tr, "agent args - --network-policy (policy off)", agentArgs(withoutArg("--network-policy")))
	for _, n := range c.Nodes {
		waitUntil(ctx, t, "inet podnet-policy gone from "+n.Name, 30*time.Second, func() error {
			if table := policyTable(t, n); table != "" {
				return fmt.Errorf("still there:\n%s", table)
			}
			return nil
		})
	}
	waitUntil(ctx, t, "every pair, the denied ones too, connecting with policy off", time.Minute, func() error {
		return tr.settledAs(10, false)
	})
	tr.mark("policy off: every pair connects")
	rollDaemonSet(ctx, t, c, tr, "agent args + --network-policy (policy on)", agentArgs(withArg("--network-policy")))
	on = time.Now()
	tr.mark("policy on again on every node: denied probes count from here")
	return off, on
}

// podMTUChange sets mtu 1400 in the ConfigMap's conflist and restarts
// the DaemonSet: a pod created after gets eth0 MTU 1400, a pod created
// before keeps its MTU (the docs: MTU needs a pod restart), and the new
// pod is reachable.
func podMTUChange(ctx context.Context, t *testing.T, c *cluster.Cluster, tr *traffic) {
	t.Helper()
	const mtu = 1400
	oldPod := waitPod(ctx, t, c, "upg-srv1", corev1.PodRunning)
	oldNS := openPodNetNS(ctx, t, c, oldPod)
	oldMTU := eth0MTU(t, oldNS)
	if oldMTU == mtu {
		t.Fatalf("upg-srv1's eth0 MTU is already %d", mtu)
	}
	editConfigMap(ctx, t, c, tr, fmt.Sprintf("mtu %d in the conflist", mtu), func(d map[string]string) {
		d["10-podnet.conflist"] = conflistWithMTU(t, d["10-podnet.conflist"], mtu)
	})
	rollDaemonSet(ctx, t, c, tr, "restart for the conflist's mtu", restartTemplate)
	p := onNode(c.Nodes[1], diagPod("cfg-mtu", "serve", "--listen", fmt.Sprintf(":%d", diagPort)))
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = waitPod(ctx, t, c, "cfg-mtu", corev1.PodRunning)
	newNS := openPodNetNS(ctx, t, c, p)
	if got := eth0MTU(t, newNS); got != mtu {
		t.Errorf("a pod created after the rollout: eth0 MTU %d, want %d", got, mtu)
	}
	if got := eth0MTU(t, oldNS); got != oldMTU {
		t.Errorf("upg-srv1, created before the rollout: eth0 MTU %d, want %d kept", got, oldMTU)
	}
	dst := netip.AddrPortFrom(netip.MustParseAddr(p.Status.PodIP), diagPort)
	if pr := dialFrom(oldNS, dst, 2*time.Second); pr.result != probeConnected {
		t.Errorf("upg-srv1 (MTU %d) to cfg-mtu (MTU %d) across nodes: %s", oldMTU, mtu, probeOutcome(pr))
	}
	tr.mark(fmt.Sprintf("new pod cfg-mtu: MTU %d; upg-srv1 keeps %d", mtu, oldMTU))
	t.Logf("MTU: new pod %d, running pod kept %d", mtu, oldMTU)
}

// conflistWithMTU sets mtu in the conflist's podnet plugin.
func conflistWithMTU(t *testing.T, conflist string, mtu int) string {
	t.Helper()
	var conf map[string]any
	if err := json.Unmarshal([]byte(conflist), &conf); err != nil {
		t.Fatalf("the ConfigMap's conflist: %v", err)
	}
	plugins, _ := conf["plugins"].([]any)
	set := false
	for _, p := range plugins {
		if pm, ok := p.(map[string]any); ok && pm["type"] == "podnet" {
			pm["mtu"], set = mtu, true
		}
	}
	if !set {
		t.Fatalf("the ConfigMap's conflist has no podnet plugin: %s", conflist)
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func eth0MTU(t *testing.T, ns *netns.NetNS) int {
	t.Helper()
	var mtu int
	err := ns.Do(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		mtu = l.Attrs().MTU
		return nil
	})
	if err != nil {
		t.Fatalf("eth0 in %s: %v", ns.Path(), err)
	}
	return mtu
}

// agentArgs edits the agent container's args.
func agentArgs(edit func([]string) []string) func(*appsv1.DaemonSet) {
	return func(ds *appsv1.DaemonSet) {
		cs := ds.Spec.Template.Spec.Containers
		for i := range cs {
			if cs[i].Name == "agent" {
				cs[i].Args = edit(cs[i].Args)
			}
		}
	}
}

func withArg(arg string) func([]string) []string {
	return func(args []string) []string {
		if slices.Contains(args, arg) {
			return args
		}
		return append(slices.Clone(args), arg)
	}
}

func withoutArg(arg string) func([]string) []string {
	return func(args []string) []string {
		return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == arg })
	}
}

// nodeState is what an agent programs on its node that a degraded agent
// must leave alone: its routes (proto 97), the installed conflists, and
// the policy table's words, sorted (a rewrite with the same content may
// list a hash set's elements in another order; any rule, chain or
// element added or removed changes the words).
type nodeState struct {
	routes, confs string
	policy        []string
}

func nodeStateOf(t *testing.T, n *cluster.Node) nodeState {
	t.Helper()
	es, err := os.ReadDir(n.CNIConfDir)
	if err != nil {
		t.Fatal(err)
	}
	var confs strings.Builder
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(n.CNIConfDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&confs, "%s: %s\n", e.Name(), b)
	}
	policy := strings.Fields(policyTable(t, n))
	if len(policy) == 0 {
		t.Fatalf("%s: no inet podnet-policy table", n.Name)
	}
	slices.Sort(policy)
	return nodeState{routes: agentRoutes(t, n), confs: confs.String(), policy: policy}
}

func (s nodeState) equal(o nodeState) bool {
	return s.routes == o.routes && s.confs == o.confs && slices.Equal(s.policy, o.policy)
}

func (s nodeState) String() string {
	return fmt.Sprintf("routes %q, conflists %q, policy table of %d words", s.routes, s.confs, len(s.policy))
}

// policyTable lists n's inet podnet-policy table without counters, or
// "" when there is none.
func policyTable(t *testing.T, n *cluster.Node) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+n.NetNS, "nft", "-s", "list", "table", "inet", "podnet-policy").CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file or directory") {
			return ""
		}
		t.Fatalf("%s: nft list table inet podnet-policy: %v: %s", n.Name, err, out)
	}
	return string(out)
}

// agentLogLine returns the first line of p's agent container log that
// holds every one of want, or "".
func agentLogLine(ctx context.Context, t *testing.T, c *cluster.Cluster, p *corev1.Pod, want ...string) string {
	t.Helper()
	body, err := c.Client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", p.Name, err)
	}
	for _, l := range strings.Split(string(body), "\n") {
		if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(l, w) }) {
			return l
		}
	}
	return ""
}

// agentHTTP gets path from the agent's port on n (9603, hostNetwork).
func agentHTTP(n *cluster.Node, path string) (int, string, error) {
	resp, err := n.HTTPClient(3 * time.Second).Get("http://" + n.IP + ":9603" + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func agentRunning(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "agent" {
			return cs.State.Running != nil
		}
	}
	return false
}

func nodeNamed(t *testing.T, c *cluster.Cluster, name string) *cluster.Node {
	t.Helper()
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %q", name)
	return nil
}
