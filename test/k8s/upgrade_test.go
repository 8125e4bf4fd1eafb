package k8s_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// upgradeImage is the second tag of the cluster's podnet image, the
// "new version" the DaemonSet rolls to: the same build, so that only the
// upgrade path is under test.
const upgradeImage = "podnet.test/podnet:upgrade"

// TestRollingUpgrade is issue 30's claim on two nodes with the default
// deployment (policy on, the ClusterNetworkPolicy CRD) and kube-proxy:
// with 15 pairs probed 25 times a second each (same node, across nodes,
// a ClusterIP, a hostPort, egress to the outside network, which must be
// masqueraded; allowed and denied by NetworkPolicy ingress and egress
// and an Admin ClusterNetworkPolicy), the DaemonSet is rolled to a new
// image, rolled back, and the agent on one node is killed with SIGKILL
// twice. No allowed probe may fail and no denied
// probe get through: the agent leaves routes, guards, masquerade, host
// ports and policy in the kernel when it stops, and the next one adopts
// them without a window.
func TestRollingUpgrade(t *testing.T) {
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	deployPodnet(ctx, t, c, cluster.Default, nil)
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	if err := c.TagImage(cluster.PodnetImage, upgradeImage); err != nil {
		t.Fatal(err)
	}
	pairs, out := upgWorld(ctx, t, c)
	tr, from := startUpgTraffic(ctx, t, pairs)

	rollDaemonSet(ctx, t, c, tr, "image "+upgradeImage, func(ds *appsv1.DaemonSet) { setAgentImage(ds, upgradeImage) })
	rollDaemonSet(ctx, t, c, tr, "back to image "+cluster.PodnetImage, func(ds *appsv1.DaemonSet) { setAgentImage(ds, cluster.PodnetImage) })
	for i := range 2 {
		killAgent(ctx, t, c, c.Nodes[1], tr, i+1)
	}
	// The last agent's first minute: its first periodic rewrite of the
	// policy table and its first route resync (both every minute) run
	// under the probes too.
	tr.mark("probing through the new agent's first resync")
	time.Sleep(65 * time.Second)
	r := judgeTraffic(t, tr, out, from)
	if r.failedAllowed != 0 || r.deniedThrough != 0 {
		t.Errorf("%d allowed probes failed and %d denied probes got through; want 0 and 0 (timeline above)", r.failedAllowed, r.deniedThrough)
	}
}

// TestRoutingModeChange switches the ConfigMap's routing_mode from
// host-gw to vxlan and back, each time rolling the DaemonSet (what
// `kubectl rollout restart` does), and kills an agent with SIGKILL while
// in vxlan, under the same probes: no allowed pair may go more than 2 s
// without a successful probe, no denied probe may get through, each
// switch must show in the routes, and in the end no node keeps a VXLAN
// device.
func TestRoutingModeChange(t *testing.T) {
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	err := c.Deploy(ctx, cluster.Default, func(m *cluster.Manifests) { m.ConfigMap.Data["routing_mode"] = "host-gw" })
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	waitAgentReady(ctx, t, c, "")
	waitModeRoutes(ctx, t, c, "host-gw", "via %s dev underlay0")
	pairs, out := upgWorld(ctx, t, c)
	tr, from := startUpgTraffic(ctx, t, pairs)

	for _, m := range []struct{ mode, route string }{
		{"vxlan", "via %s dev podnet.vxlan"},
		{"host-gw", "via %s dev underlay0"},
	} {
		editConfigMap(ctx, t, c, tr, "routing_mode "+m.mode, func(d map[string]string) { d["routing_mode"] = m.mode })
		rollDaemonSet(ctx, t, c, tr, "restart for routing_mode "+m.mode, restartTemplate)
		waitModeRoutes(ctx, t, c, m.mode, m.route)
		tr.mark("routes " + m.mode + " on every node")
		if m.mode == "vxlan" {
			// An agent that finds the VXLAN device, its peers and routes
			// in place adopts them.
			killAgent(ctx, t, c, c.Nodes[0], tr, 1)
		}
	}
	waitNoVXLANDevice(ctx, t, c)
	time.Sleep(5 * time.Second)
	r := judgeTraffic(t, tr, out, from)
	if r.longestGap > 2*time.Second || r.deniedThrough != 0 {
		t.Errorf("longest gap of an allowed pair %s (%s), %d denied probes got through; want <= 2s and 0 (timeline above)",
			r.longestGap.Round(time.Millisecond), r.gapPair, r.deniedThrough)
	}
}

// editConfigMap changes podnet-config's data with edit, as `kubectl
// edit configmap` would; running agents see it only when restarted.
func editConfigMap(ctx context.Context, t *testing.T, c *cluster.Cluster, tr *traffic, what string, edit func(map[string]string)) {
	t.Helper()
	cms := c.Client.CoreV1().ConfigMaps("kube-system")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, "podnet-config", metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(cm.Data)
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tr.mark(what + " in the ConfigMap")
}

// restartTemplate sets the template annotation `kubectl rollout
// restart` sets, so that the DaemonSet replaces every agent pod.
func restartTemplate(ds *appsv1.DaemonSet) {
	if ds.Spec.Template.Annotations == nil {
		ds.Spec.Template.Annotations = map[string]string{}
	}
	ds.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = time.Now().Format(time.RFC3339Nano)
}

// setAgentImage sets the image of the DaemonSet's init container and
// agent, as `kubectl set image` would.
func setAgentImage(ds *appsv1.DaemonSet, image string) {
	spec := &ds.Spec.Template.Spec
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].Image = image
		}
	}
}

// rollDaemonSet changes the DaemonSet's template with edit and waits for
// the rollout, as `kubectl rollout status` does: every node's agent pod
// of the new generation, updated and available.
func rollDaemonSet(ctx context.Context, t *testing.T, c *cluster.Cluster, tr *traffic, what string, edit func(*appsv1.DaemonSet)) {
	t.Helper()
	dss := c.Client.AppsV1().DaemonSets("kube-system")
	before := agentUIDs(ctx, t, c)
	start := time.Now()
	ds := updateDaemonSet(ctx, t, c, tr, what, edit)
	gen := ds.Generation
	waitUntil(ctx, t, "rollout of "+what, 4*time.Minute, func() error {
		ds, err := dss.Get(ctx, "podnet", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := ds.Status
		if st.ObservedGeneration < gen || st.UpdatedNumberScheduled != st.DesiredNumberScheduled ||
			st.NumberAvailable != st.DesiredNumberScheduled || st.NumberUnavailable != 0 || st.DesiredNumberScheduled != int32(len(c.Nodes)) {
			return fmt.Errorf("generation %d observed %d: %d desired, %d updated, %d available",
				gen, st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberAvailable)
		}
		return nil
	})
	tr.mark("rollout done: " + what)
	// Every node's agent is a new pod, of the template's image.
	image := ds.Spec.Template.Spec.Containers[0].Image
	for uid, p := range agentUIDs(ctx, t, c) {
		if before[uid] != nil || p.Spec.Containers[0].Image != image {
			t.Fatalf("after the rollout of %s: agent pod %s (%s) on %s, image %s; want a new pod of %s",
				what, p.Name, uid, p.Spec.NodeName, p.Spec.Containers[0].Image, image)
		}
	}
	t.Logf("rollout of %s done in %s", what, time.Since(start).Round(100*time.Millisecond))
}

// updateDaemonSet changes the DaemonSet's template with edit, which
// starts a rollout, and returns the DaemonSet as updated.
func updateDaemonSet(ctx context.Context, t *testing.T, c *cluster.Cluster, tr *traffic, what string, edit func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	t.Helper()
	dss := c.Client.AppsV1().DaemonSets("kube-system")
	var ds *appsv1.DaemonSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := dss.Get(ctx, "podnet", metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(cur)
		ds, err = dss.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tr.mark("rollout started: " + what)
	return ds
}

// agentUIDs returns the agent pods not being deleted, by UID.
func agentUIDs(ctx context.Context, t *testing.T, c *cluster.Cluster) map[string]*corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil {
			out[string(p.UID)] = p
		}
	}
	return out
}

// killAgent kills the agent process on n with SIGKILL, by its PID, and
// waits until kubelet has started a new agent container and it is
// ready.
func killAgent(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node, tr *traffic, round int) {
	t.Helper()
	pod, restarts := agentOn(ctx, t, c, n)
	pid, err := n.ContainerPID(ctx, pod.Namespace, pod.Name, "agent")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tr.mark(fmt.Sprintf("kill -9 %d: %s's agent, round %d", pid, n.Name, round))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (agent on %s): %v", pid, n.Name, err)
	}
	waitUntil(ctx, t, fmt.Sprintf("a new agent container on %s after kill -9", n.Name), 3*time.Minute, func() error {
		p, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := agentRestarts(p); got <= restarts || !podReady(p) {
			return fmt.Errorf("agent pod %s: %d restarts (had %d), ready %v", p.Name, got, restarts, podReady(p))
		}
		return nil
	})
	tr.mark(fmt.Sprintf("new agent container ready on %s, round %d", n.Name, round))
	t.Logf("agent on %s killed (pid %d), a new container ready in %s", n.Name, pid, time.Since(start).Round(100*time.Millisecond))
}

// agentOn returns n's agent pod and its agent container's restarts.
func agentOn(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node) (*corev1.Pod, int32) {
	t.Helper()
	list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
		LabelSelector: agentSelector, FieldSelector: "spec.nodeName=" + n.Name,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil && podReady(p) {
			return p, agentRestarts(p)
		}
	}
	t.Fatalf("no ready agent pod on %s among %d", n.Name, len(list.Items))
	return nil, 0
}

func agentRestarts(p *corev1.Pod) int32 {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "agent" {
			return cs.RestartCount
		}
	}
	return 0
}

// waitModeRoutes waits until each node routes to the other's pods as
// the mode does (route is the route's text, %s the peer's address).
func waitModeRoutes(ctx context.Context, t *testing.T, c *cluster.Cluster, mode, route string) {
	t.Helper()
	for i, n := range c.Nodes {
		want := fmt.Sprintf(route, c.Nodes[1-i].IP)
		waitUntil(ctx, t, fmt.Sprintf("%s routes on %s", mode, n.Name), 2*time.Minute, func() error {
			out, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-4", "route", "show", "proto", "97").CombinedOutput()
			if err != nil {
				return fmt.Errorf("ip route: %v: %s", err, out)
			}
			if !strings.Contains(string(out), want) {
				return fmt.Errorf("no %q route: %s", want, out)
			}
			return nil
		})
	}
}

// waitNoVXLANDevice waits until no node has podnet.vxlan: back in host-gw
// everywhere, the device a host-gw node keeps while a peer runs vxlan
// goes.
func waitNoVXLANDevice(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		waitUntil(ctx, t, "podnet.vxlan gone from "+n.Name, time.Minute, func() error {
			out, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-o", "link", "show", "type", "vxlan").CombinedOutput()
			if err != nil {
				return fmt.Errorf("ip link: %v: %s", err, out)
			}
			if strings.Contains(string(out), "podnet.vxlan") {
				return fmt.Errorf("still there: %s", out)
			}
			return nil
		})
	}
}
