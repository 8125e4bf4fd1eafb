// Package ipamgc is the node's IPAM GC: it releases the addresses of
// handles allocated for this node whose attachment is no longer in the
// CNI result cache (after a grace, see collector), and finishes the
// releases DELs could not make while the store was unreachable, from the
// release records they left (ipamcni.ReleaseRecord).
//
//   - collector.go: one GC pass.
//   - releaserecords.go: finishing the release records.
//   - service.go: the service ("ipam-gc"), its metrics.
//
// It touches only this node's addresses.
package ipamgc
