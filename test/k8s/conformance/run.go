package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Run is one run of e2e.test against a harness cluster.
type Run struct {
	// Bin holds e2e.test and ginkgo (cluster.E2EBinaries).
	Bin string
	// Kubectl is the kubectl the specs exec, built with the cluster's
	// programs: a kubectl on $PATH may be another release's.
	Kubectl string
	// Kubeconfig is the file e2e.test and kubectl read (WriteKubeconfig).
	Kubeconfig string
	// NetNS is the network namespace (a path) e2e.test runs in: the
	// first node's, where the API server listens and whose only way out
	// is the harness's underlay.
	NetNS string
	// Dir receives the reports: junit_01.xml, ginkgo/report.json, the
	// suite's output e2e.log, and e2e.test's other output files.
	Dir string
	// Procs is how many e2e.test processes ginkgo runs specs in (at least
	// 1): most specs wait on pods rather than compute.
	Procs int
	// Selection chooses the specs.
	Selection Selection
	// Timeout bounds the whole suite (ginkgo's --timeout).
	Timeout time.Duration
}

// JSONReport is where e2e.test writes the complete ginkgo report.
func (r Run) JSONReport() string { return filepath.Join(r.Dir, "ginkgo", "report.json") }

// JUnitReport is e2e.test's JUnit report.
func (r Run) JUnitReport() string { return filepath.Join(r.Dir, "junit_01.xml") }

// Args returns the command line: ginkgo, in the node's network
// namespace, running e2e.test in Procs processes.
func (r Run) Args() []string {
	procs := max(r.Procs, 1)
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Hour
	}
	args := []string{"nsenter", "--net=" + r.NetNS, "--",
		filepath.Join(r.Bin, "ginkgo"),
		"--procs=" + strconv.Itoa(procs),
		"--timeout=" + timeout.String(),
		"--no-color",
		"--silence-skips",
	}
	args = append(args, r.Selection.ginkgoFlags("--")...)
	args = append(args, filepath.Join(r.Bin, "e2e.test"), "--")
	return append(args, r.e2eFlags()...)
}

// e2eFlags are e2e.test's own flags: no cloud provider (skeleton: specs
// that need one or SSH to nodes skip themselves), the harness's two
// nodes and DNS domain, reports into Dir, and no log dump (its script
// belongs to a Kubernetes checkout and would ssh to nodes).
func (r Run) e2eFlags() []string {
	return []string{
		"--kubeconfig=" + r.Kubeconfig,
		"--kubectl-path=" + r.Kubectl,
		"--provider=skeleton",
		"--num-nodes=2",
		"--dns-domain=cluster.local",
		"--report-dir=" + r.Dir,
		"--report-complete-ginkgo",
		"--e2e-output-dir=" + r.Dir,
		"--disable-log-dump",
	}
}

// Exec runs the suite and waits for it, its output in Dir/e2e.log. It
// returns nil when the suite ran, whatever the specs' results (which the
// JSON report holds), and an error when it could not run or wrote no
// report. The processes run in a process group of their own, which a
// cancelled ctx kills.
func (r Run) Exec(ctx context.Context) error {
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(r.Dir, "e2e.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	args := r.Args()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.Kubeconfig)
	cancelled, err := RunGroup(ctx, cmd)
	if cancelled {
		return fmt.Errorf("e2e.test stopped: %w (last result %v)", ctx.Err(), err)
	}
	if _, serr := os.Stat(r.JSONReport()); serr != nil {
		return fmt.Errorf("e2e.test wrote no report (%v): %w; see %s", err, serr, logf.Name())
	}
	// ginkgo exits non-zero when a spec failed: the report says which.
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return err
	}
	return nil
}

// WriteKubeconfig writes cfg (the harness's admin identity) as a
// kubeconfig with its certificates inline, for e2e.test and kubectl.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["harness"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["harness"] = &clientcmdapi.Context{Cluster: "harness", AuthInfo: "admin"}
	kc.CurrentContext = "harness"
	return clientcmd.WriteToFile(*kc, path)
}
