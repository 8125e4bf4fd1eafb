package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipamcni"
)

// releaseTombstones finishes the releases that DELs on this node could
// not make while the store was unreachable (ipamcni.Tombstone) and returns
// how many handles it released. Each record is claimed first, so an ADD
// that reuses the handle meanwhile either drops the record before the
// claim (and keeps the addresses) or waits until the release is done.
func (c *collector) releaseTombstones(ctx context.Context) (int, error) {
	if c.releaseDir == "" {
		return 0, nil
	}
	stones, err := ipamcni.ReadTombstones(c.releaseDir)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	released := 0
	for _, ts := range stones {
		if ts.Node != c.node {
			continue // a record for another node name: not this agent's
		}
		ok, err := ipamcni.ClaimTombstone(c.releaseDir, ts.Handle)
		if err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		if err := c.releaseRecorded(ctx, ts); err != nil {
			errs = append(errs, fmt.Errorf("release recorded by a DEL of %s: %w", ts.Handle, err),
				ipamcni.UnclaimTombstone(c.releaseDir, ts.Handle))
			continue
		}
		released++
		errs = append(errs, ipamcni.DoneTombstone(c.releaseDir, ts.Handle))
	}
	return released, errors.Join(errs...)
}

// releaseRecorded makes the release a DEL recorded, as the DEL would
// have: the handle's addresses on this node, and with them its endpoint.
func (c *collector) releaseRecorded(ctx context.Context, ts ipamcni.Tombstone) error {
	alloc := c.alloc
	if ts.Prefix != "" && ts.Prefix != c.keys.Prefix {
		alloc = ipam.New(c.store, ipam.Config{Keys: ipam.Keys{Prefix: ts.Prefix}})
	}
	return alloc.ReleaseByHandle(ctx, ts.Node, ts.Handle)
}
