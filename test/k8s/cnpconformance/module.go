package cnpconformance

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// SuiteModule is the module whose conformance suite this package runs.
const SuiteModule = "sigs.k8s.io/network-policy-api"

// ModuleDir returns SuiteModule's directory in the module cache at the
// release the wrapper module cnpbuildDir pins, downloading it first when
// the cache lacks it. Its config/crd holds the CRDs of that release.
func ModuleDir(cnpbuildDir string) (string, error) {
	for _, args := range [][]string{{"mod", "download", SuiteModule}, {"list", "-m", "-f", "{{.Dir}}", SuiteModule}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = cnpbuildDir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("go %s in %s: %w", strings.Join(args, " "), cnpbuildDir, err)
		}
		if args[0] == "list" {
			if dir := strings.TrimSpace(string(out)); dir != "" {
				return dir, nil
			}
		}
	}
	return "", errors.New(SuiteModule + ": no module directory")
}
