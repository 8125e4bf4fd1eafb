// Package interop holds podnet's interoperability tests against the
// upstream CNI implementations, in a module of its own so that the main
// module never depends on containernetworking/cni or /plugins.
//
// What it checks, each time podnet against libcni on identical input:
//
//   - podnet's cni.Runtime drives the upstream reference plugins (ptp,
//     bridge, host-local, portmap on both backends, loopback, tuning,
//     bandwidth) at 0.3.1, 0.4.0, 1.0.0 and 1.1.0 and agrees with libcni on
//     the ADD result, the cache entry, CHECK, STATUS, GC, and the state of
//     the node and pod namespaces after ADD and after DEL (TestUpstreamPlugins,
//     TestGC, TestDelAfterNetnsGone, TestRollbackWithUpstreamPlugins);
//   - every plugin of a chain gets the same stdin and CNI_* environment
//     from both, verb by verb (TestPluginInput), and both take the same
//     plugin output and errors the same way, except where podnet is
//     stricter on purpose (TestPluginOutput);
//   - both load the same networks from a conf dir (TestConfigLoading) and
//     agree on VERSION and validation (TestVersionAndValidate);
//   - libcni and cnitool drive podnet's loopback plugin through ADD,
//     CHECK, DEL, STATUS, GC and VERSION (TestLibcniDrivesPodnetLoopback,
//     TestCnitoolDrivesPodnetLoopback);
//   - an attachment one library added is read, checked and deleted by the
//     other through the shared result cache (TestSharedCache).
//
// BenchmarkChain3 (and its Tmpfs and Interleaved variants) compares the
// runtime overhead of podnet and libcni on a chain of three trivial
// plugins (internal/noop).
//
// BenchmarkDataPath measures the data path rather than the control path:
// TCP throughput (iperf3) and request/response latency (sockperf) from
// pod to pod on podnet's routed and bridge modes, the reference ptp and
// bridge, and across nodes with real agents in host-gw and VXLAN mode
// (test/e2e/e2eetcd, with its etcd member), each against its floor, a bare veth pair or the
// underlay (docs/performance.md).
//
// The upstream binaries are built from the module cache at the versions
// go.mod pins (tool directives) into bin/, once per pin and toolchain;
// podnet's plugins are built from the main module on every run. Nothing
// here touches the host's network: plugins run with a namespace the test
// made as their host, pod addresses come from 10.99.0.0/16 and
// fd00:99::/32 inside test namespaces only (the data-path benchmark's
// from 10.244.0.0/16, its nodes' and veth floor's from 198.18.0.0/15),
// the only packets sent go between namespaces the test made, and every
// namespace, process, file and directory is removed in t.Cleanup. Root
// tests skip without root, and fail instead when CI is set.
package interop
