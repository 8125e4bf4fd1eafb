package cluster

import (
	"context"
	"os/exec"
	"path/filepath"
)

// Kubectl is kubectl with args against the cluster, as an operator runs
// it: the cluster's own kubectl and admin kubeconfig, in the first
// node's network namespace, where the API server listens (the test's
// own namespace may hold another 198.18.0.1).
func (c *Cluster) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--net=" + c.Nodes[0].NetNS, filepath.Join(c.kubeBin, "kubectl"), "--kubeconfig", c.kubeconfig()}, args...)
	return exec.CommandContext(ctx, "nsenter", full...)
}
