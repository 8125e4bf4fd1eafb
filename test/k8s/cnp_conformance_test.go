package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/podnet/podnet/test/k8s/cluster"
	"github.com/podnet/podnet/test/k8s/cnpconformance"
	"github.com/podnet/podnet/test/k8s/conformance"
)

// cnpFocusEnv narrows the ClusterNetworkPolicy suite: a regexp on its
// tests' names (make conformance-cnp CNP_FOCUS=...).
const cnpFocusEnv = "PODNET_CNP_FOCUS"

// TestClusterNetworkPolicyConformance runs the ClusterNetworkPolicy
// conformance suite of sigs.k8s.io/network-policy-api v0.3.0 (its test
// binary, built from cnpbuild/) as its users run it, the
// ClusterNetworkPolicy profile with the experimental features podnet
// builds (named ports, Nodes peers), against a two-node cluster with
// podnet deployed from deploy/kubernetes (deploy/kubernetes/blocks with
// PODNET_CONFORMANCE_VARIANT=blocks) and kube-proxy in the mode
// PODNET_K8S_PROXY_MODE names. The suite runs in the first node's
// network namespace, whose only way out is the harness's underlay, where
// the switch counts every packet addressed outside the harness. On a
// kernel without SCTP the tests and subtests that probe SCTP are skipped
// by name (cnpconformance.SCTPSkips). It keeps the suite's events, its
// log, its YAML report (and report.yaml, the skips recorded as skips) and
// a summary in <results>/cnp[-blocks]-<mode>/, and fails if a test
// failed, the run went wrong, or a packet was counted. make conformance
// runs it; make test does not yet (podnet's agent does not enforce
// ClusterNetworkPolicy on main).
func TestClusterNetworkPolicyConformance(t *testing.T) {
	variant := conformanceVariant(t)
	kernelSCTP := conformance.KernelSCTP()
	focus := os.Getenv(cnpFocusEnv)
	var skips []cnpconformance.Skip
	if kernelSCTP != nil {
		var err error
		if skips, err = cnpconformance.Within(cnpconformance.SCTPSkips, focus); err != nil {
			t.Fatalf("%s: %v", cnpFocusEnv, err)
		}
	}

	// What runs the suite, built before the cluster starts.
	start := time.Now()
	bin, err := cluster.CNPConformanceBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	e2eBin, err := cluster.E2EBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	image, err := cnpconformance.WriteImage(t.TempDir(), filepath.Join(e2eBin, "agnhost"), kernelSCTP == nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cnp: the suite and its image ready in %s", time.Since(start).Round(time.Second))

	name := "cnp"
	if variant != cluster.Default {
		name += "-" + variant.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	c, results := startJudgedCluster(ctx, t, name, variant, "podnet")
	crd, err := deployedCNPCRD(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cnp: %s", crd)
	if err := c.LoadImages(image); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(c.Dir, "cnp.kubeconfig")
	if err := conformance.WriteKubeconfig(kubeconfig, c.Config); err != nil {
		t.Fatal(err)
	}
	if kernelSCTP != nil {
		t.Logf("cnp: %v: %d SCTP tests and subtests are skipped by name", kernelSCTP, len(skips))
	}
	run := cnpconformance.Run{Bin: bin, Kubeconfig: kubeconfig, NetNS: c.Nodes[0].NetNS,
		Dir: results, Focus: focus, Skips: skips, Version: podnetVersion(c.ModuleRoot), Timeout: 90 * time.Minute}
	t.Logf("cnp: %s", run.Command())
	runStart := time.Now()
	err = run.Exec(ctx)
	took := time.Since(runStart).Round(time.Second)
	if err != nil {
		t.Fatalf("after %s: %v", took, err)
	}
	if err := cnpconformance.SuiteLog(run.Events(), filepath.Join(results, "suite.log")); err != nil {
		t.Fatal(err)
	}
	res, err := cnpconformance.Read(run.Events(), skips)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(run.SuiteReport()); err == nil {
		if err := cnpconformance.CorrectReport(run.SuiteReport(), filepath.Join(results, "report.yaml"), skips); err != nil {
			res.Problems = append(res.Problems, err.Error())
		}
	} else {
		res.Problems = append(res.Problems, "the suite wrote no report: "+err.Error())
	}
	leaks, err := conformance.ReadLeaks(c.OutsideNetNS)
	if err != nil {
		t.Fatal(err)
	}
	summary := cnpSummary(name, c, run, res, took, crd, kernelSCTP, leaks)
	if err := os.WriteFile(filepath.Join(results, "summary.txt"), []byte(summary), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
	// The closing line, alone on its line: the suite's tests.
	fmt.Printf("ClusterNetworkPolicy conformance: %v\n", cnpconformance.Count(res.Tests))
	if leaks.Total() > 0 {
		t.Errorf("the underlay saw %v", leaks)
	}
	for _, p := range res.Problems {
		t.Errorf("the run: %s", p)
	}
	if n := cnpconformance.Count(res.Tests).Failed; n > 0 {
		t.Errorf("%d of the suite's tests failed; see %s", n, filepath.Join(results, "summary.txt"))
	}
}

// cnpSummary is summary.txt: the run, the counts of tests and subtests,
// each failure with its class, and the skips with their reasons.
func cnpSummary(name string, c *cluster.Cluster, run cnpconformance.Run, res *cnpconformance.Results, took time.Duration,
	crd string, kernelSCTP error, leaks conformance.Leaks) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: sigs.k8s.io/network-policy-api %s, profile %s, experimental features %s, kube-proxy %s, focus %q: %s in %s\n",
		name, cluster.CNPVersion, cnpconformance.Profile, strings.Join(cnpconformance.ExperimentalFeatures, ", "),
		c.ProxyMode(), run.Focus, took, run.Dir)
	fmt.Fprintf(&b, "%s\nunderlay: %v\n", crd, leaks)
	fmt.Fprintf(&b, "tests:    %v\nsubtests: %v\n", cnpconformance.Count(res.Tests), cnpconformance.Count(res.Subtests))
	for _, p := range res.Problems {
		fmt.Fprintf(&b, "PROBLEM %s\n", p)
	}
	var harness int
	for _, o := range res.Subtests {
		if o.Result != "fail" {
			continue
		}
		tag := "FAILED"
		if cnpconformance.Harness(o) {
			tag = "FAILED (harness?)"
			harness++
		}
		fmt.Fprintf(&b, "%s %s (%.0fs)\n    %s\n", tag, o.Name, o.Elapsed, cnpconformance.Why(o))
	}
	for _, o := range res.Tests {
		if o.Result == "fail" && !strings.Contains(o.Output, "--- FAIL: "+"TestConformanceProfiles/"+o.Name+"/") {
			// A test that failed outside its subtests: applying its
			// manifests, or before them.
			fmt.Fprintf(&b, "FAILED %s outside its subtests\n    %s\n", o.Name, cnpconformance.Why(o))
		}
	}
	fmt.Fprintf(&b, "%d failed subtests look like the harness's (a probe could not exec, or no probe ran)\n", harness)
	if kernelSCTP != nil {
		fmt.Fprintf(&b, "skipped by name: %v\n", kernelSCTP)
		for _, o := range append(append([]cnpconformance.Outcome{}, res.Tests...), res.Subtests...) {
			if o.Skip != nil {
				fmt.Fprintf(&b, "SKIPPED %s: %s (%s)\n", o.Name, o.Skip.Reason, o.Skip.Why)
			}
		}
	}
	return b.String()
}

// cnpCRD is the ClusterNetworkPolicy CRD's name.
const cnpCRD = "clusternetworkpolicies.policy.networking.k8s.io"

// deployedCNPCRD says which ClusterNetworkPolicy CRD the deployment
// installed (deploy/kubernetes/clusternetworkpolicy, which c.Deploy
// applies with the manifests): its bundle version and channel. The suite
// judges podnet as shipped, so a deployment without the CRD fails here
// rather than being given one.
func deployedCNPCRD(ctx context.Context, c *cluster.Cluster) (string, error) {
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return "", err
	}
	crds := dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	deadline := time.Now().Add(time.Minute)
	for {
		u, err := crds.Get(ctx, cnpCRD, metav1.GetOptions{})
		if err == nil && crdEstablished(u) {
			a := u.GetAnnotations()
			return fmt.Sprintf("CRD %s deployed with podnet: bundle-version %s, channel %s", cnpCRD,
				a["policy.networking.k8s.io/bundle-version"], a["policy.networking.k8s.io/channel"]), nil
		}
		if err != nil && apierrors.IsNotFound(err) {
			return "", fmt.Errorf("the deployment installed no %s (deploy/kubernetes/clusternetworkpolicy)", cnpCRD)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("crd %s not established after a minute (%v)", cnpCRD, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func crdEstablished(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, cond := range conds {
		if m, _ := cond.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// podnetVersion is the repository's git description, for the report.
func podnetVersion(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return "dev"
}
