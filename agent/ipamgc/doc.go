// Package ipamgc is the node's IPAM GC: it releases the addresses of
// handles allocated for this node whose attachment is no longer in the
// CNI result cache (after a grace, see collector), and finishes the
// releases DELs could not make while the store was unreachable, from the
// release records they left (ipamcni.ReleaseRecord); and it lets the
// node's blocks that stayed empty for the block grace go back to their
// pools, one spare per pool kept (ipam.Allocator.ReclaimIdleBlocks).
//
//   - collector.go: one GC pass.
//   - releaserecords.go: finishing the release records.
//   - service.go: the service ("ipam-gc"), its metrics, the blocks'
//     reclaim after each pass.
//
// It touches only this node's addresses and blocks.
package ipamgc
