package conformance

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// DryRun lists the suite's specs as a run with sel would see them,
// without a cluster: e2e.test --ginkgo.dry-run. A spec sel selects comes
// back passed, every other one skipped. dir receives the JSON report.
func DryRun(bin string, sel Selection, dir string) ([]Spec, error) {
	report := filepath.Join(dir, "dry-run.json")
	args := append([]string{"--ginkgo.dry-run", "--ginkgo.no-color", "--ginkgo.silence-skips", "--ginkgo.json-report=" + report},
		sel.ginkgoFlags("--ginkgo.")...)
	cmd := exec.Command(filepath.Join(bin, "e2e.test"), args...)
	cmd.Dir = dir
	// No kubeconfig: a dry run contacts no cluster.
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("e2e.test %s: %w\n%s", strings.Join(args, " "), err, tail(out, 2000))
	}
	return ReadReport(report)
}

// ListImages returns the images e2e.test names (--list-images).
func ListImages(bin string) ([]string, error) {
	out, err := exec.Command(filepath.Join(bin, "e2e.test"), "--list-images").Output()
	if err != nil {
		return nil, fmt.Errorf("e2e.test --list-images: %w", err)
	}
	imgs := strings.Fields(string(out))
	sort.Strings(imgs)
	return imgs, nil
}

func tail(b []byte, n int) []byte {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
