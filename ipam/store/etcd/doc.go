// Package etcd is the cluster ipam.Store: an etcd v3 client whose Txn is
// etcd's Txn with one Compare(ModRevision) per compare, so a transaction
// is atomic across keys and cluster-wide.
//
// Errors: a failed compare is ipam.ErrConflict; an unreachable cluster, a
// lost leader, or the caller's deadline is ipam.ErrUnavailable (the etcd
// client itself keeps retrying until the context ends). The package does
// not start servers; etcdtest does, for tests.
package etcd
