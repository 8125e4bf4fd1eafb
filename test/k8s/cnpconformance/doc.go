// Package cnpconformance runs the ClusterNetworkPolicy conformance suite
// of sigs.k8s.io/network-policy-api (its test binary, which
// cluster.CNPConformanceBinaries builds) against a harness cluster, as the
// suite's users run it: the ClusterNetworkPolicy profile with the
// experimental features podnet builds. It holds what the run needs that is
// the suite's and not the cluster's: the one image its pods run, built
// here and never pulled (Image); the tests skipped by name where the
// machine cannot run them, each with its reason (SCTPSkips); the command
// line, run in a node's network namespace (Run); and what the run leaves:
// the test events, the counts, and the suite's YAML report with the
// skipped tests recorded as skipped (Read, CorrectReport).
//
// It starts no cluster and deploys nothing: the test in test/k8s
// (TestClusterNetworkPolicyConformance) does. The unit tests read the
// suite's own source at the pinned release to keep the skip list and the
// network-safety argument true to it.
package cnpconformance
