// Package conformance is how the harness runs the upstream Kubernetes
// end-to-end networking specs against podnet: the images those specs run
// (assembled here, under the names e2e.test asks for), the selection of
// specs with the reason for every spec left out, and the reading of
// e2e.test's reports into counts and a log per spec.
//
// The selection is data (selection.go) and is tested against the suite's
// own dry run: no spec that sends traffic to an address outside the
// harness may be selected. This package starts no cluster; the runner,
// TestConformance in test/k8s, does.
package conformance
