package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/podnet/podnet/test/k8s/cluster"
	"github.com/podnet/podnet/test/k8s/conformance"
)

// The environment of TestConformance (make conformance sets the first).
const (
	conformanceEnv      = "PODNET_CONFORMANCE"         // 1: run it
	conformanceChainEnv = "PODNET_CONFORMANCE_CHAIN"   // podnet (default), refchain or kube-router
	conformanceVarEnv   = "PODNET_CONFORMANCE_VARIANT" // podnet's deployment: default or blocks
	conformanceFocusEnv = "PODNET_CONFORMANCE_FOCUS"   // a regexp narrowing the selection
	conformanceProcsEnv = "PODNET_CONFORMANCE_PROCS"   // parallel e2e.test processes (default 4)
	conformanceDirEnv   = "PODNET_CONFORMANCE_DIR"     // results (default <repo>/conformance-results)
	// 1: an Admin ClusterNetworkPolicy that passes everything is in
	// place before the specs run (podnet only)
	conformancePassEnv = "PODNET_CONFORMANCE_CNP_PASS"
)

// TestConformance runs the upstream Kubernetes e2e networking specs the
// conformance package selects against a two-node cluster: podnet deployed
// from deploy/kubernetes as shipped (deploy/kubernetes/blocks with
// PODNET_CONFORMANCE_VARIANT=blocks; or, with PODNET_CONFORMANCE_CHAIN=
// refchain, the reference chain: bridge, host-local, portmap; with
// kube-router, podnet without its policy service and kube-router's
// network policy controller enforcing NetworkPolicy), kube-proxy
// in the mode PODNET_K8S_PROXY_MODE names (iptables by default), CoreDNS
// as the cluster's DNS, the test images loaded into every node. e2e.test runs in the first node's
// network namespace, whose only way out is the harness's underlay, where
// the switch counts every packet addressed outside the harness. It keeps
// the JUnit and JSON reports, e2e.test's output and a log per spec in
// <results>/<chain>-<mode>/, which outlive the cluster, and fails if a
// spec failed or a packet was counted; the reference chain enforces no
// NetworkPolicy, so its [Feature:NetworkPolicy] failures are expected
// and listed apart. On a kernel without SCTP the SCTP specs are skipped
// by name (conformance.SCTPSkips). Without PODNET_CONFORMANCE=1 (as
// in make test) it runs the selection's MakeTestFocus subset only; the
// whole selection takes half an hour.
func TestConformance(t *testing.T) {
	// make test runs the subset; make conformance the whole selection.
	full := os.Getenv(conformanceEnv) == "1"
	chain := os.Getenv(conformanceChainEnv)
	switch chain {
	case "":
		chain = "podnet"
	case "podnet", "refchain", "kube-router":
	default:
		t.Fatalf("%s=%q: podnet, refchain or kube-router", conformanceChainEnv, chain)
	}
	variant := conformanceVariant(t)
	if variant != cluster.Default && chain != "podnet" {
		t.Fatalf("%s=%s is podnet's deployment; the %s chain has none", conformanceVarEnv, variant, chain)
	}
	passAll := false
	switch v := os.Getenv(conformancePassEnv); v {
	case "", "0":
	case "1":
		passAll = true
	default:
		t.Fatalf("%s=%q: 1 or 0", conformancePassEnv, v)
	}
	if passAll && chain != "podnet" {
		t.Fatalf("%s=1 needs podnet's ClusterNetworkPolicy CRD; the %s chain has none", conformancePassEnv, chain)
	}
	procs := 4
	if v := os.Getenv(conformanceProcsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: a count of processes", conformanceProcsEnv, v)
		}
		procs = n
	}

	// What runs the specs, built before the cluster starts.
	start := time.Now()
	bin, err := cluster.E2EBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	kubeBin, err := cluster.KubeBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	archives := buildE2EImages(t, bin)
	t.Logf("conformance: e2e.test and %d images ready in %s", len(archives), time.Since(start).Round(time.Second))

	name := chain
	if variant != cluster.Default {
		name += "-" + variant.String()
	}
	if passAll {
		name += "-cnppass"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	c, results := startJudgedCluster(ctx, t, name, variant, chain)
	if passAll {
		// Issue 23: the NetworkPolicy specs decide alike when an Admin
		// tier passes everything on to them.
		if err := createPassEverything(ctx, c); err != nil {
			t.Fatalf("ClusterNetworkPolicy passing everything: %v", err)
		}
	}
	// The cluster's DNS, as kubeadm deploys it: kube-dns at the address
	// every kubelet's clusterDNS names, answering only for the cluster.
	if err := c.DeployDNS(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadImages(archives...); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(c.Dir, "e2e.kubeconfig")
	if err := conformance.WriteKubeconfig(kubeconfig, c.Config); err != nil {
		t.Fatal(err)
	}
	sel := conformance.Default()
	sel.Focus = os.Getenv(conformanceFocusEnv)
	if !full && sel.Focus == "" {
		sel.Focus = conformance.MakeTestFocus
	}
	if err := conformance.KernelSCTP(); err != nil {
		t.Logf("conformance: %v: the %d SCTP specs are skipped", err, len(conformance.SCTPSkips))
		sel = sel.WithoutSCTP()
	}
	run := conformance.Run{Bin: bin, Kubectl: filepath.Join(kubeBin, "kubectl"), Kubeconfig: kubeconfig,
		NetNS: c.Nodes[0].NetNS, Dir: results, Procs: procs, Selection: sel, Timeout: 150 * time.Minute}
	t.Logf("conformance: %s", strings.Join(run.Args(), " "))
	runStart := time.Now()
	err = run.Exec(ctx)
	took := time.Since(runStart).Round(time.Second)
	if err != nil {
		t.Fatalf("after %s: %v", took, err)
	}
	specs, err := conformance.ReadReport(run.JSONReport())
	if err != nil {
		t.Fatal(err)
	}
	var network []conformance.Spec
	for _, s := range specs {
		if s.HasLabel("sig-network") {
			network = append(network, s)
		}
	}
	if err := conformance.WriteSpecLogs(filepath.Join(results, "specs"), network); err != nil {
		t.Fatal(err)
	}
	counts := conformance.Count(network)
	var failed, expected []string
	for _, s := range network {
		if conformance.Count([]conformance.Spec{s}).Failed > 0 {
			why, _, _ := strings.Cut(s.Failure, "\n")
			if chain == "refchain" && s.HasLabel(conformance.FeatureNetworkPolicy) {
				expected = append(expected, s.Name+"\n    "+why)
				continue
			}
			failed = append(failed, s.Name+"\n    "+why)
		}
	}
	leaks, err := conformance.ReadLeaks(c.OutsideNetNS)
	if err != nil {
		t.Fatal(err)
	}
	summary := fmt.Sprintf("chain %s, kube-proxy %s, %d processes, focus %q: %s in %s\nunderlay: %v\n%s\n",
		name, c.ProxyMode(), procs, sel.Focus, took, results, leaks, counts)
	for _, f := range failed {
		summary += "FAILED " + f + "\n"
	}
	if len(expected) > 0 {
		summary += fmt.Sprintf("%d of the failures are expected: the reference chain enforces no NetworkPolicy\n", len(expected))
	}
	for _, f := range expected {
		summary += "FAILED (expected) " + f + "\n"
	}
	if err := os.WriteFile(filepath.Join(results, "summary.txt"), []byte(summary), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
	// The closing line, alone on its line: the [sig-network] specs of
	// the suite, those the selection left out counted as skipped.
	fmt.Println(counts)
	if leaks.Total() > 0 {
		t.Errorf("the underlay saw %v", leaks)
	}
	if len(failed) > 0 {
		t.Errorf("%d [sig-network] specs failed; logs in %s", len(failed), filepath.Join(results, "specs"))
	}
}

// conformanceVariant is podnet's deployment PODNET_CONFORMANCE_VARIANT
// names.
func conformanceVariant(t *testing.T) cluster.Variant {
	switch v := os.Getenv(conformanceVarEnv); v {
	case "", "default":
		return cluster.Default
	case "blocks":
		return cluster.Blocks
	default:
		t.Fatalf("%s=%q: default or blocks", conformanceVarEnv, v)
		return ""
	}
}

// startJudgedCluster starts the two-node cluster a judge (e2e.test, the
// ClusterNetworkPolicy suite) runs against, with podnet deployed as
// variant, the reference chain installed, or (chain kube-router) podnet
// without its policy service and kube-router enforcing policy, and waits
// for its nodes to be Ready (podnet with PODNET_CONFORMANCE_ENCRYPTION's encryption, its
// routes through podnet.wg). It returns the cluster and its results
// directory, <results>/<name>[-<encryption>]-<kube-proxy mode>.
// Evidence beside the judges' skip lists: the underlay switch counts what the nodes send towards
// addresses outside the harness, which a run must leave at zero.
func startJudgedCluster(ctx context.Context, t *testing.T, name string, variant cluster.Variant, chain string) (*cluster.Cluster, string) {
	t.Helper()
	reference := chain == "refchain"
	enc := ""
	if !reference {
		enc = conformanceEncryption(t)
	}
	if enc != "" {
		name += "-" + enc
	}
	c := cluster.Start(t, cluster.WithNodes(2))
	results := conformanceDir(t, c, name+"-"+string(c.ProxyMode()))
	if err := conformance.WatchLeaks(c.OutsideNetNS); err != nil {
		t.Fatal(err)
	}
	var err error
	switch chain {
	case "refchain":
		err = c.InstallReferenceChain(ctx, t.Logf)
	case "kube-router":
		err = c.Deploy(ctx, variant, kubeRouterPeer(withEncryption(enc)))
	default:
		err = c.Deploy(ctx, variant, withEncryption(enc))
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	if enc != "" {
		waitEncryptedRoutes(ctx, t, c)
	}
	if chain == "kube-router" {
		if err := c.InstallKubeRouter(ctx, t.Logf); err != nil {
			t.Fatal(err)
		}
	}
	return c, results
}

// createPassEverything creates an Admin-tier ClusterNetworkPolicy whose
// subject is every namespace and whose rules pass to NetworkPolicy
// every pod's ingress (the only peers ingress has) and egress to every
// pod, node and network.
func createPassEverything(ctx context.Context, c *cluster.Cluster) error {
	return createClusterPolicy(ctx, c, "conformance-pass-everything", map[string]any{
		"tier":     "Admin",
		"priority": int64(0),
		"subject":  map[string]any{"namespaces": map[string]any{}},
		"ingress": []any{map[string]any{"name": "pass-in", "action": "Pass",
			"from": []any{map[string]any{"namespaces": map[string]any{}}}}},
		"egress": []any{map[string]any{"name": "pass-out", "action": "Pass", "to": []any{
			map[string]any{"namespaces": map[string]any{}},
			map[string]any{"nodes": map[string]any{}},
			map[string]any{"networks": []any{"0.0.0.0/0", "::/0"}},
		}}},
	})
}

// cnpResource is the ClusterNetworkPolicy resource podnet's deployment
// serves (deploy/kubernetes/clusternetworkpolicy).
var cnpResource = schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1beta1", Resource: "clusternetworkpolicies"}

// createClusterPolicy creates the ClusterNetworkPolicy name with spec
// (its JSON form) through the resource podnet's deployment serves.
func createClusterPolicy(ctx context.Context, c *cluster.Cluster, name string, spec map[string]any) error {
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": cnpResource.GroupVersion().String(),
		"kind":       "ClusterNetworkPolicy",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
	_, err = dc.Resource(cnpResource).Create(ctx, p, metav1.CreateOptions{})
	return err
}

// conformanceDir is where a run's results go, emptied first:
// $PODNET_CONFORMANCE_DIR or <repo>/conformance-results, then name.
func conformanceDir(t *testing.T, c *cluster.Cluster, name string) string {
	t.Helper()
	root := os.Getenv(conformanceDirEnv)
	if root == "" {
		root = filepath.Join(c.ModuleRoot, "conformance-results")
	}
	dir := filepath.Join(root, name)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildE2EImages writes the test images' archives into a directory of
// the test's and returns them.
func buildE2EImages(t *testing.T, bin string) []string {
	t.Helper()
	mod, err := cluster.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pause := filepath.Join(dir, "pause")
	cmd := exec.Command("go", "build", "-trimpath", "-o", pause, "./cmd/pause")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/pause: %v\n%s", err, out)
	}
	kdir, err := conformance.KubernetesDir(filepath.Join(mod, "e2ebuild"))
	if err != nil {
		t.Fatal(err)
	}
	coredns, err := cluster.CoreDNSBinary(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	archives, err := conformance.Build(dir, conformance.Sources{
		Agnhost: filepath.Join(bin, "agnhost"), Regression: filepath.Join(bin, "regression-issue-74839"),
		Pause: pause, CoreDNS: coredns, KubernetesDir: kdir,
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return archives
}
