package k8s_test

import (
	"context"
	"testing"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// kubeRouterPeer is the Deploy edit for the combination kube-router is
// measured in, as a user runs it: podnet's shipped deployment with the
// agent's --network-policy taken out (TestConfigChange's policy-off
// step; the shipped --flows then runs without flows, as the agent warns),
// after edit (nil: none). kube-router, installed on top, enforces
// NetworkPolicy alone.
func kubeRouterPeer(edit func(*cluster.Manifests)) func(*cluster.Manifests) {
	return func(m *cluster.Manifests) {
		if edit != nil {
			edit(m)
		}
		agentArgs(withoutArg("--network-policy"))(m.DaemonSet)
	}
}

// deployKubeRouterPeer deploys podnet without its policy service and
// kube-router's policy controller over it, and waits for both.
func deployKubeRouterPeer(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	deployPodnet(ctx, t, c, cluster.Default, agentArgs(withoutArg("--network-policy")))
	if err := c.InstallKubeRouter(ctx, t.Logf); err != nil {
		t.Fatal(err)
	}
}
