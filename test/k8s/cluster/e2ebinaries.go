package cluster

// E2EBinaries returns a directory holding e2e.test (`go test -c
// k8s.io/kubernetes/test/e2e`), the ginkgo CLI that runs it in parallel,
// and the programs of two test images, agnhost and regression-issue-74839,
// built from e2ebuild/ at KubeVersion into a cache of their own (<cache root>/e2e-<version>,
// with its own lock and stamp), so that neither build invalidates the
// other. Static like KubeBinaries; e2e.test alone takes many minutes cold.
func E2EBinaries(logf func(string, ...any)) (string, error) {
	b, err := newCachedBuild("the e2e suite of Kubernetes "+KubeVersion, "e2ebuild", "e2e-"+KubeVersion)
	if err != nil {
		return "", err
	}
	b.pkgs = []string{"github.com/onsi/ginkgo/v2/ginkgo", "k8s.io/kubernetes/test/images/agnhost",
		"k8s.io/kubernetes/test/images/regression-issue-74839"}
	// e2e.test compares its own version with the server's in places, and
	// agnhost reports it.
	b.ldflags = "-X k8s.io/component-base/version.gitVersion=" + KubeVersion
	b.testPkgs = []string{"k8s.io/kubernetes/test/e2e"}
	return b.get(logf)
}
