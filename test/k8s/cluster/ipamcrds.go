package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ApplyIPAMCRDs creates deploy/kubernetes/crds' custom resource
// definitions verbatim and waits until the API server serves them.
func (c *Cluster) ApplyIPAMCRDs(ctx context.Context) error {
	return c.applyCRDs(ctx, "deploy/kubernetes/crds")
}

// ApplyClusterNetworkPolicyCRD creates the ClusterNetworkPolicy CRD of
// deploy/kubernetes/clusternetworkpolicy verbatim and waits until the
// API server serves it.
func (c *Cluster) ApplyClusterNetworkPolicyCRD(ctx context.Context) error {
	return c.applyCRDs(ctx, "deploy/kubernetes/clusternetworkpolicy")
}

// applyCRDs creates the CRDs of dir (relative to the module root), as
// `kubectl apply -f dir/` would on a new cluster, and waits until they
// are established.
func (c *Cluster) applyCRDs(ctx context.Context, dir string) error {
	files, err := filepath.Glob(filepath.Join(c.ModuleRoot, dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("%s: no *.yaml (%v)", dir, err)
	}
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	crds := dc.Resource(crdResource)
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := crds.Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		names = append(names, u.GetName())
	}
	for _, name := range names {
		if err := c.waitFor("kube-apiserver", time.Minute, func() error { return established(ctx, crds, name) }); err != nil {
			return fmt.Errorf("crd %s: %w", name, err)
		}
	}
	return nil
}

func established(ctx context.Context, crds dynamic.NamespaceableResourceInterface, name string) error {
	u, err := crds.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return nil
		}
	}
	return fmt.Errorf("not established: %v", conds)
}

// WriteJSONKubeconfig writes the admin identity's kubeconfig in JSON with
// the credentials inline, the form ipam/store/kube reads.
func (c *Cluster) WriteJSONKubeconfig(path string) error {
	cert, err := os.ReadFile(c.pki.path("admin.crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(c.pki.path("admin.key"))
	if err != nil {
		return err
	}
	kc := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "podnet",
		"clusters": []any{map[string]any{"name": "podnet", "cluster": map[string]any{
			"server": "https://" + apiserverAddr(), "certificate-authority-data": c.pki.caPEM}}},
		"users": []any{map[string]any{"name": "admin", "user": map[string]any{
			"client-certificate-data": cert, "client-key-data": key}}},
		"contexts": []any{map[string]any{"name": "podnet", "context": map[string]any{"cluster": "podnet", "user": "admin"}}},
	}
	data, err := json.MarshalIndent(kc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}
