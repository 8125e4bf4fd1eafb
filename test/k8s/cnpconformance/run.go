package cnpconformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/podnet/podnet/test/k8s/conformance"
)

// Run is one run of the suite against a harness cluster.
type Run struct {
	// Bin holds the suite's test binary, conformance.test, and Go's
	// test2json, which turns its output into events
	// (cluster.CNPConformanceBinaries).
	Bin string
	// Kubeconfig is the file the suite reads, through $KUBECONFIG.
	Kubeconfig string
	// NetNS is the network namespace (a path) the suite runs in: the
	// first node's, where the API server listens and whose only way out
	// is the harness's underlay.
	NetNS string
	// Dir receives events.json, the suite's report and its stderr.
	Dir string
	// Focus, when set, is a regexp narrowing the suite's tests (their
	// ShortNames).
	Focus string
	// Skips are left out by name.
	Skips []Skip
	// Version is podnet's, for the report's implementation.
	Version string
	// Timeout bounds the suite (its -test.timeout).
	Timeout time.Duration
}

// Events is where the test events go, one JSON object a line.
func (r Run) Events() string { return filepath.Join(r.Dir, "events.json") }

// SuiteReport is where the suite writes its report (-report-output).
func (r Run) SuiteReport() string { return filepath.Join(r.Dir, "suite-report.yaml") }

// Args returns the command line: test2json running the suite's binary
// in the node's network namespace, as its users run it (go test's
// -run TestConformanceProfiles with the profile flags): the
// ClusterNetworkPolicy profile with ExperimentalFeatures, the report
// written, the base resources cleaned up afterwards.
func (r Run) Args() []string {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = time.Hour
	}
	run := "^" + suiteTest + "$"
	if r.Focus != "" {
		// In parentheses: go test splits a pattern at a top-level |.
		run += "/(" + r.Focus + ")"
	}
	args := []string{"nsenter", "--net=" + r.NetNS, "--",
		filepath.Join(r.Bin, "test2json"), "-t", "-p", SuiteModule + "/conformance",
		filepath.Join(r.Bin, "conformance.test"),
		"-test.v=test2json",
		"-test.count=1",
		"-test.timeout=" + timeout.String(),
		"-test.run=" + run,
	}
	if p := skipPattern(r.Skips); p != "" {
		args = append(args, "-test.skip="+p)
	}
	return append(args,
		"-conformance-profiles="+Profile,
		"-supported-features="+strings.Join(ExperimentalFeatures, ","),
		"-cleanup-base-resources=true",
		"-report-output="+r.SuiteReport(),
		"-organization=podnet",
		"-project=podnet",
		"-url=https://github.com/podnet/podnet",
		"-version="+r.Version,
		"-contact=https://github.com/podnet/podnet/issues",
		"-additional-info=test/k8s TestClusterNetworkPolicyConformance (make conformance), docs/conformance.md",
	)
}

// Exec runs the suite and waits for it: the events in Events, what
// test2json itself prints in suite.stderr. It returns nil when the suite
// ran, whatever its tests' results, and an error when it could not run
// or left no events. The processes run in a process group of their own,
// which a cancelled ctx kills.
func (r Run) Exec(ctx context.Context) error {
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return err
	}
	events, err := os.Create(r.Events())
	if err != nil {
		return err
	}
	defer events.Close()
	stderr, err := os.Create(filepath.Join(r.Dir, "suite.stderr"))
	if err != nil {
		return err
	}
	defer stderr.Close()
	args := r.Args()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = events, stderr
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.Kubeconfig)
	cancelled, err := conformance.RunGroup(ctx, cmd)
	if cancelled {
		return fmt.Errorf("the suite stopped: %w (last result %v)", ctx.Err(), err)
	}
	if fi, serr := os.Stat(r.Events()); serr != nil || fi.Size() == 0 {
		return fmt.Errorf("the suite left no events (%v); see %s", err, stderr.Name())
	}
	// The suite exits non-zero when a test failed: the events say which.
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return err
	}
	return nil
}

// Command is the command line as a shell reads it, $KUBECONFIG
// included: what to paste to run the suite again by hand (as root, on
// the machine, while the cluster is kept).
func (r Run) Command() string {
	words := []string{"KUBECONFIG=" + shellQuote(r.Kubeconfig)}
	for _, a := range r.Args() {
		words = append(words, shellQuote(a))
	}
	return strings.Join(words, " ")
}

// shellQuote quotes s for a POSIX shell unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
