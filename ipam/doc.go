// Package ipam is podnet's cluster-wide block IPAM: address pools cut into
// fixed-size blocks, blocks made affine to one node so that each node
// routes a whole block, and handles that say which addresses a container
// holds.
//
// The package has two halves that must stay apart:
//
//   - Pure block arithmetic (block.go): ordinal <-> address, allocate,
//     release, the FIFO free list, attribute dedupe. No I/O, no clocks, no
//     randomness; it is tested by the thousand against a simple model.
//   - The Allocator (allocator.go, release.go, claim.go, check.go,
//     endpoint.go for the pods' workload endpoints), which
//     reads objects from a Store, changes private copies and writes them
//     back in one compare-on-revision transaction. An object read from the
//     store is never shared, so a failed transaction leaves nothing to undo.
//
// The Store interface (store.go) is the only way to the data; bbolt and
// etcd implement it under ipam/store. This package must not import either
// of them, open files, or exec anything. Nor does it speak CNI: its
// errors are its own (errors.go), and ipamcni gives them CNI codes.
//
// Every error the Allocator returns is an *Error (errors.go) of one Kind:
// KindUnavailable when the store stayed unreachable (it is retried for
// Config.UnavailableTimeout), the caller's deadline passed, or conflicts
// outlasted it; KindInUse for an address already taken; KindExhausted
// when the eligible pools have no free address; KindInvalid for bad
// input; KindNotFound for a missing endpoint; KindWriteFailed when the
// store could not write what it accepted; KindInternal otherwise. A
// failure never yields a duplicate address: the only path to an
// allocation is a transaction that compared the revision of every block
// and handle it wrote.
package ipam
