// Package ipam is podnet's cluster-wide block IPAM: address pools cut into
// fixed-size blocks, blocks made affine to one node so that each node
// routes a whole block, and per-node indexes that say where a node's
// addresses are (layout v2, docs/design/kubernetes-ipam.md).
//
// The package has two halves that must stay apart:
//
//   - Pure block arithmetic (block.go, index.go): ordinal <-> address,
//     allocate, release, the FIFO free list, attribute dedupe, index
//     entries. No I/O, no clocks, no randomness; it is tested by the
//     thousand against a simple model.
//   - The Allocator (allocator.go, claim.go, release.go, affinity.go for
//     letting blocks go,
//     repair.go, check.go, endpoint.go for the pods' workload endpoints,
//     migrate.go), which reads objects from a Store, changes private
//     copies and writes them back one key at a time, each write
//     conditional on the revision it read (writeset.go). No operation
//     needs a write across keys: claims, borrows and releases are ordered
//     sequences whose intermediate states keep every address findable
//     from its node and routed only when backed, and are finished by
//     whoever meets them. An object read from the store is never shared,
//     so a failed write leaves nothing to undo.
//
// Blocks go back to their pools through ReclaimIdleBlocks (affinity.go),
// which the node's agent calls on each GC pass: a node keeps the blocks
// it uses and a spare per pool.
//
// The Store interface (store.go) is the only way to the data; its
// implementations are under ipam/store: bolt (a bbolt file, one machine),
// etcd (the full client, for the agent and the CLI), etcdgw (etcd's JSON
// gateway, for plugins), kube (the Kubernetes API's custom resources;
// kube/kubehttp carries it over net/http), agentsock (the node agent's
// socket, with its cache), and storetest, the suite they pass (ipamtest
// is the allocator's, run on each). This package must not import any of
// them, open files, or exec anything. Nor does it speak CNI: its
// errors are its own (errors.go), and ipamcni gives them CNI codes.
//
// Every error the Allocator returns is an *Error (errors.go) of one Kind:
// KindUnavailable when the store stayed unreachable (it is retried for
// Config.UnavailableTimeout), the caller's deadline passed, or conflicts
// outlasted it; KindInUse for an address already taken; KindExhausted
// when the eligible pools have no free address; KindInvalid for bad
// input (or a store holding layout v1 data to migrate first, or one that
// refuses the caller's credentials: ErrDenied); KindNotFound
// for a missing endpoint; KindWriteFailed when the store could not write
// what it accepted; KindInternal otherwise. A failure never yields a
// duplicate address: the only path to an allocation is a block write that
// compared the block's revision.
package ipam
