package cluster

// CNPVersion is the release of sigs.k8s.io/network-policy-api whose
// ClusterNetworkPolicy conformance suite cnpbuild/ pins.
const CNPVersion = "v0.3.0"

// CNPConformanceBinaries returns a directory holding the ClusterNetworkPolicy
// conformance suite's test binary, conformance.test (`go test -c
// sigs.k8s.io/network-policy-api/conformance`), and Go's test2json,
// which turns its output into events (the toolchain builds that on demand
// rather than shipping it), built from cnpbuild/ at CNPVersion into a
// cache of their own (<cache root>/cnp-conformance-<version>, with its own
// lock and stamp), as E2EBinaries builds e2e.test. Static; about a minute
// cold.
func CNPConformanceBinaries(logf func(string, ...any)) (string, error) {
	b, err := newCachedBuild("the ClusterNetworkPolicy conformance suite "+CNPVersion, "cnpbuild", "cnp-conformance-"+CNPVersion)
	if err != nil {
		return "", err
	}
	b.pkgs = []string{"cmd/test2json"}
	b.testPkgs = []string{"sigs.k8s.io/network-policy-api/conformance"}
	return b.get(logf)
}
