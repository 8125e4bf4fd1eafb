// Package execcost holds benchmarks for what a plugin exec costs before
// the plugin does any work, the figures behind two build decisions, and a
// test that keeps the second one: no plugin links an API client (etcd's,
// gRPC, Kubernetes'). CNI plugins are static binaries (a dynamically linked
// one pays ld.so on every exec), and plugins reach etcd through
// ipam/store/etcdgw rather than the full etcd client (whose package
// initialisation runs on every exec).
//
// BenchmarkWorkloadFloor puts podnet bench's workload on the plugins that
// do the least (testdata/noop, an exec and nothing else; testdata/
// vethfloor, the kernel's least for a routed veth) beside podnet, in
// turns: what pods a second at ten at a time can mean on the machine.
package execcost
