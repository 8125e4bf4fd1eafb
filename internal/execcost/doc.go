// Package execcost holds benchmarks, and nothing else, for what a plugin
// exec costs before the plugin does any work: the figures behind two
// build decisions. CNI plugins are static binaries (a dynamically linked
// one pays ld.so on every exec), and plugins reach etcd through
// ipam/store/etcdgw rather than the full etcd client (whose package
// initialisation runs on every exec).
package execcost
