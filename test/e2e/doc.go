// Package e2e holds podnet's multi-node tests: each node is a network
// namespace on an underlay the test builds (a bridge for one L2 segment,
// or a router between one subnet per node), etcd runs in a helper process
// inside the underlay's namespace, a real `podnet agent` process runs in
// every node namespace, and pods are namespaces wired by the real podnet
// plugin. Everything runs as root, only inside namespaces the tests
// create, with underlay addresses from 198.18.0.0/15 and pod addresses
// from 10.103.0.0/16; every namespace, process and directory is removed
// when a test ends, pass or fail.
package e2e
