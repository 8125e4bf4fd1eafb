package agent

import (
	"context"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/podnet/podnet/ipam"
)

// DeletedNodeGrace is how long a node's IPAM outlives its Node in block
// IPAM on the API: a Node deleted and registered again (a kubelet
// re-registering, an operator's mistake) within it keeps its blocks and
// its pods' addresses. Kubernetes' pod GC removes a missing Node's pods
// well within it.
const DeletedNodeGrace = 5 * time.Minute

// sweepInterval is how often the agent looks for the IPAM of deleted
// Nodes.
const sweepInterval = time.Minute

// removalSweep decides which departed nodes' IPAM this agent removes: a
// node is departed while it has an IPAMNode and no Node, and it is this
// agent's to remove once departed for the grace, if this agent's node is
// the next live node after it in name order (wrapping around). So one
// agent does it, without coordination; were two to try at once (their
// caches differ for a moment), every step of the removal is a
// compare-and-swap and the second finds the work done.
type removalSweep struct {
	self  string
	grace time.Duration
	// departed: node -> when a sweep first saw it without a Node.
	departed map[string]time.Time
}

// due returns the departed nodes to remove now, given the nodes with an
// IPAMNode and the live Nodes.
func (r *removalSweep) due(now time.Time, indexed, live []string) []string {
	if !slices.Contains(live, r.self) {
		return nil // not registered (yet, or any more): no view to act on
	}
	sort.Strings(live)
	var out []string
	seen := map[string]bool{}
	for _, n := range indexed {
		seen[n] = true
		if _, ok := slices.BinarySearch(live, n); ok {
			delete(r.departed, n)
			continue
		}
		since, ok := r.departed[n]
		if !ok {
			r.departed[n] = now
			continue
		}
		if now.Sub(since) >= r.grace && successor(live, n) == r.self {
			out = append(out, n)
		}
	}
	for n := range r.departed {
		if !seen[n] {
			delete(r.departed, n) // removed, by this agent or another
		}
	}
	return out
}

// successor is the first of the sorted names after name, or the first.
func successor(sorted []string, name string) string {
	i, _ := slices.BinarySearch(sorted, name)
	if i == len(sorted) {
		i = 0
	}
	return sorted[i]
}

// sweepDeletedNodes runs the removal sweep every sweepInterval until ctx
// ends, removing with alloc each departed node due: its blocks let go and
// its addresses released.
func (a *Agent) sweepDeletedNodes(ctx context.Context, nodes, ipamNodes cache.Store, alloc *ipam.Allocator) {
	r := &removalSweep{self: a.cfg.Node, grace: DeletedNodeGrace, departed: map[string]time.Time{}}
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var live, indexed []string
		for _, obj := range nodes.List() {
			if n, ok := obj.(*corev1.Node); ok {
				live = append(live, n.Name)
			}
		}
		for _, obj := range ipamNodes.List() {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				if n, _, _ := unstructured.NestedString(u.Object, "spec", "node"); n != "" {
					indexed = append(indexed, n)
				}
			}
		}
		for _, n := range r.due(time.Now(), indexed, live) {
			if err := alloc.RemoveNode(ctx, n, ipam.RemoveNodeOptions{ReleaseAddresses: true}); err != nil {
				a.log.Warn("removing a deleted Node's IPAM", "deleted_node", n, "err", err)
				continue
			}
			a.log.Info("removed a deleted Node's IPAM: its blocks and addresses are free", "deleted_node", n)
		}
	}
}
