package manifesttest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// cnpDir holds the ClusterNetworkPolicy CRD, which the agent's policy
// service follows when it is installed (applied next to any variant
// that runs it: the default and blocks).
const (
	cnpDir  = "../clusternetworkpolicy"
	cnpFile = "policy.networking.k8s.io_clusternetworkpolicies.yaml"
)

// TestClusterNetworkPolicyCRD: the directory holds the CRD alone, byte
// for byte the experimental channel's file of the network-policy-api
// module the main module requires (`make crd-cnp` refreshes it), and it
// is a CRD the API server accepts, of v1beta1, with the experimental
// fields podnet reads (nodes peers, destinationNamedPort).
func TestClusterNetworkPolicyCRD(t *testing.T) {
	entries, err := os.ReadDir(cnpDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != cnpFile {
		t.Errorf("%s holds %v, want %s alone", cnpDir, entries, cnpFile)
	}
	got, err := os.ReadFile(filepath.Join(cnpDir, cnpFile))
	if err != nil {
		t.Fatal(err)
	}
	// The version the main module builds the agent with, not whatever
	// this module's graph selects.
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/network-policy-api")
	cmd.Dir = "../../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/network-policy-api in the main module: %v", err)
	}
	upstream := filepath.Join(strings.TrimSpace(string(out)), "config/crd/experimental", cnpFile)
	want, err := os.ReadFile(upstream)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from %s: run make crd-cnp", filepath.Join(cnpDir, cnpFile), upstream)
	}

	scheme := runtime.NewScheme()
	install.Install(scheme)
	obj, _, err := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer().Decode(got, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		t.Fatalf("a %T, want a CustomResourceDefinition", obj)
	}
	scheme.Default(crd)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := scheme.Convert(crd, internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
		t.Fatalf("the API server would refuse it: %v", errs.ToAggregate())
	}
	if ch := crd.Annotations["policy.networking.k8s.io/channel"]; ch != "experimental" {
		t.Errorf("channel %q, want experimental: the standard schema prunes nodes peers and named ports", ch)
	}
	var v *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == "v1beta1" && crd.Spec.Versions[i].Served {
			v = &crd.Spec.Versions[i]
		}
	}
	if crd.Spec.Group != "policy.networking.k8s.io" || crd.Spec.Names.Plural != "clusternetworkpolicies" ||
		crd.Spec.Scope != apiextensionsv1.ClusterScoped || v == nil {
		t.Fatalf("group %s, plural %s, scope %s, v1beta1 served: %v", crd.Spec.Group, crd.Spec.Names.Plural, crd.Spec.Scope, v != nil)
	}
	spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
	egressPeer := spec.Properties["egress"].Items.Schema.Properties["to"].Items.Schema
	if _, ok := egressPeer.Properties["nodes"]; !ok {
		t.Error("egress peers have no nodes field")
	}
	proto := spec.Properties["ingress"].Items.Schema.Properties["protocols"].Items.Schema
	if _, ok := proto.Properties["destinationNamedPort"]; !ok {
		t.Error("protocols have no destinationNamedPort field")
	}
}
