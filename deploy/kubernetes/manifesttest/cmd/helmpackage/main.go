// Command helmpackage writes podnet's Helm chart as a chart archive,
// DIR/podnet-VERSION.tgz, with Helm's own Go packages (what `helm
// package` does), after Helm's linter passed it with its default values:
// `make helm-package` runs it, so that packaging needs no helm binary.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

func main() {
	chartDir := flag.String("chart", "deploy/helm/podnet", "the chart's directory")
	out := flag.String("out", "dist", "the directory the archive goes in")
	flag.Parse()
	path, err := packageChart(*chartDir, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helmpackage:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

// packageChart lints the chart in dir and saves it into out, returning
// the archive's path.
func packageChart(dir, out string) (string, error) {
	var errs []error
	for _, m := range lint.All(dir, nil, "kube-system", false).Messages {
		if m.Severity >= support.WarningSev {
			errs = append(errs, m)
		}
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("helm lint %s:\n%w", dir, errors.Join(errs...))
	}
	c, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	return chartutil.Save(c, out)
}
