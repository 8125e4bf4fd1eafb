package k8s_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/policyrules"
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
	pol, err := policyPodElements(n)
	if err != nil {
		return []string{err.Error()}
	}
	left = append(left, pol...)
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

// policyPodElements lists the elements that stand for pods in podnet's
// policy table (the isolated pods' dispatch maps) and its closed table.
// A table that does not exist holds none.
func policyPodElements(n *cluster.Node) ([]string, error) {
	f, err := os.Open(n.NetNS)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return nil, err
	}
	var left []string
	for _, t := range []*nftables.Table{
		{Name: policyrules.TableName, Family: nftables.TableFamilyINet},
		{Name: dataplane.ClosedTableName, Family: nftables.TableFamilyINet},
	} {
		sets, err := conn.GetSets(t)
		if err != nil {
			continue // no such table
		}
		for _, s := range sets {
			if t.Name == policyrules.TableName && !slices.Contains([]string{"in4", "out4", "in6", "out6"}, s.Name) {
				continue
			}
			elems, err := conn.GetSetElements(s)
			if err != nil {
				return nil, fmt.Errorf("nftables %s/%s: %w", t.Name, s.Name, err)
			}
			for _, e := range elems {
				left = append(left, fmt.Sprintf("nftables %s/%s %x", t.Name, s.Name, e.Key))
			}
		}
	}
	return left, nil
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
