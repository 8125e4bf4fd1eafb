package k8s_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// BenchmarkPolicyLatency's leak checks: the nodes after its pods are
// deleted, the machine after each cluster's teardown.

// nodesKeepNoPods waits until no node holds anything of a pod: the
// benchmark's pods are all deleted, and no other pod has a network of
// its own (the agent's is the host's). It looks at veths, podnet's
// per-pod nftables elements, the policy table's isolated pods, the
// closed table, pinned network namespaces and the CNI result cache.
func nodesKeepNoPods(ctx context.Context, b *testing.B, c *cluster.Cluster) {
	b.Helper()
	for _, n := range c.Nodes {
		latencyWait(b, n.Name+" keeps nothing of the deleted pods", time.Minute, func() error {
			if left := nodePodTraces(n); len(left) > 0 {
				return fmt.Errorf("%v", left)
			}
			return nil
		})
	}
}

// nodePodTraces lists what n still holds of pods.
func nodePodTraces(n *cluster.Node) []string {
	var left []string
	veths, err := n.Veths()
	if err != nil {
		return []string{err.Error()}
	}
	for _, v := range veths {
		if v.Name != "underlay0" {
			left = append(left, "veth "+v.Name)
		}
	}
	elems, err := n.PodNFTElements()
	if err != nil {
		return []string{err.Error()}
	}
	for _, e := range elems {
		left = append(left, "nftables "+e.String())
	}
	pol, err := n.PolicyPodElements()
	if err != nil {
		return []string{err.Error()}
	}
	for _, e := range pol {
		left = append(left, "nftables "+e.String())
	}
	pins, err := n.NetNSPins()
	if err != nil {
		return []string{err.Error()}
	}
	for _, p := range pins {
		left = append(left, "netns pin "+filepath.Base(p))
	}
	cache, _ := filepath.Glob(filepath.Join(n.CNICacheDir, "results", "*"))
	for _, f := range cache {
		left = append(left, "CNI cache "+filepath.Base(f))
	}
	return left
}

// clusterLeftNothing checks, after the cluster's teardown, that nothing
// of it is left on the machine: its directory and its network
// namespaces (the nodes' and the outside's). Links and nftables tables
// live in those namespaces and went with them. A cluster kept on purpose
// (PODNET_K8S_KEEP) is not looked at.
func clusterLeftNothing(b *testing.B, c *cluster.Cluster) {
	if os.Getenv("PODNET_K8S_KEEP") != "" {
		return
	}
	paths := []string{c.Dir, netns.NamedPath(c.OutsideNetNS)}
	for _, n := range c.Nodes {
		paths = append(paths, n.NetNS)
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			b.Errorf("left after the cluster's teardown: %s (%v)", p, err)
		}
	}
}
