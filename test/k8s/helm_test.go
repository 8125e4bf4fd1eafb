package k8s_test

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// TestHelmTwoNodes installs podnet on two real nodes from its Helm chart
// with Helm's Go SDK, as `helm install` does (the chart's defaults: the
// default deployment, node CIDR; the ClusterNetworkPolicy CRD with it),
// checks each node as TestNodeCIDRTwoNodes does and pods across nodes
// without NAT, then `helm upgrade --reuse-values --set denyLog=true`
// must roll every agent (new pods, running --policy-deny-log) with the
// pods' network kept, and `helm uninstall` must keep the CRD.
func TestHelmTwoNodes(t *testing.T) {
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	vals := cluster.HelmValues()
	vals["clusterNetworkPolicyCRD"] = true
	if _, err := c.HelmInstall(ctx, vals); err != nil {
		t.Fatal(err)
	}
	_, servers := nodeCIDRServers(ctx, t, c)
	pods := append(servers, crossNodeTraffic(ctx, t, c, servers, "host-gw", "via %s dev underlay0")...)

	before := agentPods(ctx, t, c)
	if _, err := c.HelmUpgrade(ctx, map[string]any{"denyLog": true}); err != nil {
		t.Fatal(err)
	}
	waitAgentsRolled(ctx, t, c, before, "--policy-deny-log")
	pods = append(pods, crossNodeTraffic(ctx, t, c, servers, "after-upgrade", "via %s dev underlay0")...)

	for _, p := range pods {
		if err := c.Client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitNoDiagPods(ctx, t, c)
	for _, n := range c.Nodes {
		nodeKeepsNothingOf(t, n, pods)
	}
	if err := c.HelmUninstall(); err != nil {
		t.Fatal(err)
	}
	const crd = "clusternetworkpolicies.policy.networking.k8s.io"
	if err := c.Client.RESTClient().Get().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd).Do(ctx).Error(); err != nil {
		t.Errorf("CRD %s after helm uninstall: %v; want it kept (helm.sh/resource-policy: keep)", crd, err)
	}
}

// agentPods are the podnet agents' pods by UID.
func agentPods(ctx context.Context, t *testing.T, c *cluster.Cluster) map[string]bool {
	t.Helper()
	list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=podnet"})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	for _, p := range list.Items {
		uids[string(p.UID)] = true
	}
	if len(uids) != len(c.Nodes) {
		t.Fatalf("%d podnet pods, want one on each of %d nodes", len(uids), len(c.Nodes))
	}
	return uids
}

// waitAgentsRolled waits until every node runs a ready agent pod that is
// not one of old and whose agent has arg.
func waitAgentsRolled(ctx context.Context, t *testing.T, c *cluster.Cluster, old map[string]bool, arg string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		list, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=podnet"})
		if err != nil {
			t.Fatal(err)
		}
		rolled := 0
		for _, p := range list.Items {
			if old[string(p.UID)] || !podReady(&p) {
				continue
			}
			for _, ctr := range p.Spec.Containers {
				if ctr.Name == "agent" && slices.Contains(ctr.Args, arg) {
					rolled++
				}
			}
		}
		if rolled == len(c.Nodes) && len(list.Items) == len(c.Nodes) {
			t.Logf("helm upgrade: %d new agents with %s", rolled, arg)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d agents rolled to %s 5m after helm upgrade (%d pods)", rolled, len(c.Nodes), arg, len(list.Items))
		}
		time.Sleep(time.Second)
	}
}
