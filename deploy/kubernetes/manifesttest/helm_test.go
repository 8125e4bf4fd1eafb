package manifesttest

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/diff"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// The Helm chart, deploy/helm/podnet, and the values files of
// chart-testing's convention (ci/) that render each shipped variant.
const (
	chartDir     = "../../helm/podnet"
	chartCIDir   = chartDir + "/ci"
	releaseName  = "podnet"
	chartVersion = "0.1.0"
)

// chartVariants: each ci values file renders, object for object, the
// shipped directories named (blocks' CRDs are the chart's with datastore
// blocks). extra values are set on top of the file's.
var chartVariants = []struct {
	name, values string
	extra        map[string]any
	dirs         []string
}{
	{"default", "default-values.yaml", nil, []string{defaultDir}},
	{"blocks", "blocks-values.yaml", nil, []string{blocksDir, crdDir}},
	{"etcd", "etcd-values.yaml", nil, []string{etcdDir}},
	{"default+clusternetworkpolicy", "default-values.yaml", map[string]any{"clusterNetworkPolicyCRD": true}, []string{defaultDir, cnpDir}},
}

// helmOnly are the annotations the chart adds that the plain manifests
// do not have, and why they may differ; nothing else may.
var helmOnly = map[string]string{
	// On the DaemonSet's pod template: the ConfigMap's hash, so that
	// `helm upgrade` rolls the agents when only the ConfigMap changed
	// (they read it at start). kubectl users restart by hand
	// (deploy/kubernetes/README.md).
	"podnet.io/config-hash": "pod template",
	// On the CRDs: helm uninstall (or a switch of datastore) must not
	// delete them, which would delete every pool, block or
	// ClusterNetworkPolicy. kubectl deletes them only when told to.
	"helm.sh/resource-policy": "CRD",
}

var chartOnce struct {
	sync.Once
	c   *chart.Chart
	err error
}

// loadChart loads the chart with Helm's own loader, once.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	chartOnce.Do(func() { chartOnce.c, chartOnce.err = loader.Load(chartDir) })
	if chartOnce.err != nil {
		t.Fatalf("helm: loading %s: %v", chartDir, chartOnce.err)
	}
	return chartOnce.c
}

// ciValues reads one of the chart's ci values files, with extra on top.
func ciValues(t *testing.T, file string, extra map[string]any) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValuesFile(filepath.Join(chartCIDir, file))
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(vals, extra)
	return vals
}

// render renders the chart as `helm install --namespace kube-system`
// does: values coalesced with the chart's, validated against
// values.schema.json, templates executed by Helm's engine. It returns
// the manifests by template name, NOTES.txt and partials left out.
func render(c *chart.Chart, vals map[string]any) (map[string]string, error) {
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValues(c, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(c, top)
	if err != nil {
		return nil, err
	}
	for name := range out {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(filepath.Base(name), "_") {
			delete(out, name)
		}
	}
	return out, nil
}

// objectDecoder decodes strictly every kind the chart renders: the
// variants' kinds and CustomResourceDefinitions.
func objectDecoder() runtime.Decoder {
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(appsv1.AddToScheme(scheme))
	utilruntime.Must(rbacv1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// objects are decoded objects by "Kind namespace/name".
type objects map[string]runtime.Object

// addYAML decodes every document of data into objs; a key seen twice
// is an error.
func (objs objects) addYAML(dec runtime.Decoder, name string, data []byte) []error {
	docs, err := splitDocuments(data)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", name, err)}
	}
	var errs []error
	for i, doc := range docs {
		obj, err := decodeDocument(dec, doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s, document %d: %w", name, i+1, err))
			continue
		}
		if obj == nil {
			continue
		}
		key, err := objectKey(obj)
		if err == nil && objs[key] != nil {
			err = fmt.Errorf("%s defined twice", key)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s, document %d: %w", name, i+1, err))
			continue
		}
		objs[key] = obj
	}
	return errs
}

func objectKey(obj runtime.Object) (string, error) {
	meta, ok := obj.(interface {
		GetName() string
		GetNamespace() string
	})
	if !ok || meta.GetName() == "" {
		return "", fmt.Errorf("%T without metadata.name", obj)
	}
	return fmt.Sprintf("%s %s/%s", obj.GetObjectKind().GroupVersionKind().Kind, meta.GetNamespace(), meta.GetName()), nil
}

// renderedObjects renders the chart with vals and decodes what it made.
func renderedObjects(t *testing.T, vals map[string]any) objects {
	t.Helper()
	out, err := render(loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm: %v", err)
	}
	objs, dec := objects{}, objectDecoder()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(out)) {
		errs = append(errs, objs.addYAML(dec, name, []byte(out[name]))...)
	}
	if len(errs) > 0 {
		t.Fatalf("the chart's output:\n%v", errors.Join(errs...))
	}
	return objs
}

// shippedObjects decodes every *.yaml of dirs.
func shippedObjects(t *testing.T, dirs []string) objects {
	t.Helper()
	objs, dec := objects{}, objectDecoder()
	var errs []error
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no *.yaml (%v)", dir, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			errs = append(errs, objs.addYAML(dec, f, data)...)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("shipped manifests:\n%v", errors.Join(errs...))
	}
	return objs
}

// dropHelmOnly removes helmOnly's annotations from obj, in place, and
// reports the ones it found.
func dropHelmOnly(obj runtime.Object) []string {
	var anns *map[string]string
	switch o := obj.(type) {
	case *apiextensionsv1.CustomResourceDefinition:
		anns = &o.Annotations
	case *appsv1.DaemonSet:
		anns = &o.Spec.Template.Annotations
	default:
		return nil
	}
	var found []string
	for k := range helmOnly {
		if _, ok := (*anns)[k]; ok {
			found = append(found, k)
			delete(*anns, k)
		}
	}
	if len(*anns) == 0 {
		*anns = nil
	}
	return found
}

// TestChartRendersShippedManifests: each ci values file renders exactly
// the objects of its shipped directories, compared as decoded API
// objects (comments and formatting may differ; helmOnly's annotations
// are the one exception, and the chart must set them).
func TestChartRendersShippedManifests(t *testing.T) {
	for _, v := range chartVariants {
		t.Run(v.name, func(t *testing.T) {
			got := renderedObjects(t, ciValues(t, v.values, v.extra))
			want := shippedObjects(t, v.dirs)
			for _, key := range slices.Sorted(maps.Keys(got)) {
				found := dropHelmOnly(got[key])
				if strings.HasPrefix(key, "DaemonSet ") && !slices.Contains(found, "podnet.io/config-hash") {
					t.Errorf("%s: no podnet.io/config-hash on the pod template: helm upgrade would not roll the agents when the ConfigMap changes", key)
				}
				if strings.HasPrefix(key, "CustomResourceDefinition ") && !slices.Contains(found, "helm.sh/resource-policy") {
					t.Errorf("%s: no helm.sh/resource-policy: keep", key)
				}
			}
			for _, key := range slices.Sorted(maps.Keys(want)) {
				g := got[key]
				if g == nil {
					t.Errorf("%s: shipped in %v, not rendered", key, v.dirs)
					continue
				}
				if !equality.Semantic.DeepEqual(g, want[key]) {
					t.Errorf("%s: the chart renders it otherwise than %v ships it (- rendered, + shipped):\n%s", key, v.dirs, diff.Diff(g, want[key]))
				}
			}
			for _, key := range slices.Sorted(maps.Keys(got)) {
				if want[key] == nil {
					t.Errorf("%s: rendered, not shipped in %v", key, v.dirs)
				}
			}
		})
	}
}

// TestChartFilesAreShipped: the CRDs the chart renders from files/ are
// the shipped files byte for byte (make crd-cnp refreshes both).
func TestChartFilesAreShipped(t *testing.T) {
	pairs := map[string]string{
		"files/clusternetworkpolicy/" + cnpFile: filepath.Join(cnpDir, cnpFile),
	}
	for _, f := range crdFiles {
		pairs["files/crds/"+f] = filepath.Join(crdDir, f)
	}
	entries, err := filepath.Glob(filepath.Join(chartDir, "files", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(pairs) {
		t.Errorf("%s/files holds %v, want %v", chartDir, entries, slices.Sorted(maps.Keys(pairs)))
	}
	for chartFile, shipped := range pairs {
		got, err := os.ReadFile(filepath.Join(chartDir, chartFile))
		if err != nil {
			t.Error(err)
			continue
		}
		want, err := os.ReadFile(shipped)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s/%s differs from %s: copy it (make crd-cnp does for the ClusterNetworkPolicy CRD)", chartDir, chartFile, shipped)
		}
	}
}

// TestChartVersion: Chart.yaml is a v2 chart named podnet whose
// appVersion is its version.
func TestChartVersion(t *testing.T) {
	c := loadChart(t)
	m := c.Metadata
	if m.APIVersion != chart.APIVersionV2 || m.Name != "podnet" || m.Version != chartVersion || m.AppVersion != m.Version {
		t.Errorf("Chart.yaml: apiVersion %s, name %s, version %s, appVersion %s; want v2, podnet, %s, the same", m.APIVersion, m.Name, m.Version, m.AppVersion, chartVersion)
	}
}
