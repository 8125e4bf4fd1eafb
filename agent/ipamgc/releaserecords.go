package ipamgc

import (
	"context"
	"errors"
	"fmt"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipamcni"
)

// finishReleaseRecords makes the releases that DELs on this node could not make
// while the store was unreachable (ipamcni.ReleaseRecord) and returns how
// many handles it released. Each is made by ipamcni.FinishRelease, under
// the release dir's lock: an ADD that reuses the handle meanwhile either
// drops the record first (and keeps the addresses) or waits until the
// release is done. A release that fails stays recorded for the next pass.
func (c *collector) finishReleaseRecords(ctx context.Context) (int, error) {
	if c.releaseDir == "" {
		return 0, nil
	}
	recs, err := ipamcni.ReadReleaseRecords(c.releaseDir)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	released := 0
	for _, rec := range recs {
		if rec.Node != c.node {
			continue // a record for another node name: not this agent's
		}
		done, err := ipamcni.FinishRelease(ctx, c.releaseDir, rec.Handle, func(rec ipamcni.ReleaseRecord) error {
			return c.release(ctx, rec)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("release recorded by a DEL of %s: %w", rec.Handle, err))
		}
		if done {
			released++
		}
	}
	return released, errors.Join(errs...)
}

// release makes the release a DEL recorded, as the DEL would have: the
// handle's addresses on this node, and with them its endpoint.
func (c *collector) release(ctx context.Context, rec ipamcni.ReleaseRecord) error {
	alloc := c.alloc
	if rec.Prefix != "" && rec.Prefix != c.keys.Prefix {
		alloc = ipam.New(c.store, ipam.Config{Keys: ipam.Keys{Prefix: rec.Prefix}})
	}
	return alloc.ReleaseByHandle(ctx, rec.Node, rec.Handle)
}
