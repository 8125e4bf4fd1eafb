package ipamgc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
)

// collector is the node's IPAM GC: it releases the addresses of handles
// allocated for this node whose attachment is no longer in the CNI result
// cache, once they have been missing for at least a grace period.
//
// The grace period covers an ADD in flight: the plugin allocates before
// the runtime caches the result, so a handle without a cache entry may be
// one about to get it. A handle is released only after two passes at
// least grace apart both found it uncached, and only that handle (through
// ReleaseByHandle), so an allocation made after a pass began is never
// touched.
type collector struct {
	alloc *ipam.Allocator
	store ipam.Store
	keys  ipam.Keys
	node  string
	// releaseDir holds the release records DELs left for the agent
	// (ipamcni.ReleaseRecord); empty: none are looked for.
	releaseDir string
	cacheDir   string
	grace      time.Duration
	now        func() time.Time
	// suspects: handle -> when a pass first found it uncached.
	suspects map[string]time.Time
}

// cachedHandles returns the handle of every cached attachment:
// <network>.<containerID>, the handle podnet-ipam allocates under.
func (c *collector) cachedHandles() (map[string]bool, error) {
	// A missing results directory is far more likely an unmounted host
	// path than a node that never ran a pod; reading it as "no pod is
	// attached" would release every address of the node.
	results := filepath.Join(c.cacheDir, "results")
	if _, err := os.Stat(results); err != nil {
		return nil, fmt.Errorf("CNI cache %s: %w; not collecting", results, err)
	}
	rt := cni.NewRuntime(nil, cni.WithCacheDir(c.cacheDir))
	atts, err := rt.CachedAttachments("", "")
	if err != nil {
		return nil, fmt.Errorf("read CNI cache %s: %w", c.cacheDir, err)
	}
	out := make(map[string]bool, len(atts))
	for _, a := range atts {
		out[a.Network+"."+a.ContainerID] = true
	}
	return out, nil
}

// pass runs one GC pass and returns how many addresses it released.
func (c *collector) pass(ctx context.Context) (int, error) {
	cached, err := c.cachedHandles()
	if err != nil {
		return 0, err
	}
	// Claims, releases and borrows that killed plugins left half done.
	if err := c.alloc.Repair(ctx, c.node); err != nil {
		return 0, err
	}
	rep, err := c.alloc.CheckNode(ctx, c.node, ipam.CheckOptions{Live: func(node, handle string) bool {
		return node != c.node || cached[handle]
	}})
	if err != nil {
		return 0, err
	}
	now := c.now()
	leaked := map[string]int{}
	for _, l := range rep.Leaked {
		if l.Node == c.node && l.Handle != "" {
			leaked[l.Handle]++
		}
	}
	for h := range c.suspects {
		if leaked[h] == 0 {
			delete(c.suspects, h) // cached again, or released elsewhere
		}
	}
	released := 0
	var firstErr error
	for h, n := range leaked {
		since, ok := c.suspects[h]
		if !ok {
			c.suspects[h] = now
			continue
		}
		if now.Sub(since) < c.grace {
			continue
		}
		if err := c.alloc.ReleaseByHandle(ctx, c.node, h); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("release handle %q: %w", h, err)
			}
			continue
		}
		delete(c.suspects, h)
		released += n
	}
	return released, firstErr
}
