// Package etcd is the cluster ipam.Store for long-lived processes (the
// agent, the CLI): the full etcd v3 client, each Write one etcd txn
// comparing the key's ModRevision, and an ipam.Watcher (ListRev, Watch)
// for the agent's routes. Plugins use ipam/store/etcdgw instead, which
// costs an exec far less.
//
// Errors: a failed compare is ipam.ErrConflict; an unreachable cluster, a
// lost leader, or the caller's deadline is ipam.ErrUnavailable (the etcd
// client itself keeps retrying until the context ends). The package does
// not start servers; etcdtest does, for tests.
package etcd
