package manifesttest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The variants of deploy/kubernetes, relative to this package: each
// directory is a whole deployment, applied on its own (kubectl apply -f
// DIR/ reads no subdirectory).
const (
	// defaultDir is the default: the Kubernetes API as datastore, pods
	// addressed from their Node's spec.podCIDRs (model A, node CIDR).
	defaultDir = ".."
	// etcdDir is the etcd variant: block IPAM and registrations in etcd.
	etcdDir = "../etcd"
	// blocksDir is block IPAM on the Kubernetes API (model B): its
	// objects are the CRDs of crds/, applied before it.
	blocksDir = "../blocks"
)

// variants are the deployments, by the name tests report them under.
var variants = []struct{ name, dir string }{
	{"default", defaultDir},
	{"etcd", etcdDir},
	{"blocks", blocksDir},
}

// otherDirs are directories of deploy/kubernetes with manifests that are
// not a deployment of their own, each with the test that checks it.
var otherDirs = map[string]string{
	"crds":                         "crds_test.go: the podnet.io CRDs of model B",
	"clusternetworkpolicy":         "clusternetworkpolicy_test.go: the ClusterNetworkPolicy CRD, upstream's verbatim",
	"manifesttest/" + badValuesDir: "helm_schema_test.go: values files the Helm chart's schema must refuse",
	"uninstall":                    "uninstall_test.go: the DaemonSet that removes podnet from every node",
}

// namespace is where every podnet object lives: kube-system, because
// clusters commonly reserve system-node-critical pods to it and exempt it
// from Pod Security admission, which would refuse a privileged,
// host-network pod elsewhere.
const namespace = "kube-system"

// manifests is everything in one variant's *.yaml, decoded.
type manifests struct {
	daemonSets      []*appsv1.DaemonSet
	configMaps      map[string]*corev1.ConfigMap
	serviceAccounts map[string]*corev1.ServiceAccount
	secrets         map[string]*corev1.Secret
	namespaces      map[string]*corev1.Namespace
	clusterRoles    map[string]*rbacv1.ClusterRole
	roleBindings    map[string]*rbacv1.ClusterRoleBinding
	// roles and nsRoleBindings are namespaced, in kube-system.
	roles          map[string]*rbacv1.Role
	nsRoleBindings map[string]*rbacv1.RoleBinding
}

// decoder decodes YAML or JSON into typed objects the way the API server
// does with strict field validation: unknown and duplicate fields are
// errors, field names are case-sensitive, and only apps/v1, core/v1
// and rbac.authorization.k8s.io/v1 are known, so a removed API version
// (extensions/v1beta1) is an error.
func decoder() runtime.Decoder {
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(appsv1.AddToScheme(scheme))
	utilruntime.Must(rbacv1.AddToScheme(scheme))
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// splitDocuments splits a multi-document YAML stream at its "---" lines.
func splitDocuments(data []byte) ([][]byte, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}

// decodeDocument decodes one document; it returns nil for a document
// with nothing but comments.
func decodeDocument(dec runtime.Decoder, doc []byte) (runtime.Object, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	if string(j) == "null" {
		return nil, nil
	}
	obj, _, err := dec.Decode(doc, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// add files obj under its kind; kinds podnet does not ship are errors, so
// a new kind comes with checks of its own.
func (m *manifests) add(obj runtime.Object) error {
	var meta interface {
		GetName() string
		GetNamespace() string
	}
	var seen bool
	wantNS := namespace
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		meta = o
		m.daemonSets = append(m.daemonSets, o)
	case *corev1.ConfigMap:
		meta, seen = o, m.configMaps[o.Name] != nil
		m.configMaps[o.Name] = o
	case *corev1.ServiceAccount:
		meta, seen = o, m.serviceAccounts[o.Name] != nil
		m.serviceAccounts[o.Name] = o
	case *corev1.Secret:
		meta, seen = o, m.secrets[o.Name] != nil
		m.secrets[o.Name] = o
	case *corev1.Namespace:
		meta, seen = o, m.namespaces[o.Name] != nil
		m.namespaces[o.Name] = o
		wantNS = "" // cluster-scoped
	case *rbacv1.ClusterRole:
		meta, seen = o, m.clusterRoles[o.Name] != nil
		m.clusterRoles[o.Name] = o
		wantNS = ""
	case *rbacv1.ClusterRoleBinding:
		meta, seen = o, m.roleBindings[o.Name] != nil
		m.roleBindings[o.Name] = o
		wantNS = ""
	case *rbacv1.Role:
		meta, seen = o, m.roles[o.Name] != nil
		m.roles[o.Name] = o
	case *rbacv1.RoleBinding:
		meta, seen = o, m.nsRoleBindings[o.Name] != nil
		m.nsRoleBindings[o.Name] = o
	default:
		return fmt.Errorf("kind %s: not one podnet ships (DaemonSet, ConfigMap, ServiceAccount, Secret, Namespace, ClusterRole, ClusterRoleBinding, Role, RoleBinding); add it to the test with checks",
			obj.GetObjectKind().GroupVersionKind())
	}
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	switch {
	case meta.GetName() == "":
		return fmt.Errorf("%s without metadata.name", kind)
	case seen:
		return fmt.Errorf("%s %q defined twice", kind, meta.GetName())
	case meta.GetNamespace() != wantNS:
		return fmt.Errorf("%s %q: namespace %q, want %q", kind, meta.GetName(), meta.GetNamespace(), wantNS)
	}
	return nil
}

// loaded caches the decoded manifests of each directory for every test
// of the package.
var loaded struct {
	sync.Mutex
	dirs map[string]*loadedDir
}

type loadedDir struct {
	m    *manifests
	errs []error
}

// loadFrom returns the decoded manifests of dir, failing the test with
// every document that did not decode.
func loadFrom(t *testing.T, dir string) *manifests {
	t.Helper()
	loaded.Lock()
	if loaded.dirs == nil {
		loaded.dirs = map[string]*loadedDir{}
	}
	l := loaded.dirs[dir]
	if l == nil {
		l = &loadedDir{}
		l.m, l.errs = loadDir(dir)
		loaded.dirs[dir] = l
	}
	loaded.Unlock()
	if len(l.errs) > 0 {
		t.Fatalf("manifests in %s:\n%v", dir, errors.Join(l.errs...))
	}
	return l.m
}

func loadDir(dir string) (*manifests, []error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, []error{err}
	}
	if len(files) == 0 {
		return nil, []error{fmt.Errorf("no *.yaml in %s", dir)}
	}
	m := newManifests()
	dec := decoder()
	var errs []error
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, m.addFile(dec, filepath.Base(f), data)...)
	}
	return m, errs
}

func newManifests() *manifests {
	return &manifests{
		configMaps:      map[string]*corev1.ConfigMap{},
		serviceAccounts: map[string]*corev1.ServiceAccount{},
		secrets:         map[string]*corev1.Secret{},
		namespaces:      map[string]*corev1.Namespace{},
		clusterRoles:    map[string]*rbacv1.ClusterRole{},
		roleBindings:    map[string]*rbacv1.ClusterRoleBinding{},
		roles:           map[string]*rbacv1.Role{},
		nsRoleBindings:  map[string]*rbacv1.RoleBinding{},
	}
}

// addFile decodes every document of one file (name says which in the
// errors) and adds it.
func (m *manifests) addFile(dec runtime.Decoder, name string, data []byte) []error {
	docs, err := splitDocuments(data)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", name, err)}
	}
	var errs []error
	for i, doc := range docs {
		obj, err := decodeDocument(dec, doc)
		if err == nil && obj != nil {
			err = m.add(obj)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s, document %d: %w", name, i+1, err))
		}
	}
	return errs
}

// TestManifestsDecode: every variant decodes strictly and is a whole
// deployment: one DaemonSet, its ConfigMap and its ServiceAccount.
func TestManifestsDecode(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			m := loadFrom(t, v.dir)
			if len(m.daemonSets) != 1 {
				t.Fatalf("%d DaemonSets, want 1", len(m.daemonSets))
			}
			if len(m.configMaps) == 0 || len(m.serviceAccounts) == 0 {
				t.Fatalf("want a ConfigMap and a ServiceAccount, got %d and %d", len(m.configMaps), len(m.serviceAccounts))
			}
		})
	}
}

// TestVariantDirectories: every directory of deploy/kubernetes that
// holds manifests is a variant this package checks, or one of otherDirs,
// so that a new variant cannot ship unchecked.
func TestVariantDirectories(t *testing.T) {
	known := map[string]bool{}
	for _, v := range variants {
		known[filepath.Clean(v.dir)] = true
	}
	for name := range otherDirs {
		known[filepath.Join(defaultDir, name)] = true
	}
	err := filepath.WalkDir(defaultDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || known[filepath.Dir(p)] {
			return err
		}
		switch filepath.Ext(p) {
		case ".yaml", ".yml", ".json":
			t.Errorf("%s: in none of the directories this package checks, %v: a variant goes in variants, other manifests in otherDirs", p, slices.Sorted(maps.Keys(known)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestVariantsShareNames: every variant names its objects alike, so that
// applying one over another replaces it instead of running two agents
// on every node, and one deletes the other: the DaemonSet, the
// ConfigMaps, and the agent's service account (a variant may have more
// accounts: the blocks variant's plugins have their own).
func TestVariantsShareNames(t *testing.T) {
	def := loadFrom(t, defaultDir)
	defSA := def.daemonSets[0].Spec.Template.Spec.ServiceAccountName
	for _, v := range variants[1:] {
		m := loadFrom(t, v.dir)
		if m.daemonSets[0].Name != def.daemonSets[0].Name {
			t.Errorf("%s: DaemonSet %q, the default has %q", v.name, m.daemonSets[0].Name, def.daemonSets[0].Name)
		}
		if names, defNames := slices.Sorted(maps.Keys(m.configMaps)), slices.Sorted(maps.Keys(def.configMaps)); !slices.Equal(names, defNames) {
			t.Errorf("%s: ConfigMaps %v, the default has %v", v.name, names, defNames)
		}
		if sa := m.daemonSets[0].Spec.Template.Spec.ServiceAccountName; sa != defSA || m.serviceAccounts[sa] == nil {
			t.Errorf("%s: the agent runs as service account %q (shipped: %t), the default's as %q", v.name, sa, m.serviceAccounts[sa] != nil, defSA)
		}
	}
}

// TestDecodeRejects proves the decoder is as strict as the checks above
// assume.
func TestDecodeRejects(t *testing.T) {
	const ds = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\n  namespace: kube-system\n"
	tests := []struct {
		name, doc, want string
	}{
		{"unknown field", ds + "spec:\n  hostNetwork: true\n", `unknown field "spec.hostNetwork"`},
		{"field name case", ds + "spec:\n  template:\n    spec:\n      hostnetwork: true\n", `unknown field "spec.template.spec.hostnetwork"`},
		{"duplicate field", ds + "spec:\n  minReadySeconds: 1\n  minReadySeconds: 2\n", `already set`},
		{"removed API version", strings.Replace(ds, "apps/v1", "extensions/v1beta1", 1), `no kind "DaemonSet" is registered`},
		{"no kind", "apiVersion: v1\nmetadata:\n  name: x\n", `'Kind' is missing`},
		{"wrong type", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: [1]\n", `cannot unmarshal array`},
	}
	dec := decoder()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeDocument(dec, []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("decode: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}}
	obj, err := decodeDocument(dec, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  namespace: kube-system\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.add(obj); err == nil || !strings.Contains(err.Error(), "not one podnet ships") {
		t.Errorf("add(Pod) = %v, want a refusal of the kind", err)
	}
	if obj, err := decodeDocument(dec, []byte("# only a comment\n")); obj != nil || err != nil {
		t.Errorf("comment-only document = %v, %v; want nothing", obj, err)
	}
}
