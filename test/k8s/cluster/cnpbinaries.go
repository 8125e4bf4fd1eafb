package cluster

import "path/filepath"

// CNPVersion is the release of sigs.k8s.io/network-policy-api whose
// ClusterNetworkPolicy conformance suite cnpbuild/ pins.
const CNPVersion = "v0.3.0"

// CNPConformanceSuite returns the path of the ClusterNetworkPolicy
// conformance suite's test binary, conformance.test (`go test -c
// sigs.k8s.io/network-policy-api/conformance`), built from cnpbuild/ at
// CNPVersion into a cache of its own (<cache root>/cnp-conformance-<version>,
// with its own lock and stamp), as E2EBinaries builds e2e.test. It is
// static, and about a minute cold.
func CNPConformanceSuite(logf func(string, ...any)) (string, error) {
	b, err := newCachedBuild("the ClusterNetworkPolicy conformance suite "+CNPVersion, "cnpbuild", "cnp-conformance-"+CNPVersion)
	if err != nil {
		return "", err
	}
	b.testPkgs = []string{"sigs.k8s.io/network-policy-api/conformance"}
	bin, err := b.get(logf)
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, "conformance.test"), nil
}
