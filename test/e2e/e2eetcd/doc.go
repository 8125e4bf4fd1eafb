// Package e2eetcd runs e2enet's simulated network on etcd, the datastore
// of deploy/kubernetes/etcd: an etcd member in a helper process on the
// underlay's hub, the cluster pools put there, and the agents installing
// that variant's ConfigMap conflist as shipped (only the etcd endpoint
// replaced; for dual-stack, the IPv6 pool added as the ConfigMap
// documents). test/e2e's tests and the interop module's data-path
// benchmark share it.
//
// It is test code, for tests and benchmarks that run as root: etcd
// listens only on the hub's underlay address, inside a namespace the
// test made, and the member, which also exits when its test binary does, its data directory and the store
// client are removed when the test ends, pass or fail.
package e2eetcd
