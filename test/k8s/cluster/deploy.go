package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Variant is a directory of deploy/kubernetes: one whole deployment of
// podnet, which a user applies on its own.
type Variant string

const (
	// Default is deploy/kubernetes itself, what a user gets by default:
	// the Kubernetes API as datastore, each node's pods addressed from
	// its Node's spec.podCIDRs in a bbolt file on the node.
	Default Variant = "."
	// Etcd is deploy/kubernetes/etcd: the block IPAM and the node
	// registrations in the cluster's etcd.
	Etcd Variant = "etcd"
	// Blocks is deploy/kubernetes/blocks: block IPAM on the Kubernetes
	// API (model B), its objects the CRDs of deploy/kubernetes/crds,
	// which Apply creates first.
	Blocks Variant = "blocks"
)

func (v Variant) String() string {
	if v == Default {
		return "default"
	}
	return string(v)
}

// dir is the variant's directory under the repository root.
func (v Variant) dir(root string) string {
	return filepath.Join(root, "deploy/kubernetes", string(v))
}

// ClusterCIDR is kube-controller-manager's --cluster-cidr: every Node's
// spec.podCIDRs is a /24 of it. The default variant ships it as its
// cluster_cidr.
const ClusterCIDR = "10.244.0.0/16"

// shippedEtcd is the placeholder etcd endpoint in the etcd variant's
// ConfigMap.
const shippedEtcd = "192.0.2.10:2379"

// Manifests are one variant's *.yaml, decoded.
type Manifests struct {
	Variant             Variant
	ServiceAccounts     []*corev1.ServiceAccount
	ClusterRoles        []*rbacv1.ClusterRole
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	ConfigMap           *corev1.ConfigMap
	DaemonSet           *appsv1.DaemonSet
}

var documentSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// LoadManifests decodes the variant's manifests strictly, every *.yaml
// of its directory as `kubectl apply -f DIR/` reads them (not its
// subdirectories). A kind the harness does not know how to apply is an
// error, and so is a variant without exactly one ConfigMap and one
// DaemonSet.
func (c *Cluster) LoadManifests(v Variant) (*Manifests, error) {
	dir := v.dir(c.ModuleRoot)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("variant %s: no manifests in %s (%v)", v, dir, err)
	}
	m := &Manifests{Variant: v}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for i, doc := range documentSeparator.Split(string(data), -1) {
			if err := m.add([]byte(doc)); err != nil {
				return nil, fmt.Errorf("%s, document %d: %w", f, i+1, err)
			}
		}
	}
	if m.ConfigMap == nil || m.DaemonSet == nil {
		return nil, fmt.Errorf("variant %s (%s): want a ConfigMap and a DaemonSet", v, dir)
	}
	return m, nil
}

// add decodes one document strictly by its kind and files it.
func (m *Manifests) add(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	if tm.Kind == "" && tm.APIVersion == "" {
		if j, err := yaml.YAMLToJSON(doc); err == nil && string(j) == "null" {
			return nil // comments only
		}
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ServiceAccount":
		o := &corev1.ServiceAccount{}
		obj, m.ServiceAccounts = o, append(m.ServiceAccounts, o)
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		o := &rbacv1.ClusterRole{}
		obj, m.ClusterRoles = o, append(m.ClusterRoles, o)
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		o := &rbacv1.ClusterRoleBinding{}
		obj, m.ClusterRoleBindings = o, append(m.ClusterRoleBindings, o)
	case "v1 ConfigMap":
		if m.ConfigMap != nil {
			return fmt.Errorf("a second ConfigMap")
		}
		m.ConfigMap = &corev1.ConfigMap{}
		obj = m.ConfigMap
	case "apps/v1 DaemonSet":
		if m.DaemonSet != nil {
			return fmt.Errorf("a second DaemonSet")
		}
		m.DaemonSet = &appsv1.DaemonSet{}
		obj = m.DaemonSet
	default:
		return fmt.Errorf("%s %s: a kind the harness does not apply; add it to Manifests", tm.APIVersion, tm.Kind)
	}
	return yaml.UnmarshalStrict(doc, obj)
}

// Localize makes the edits a user of this cluster makes before applying:
// the image is the one built locally (never pulled), and for the etcd
// variant the etcd is the cluster's; the default's cluster_cidr must
// already be the controller manager's. The conflist is otherwise
// verbatim, and so are the DaemonSet's hostPaths: each node's kubelet
// and containerd see their own directories at /opt/cni/bin,
// /etc/cni/net.d and the rest (see nodeHostPaths).
func (c *Cluster) Localize(m *Manifests) error {
	cm := m.ConfigMap
	switch m.Variant {
	case Default:
		if got := cm.Data["cluster_cidr"]; got != ClusterCIDR {
			return fmt.Errorf("configmap.yaml: cluster_cidr is %q, want the controller manager's %q", got, ClusterCIDR)
		}
	case Etcd:
		if cm.Data["etcd_endpoints"] != shippedEtcd {
			return fmt.Errorf("etcd/configmap.yaml: etcd_endpoints is %q, want the placeholder %q", cm.Data["etcd_endpoints"], shippedEtcd)
		}
		cm.Data["etcd_endpoints"] = EtcdEndpoint
		conf := cm.Data["10-podnet.conflist"]
		if !strings.Contains(conf, "etcd://"+shippedEtcd) {
			return fmt.Errorf("etcd/configmap.yaml: 10-podnet.conflist has no etcd://%s store", shippedEtcd)
		}
		cm.Data["10-podnet.conflist"] = strings.ReplaceAll(conf, "etcd://"+shippedEtcd, "etcd://"+EtcdEndpoint)
	case Blocks:
		// Nothing but the image: the plugins reach the API server as the
		// agent does, at the kubernetes Service's address, which every
		// node's kube-proxy serves.
	default:
		return fmt.Errorf("variant %s: the harness knows no edits for it", m.Variant)
	}
	spec := &m.DaemonSet.Spec.Template.Spec
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].Image = PodnetImage
			cs[i].ImagePullPolicy = corev1.PullNever
		}
	}
	return nil
}

// Apply creates the objects, the ones the DaemonSet's pods need first
// (the cluster is new: create is apply), and remembers the variant as
// the one deployed (see IPAMStore). For Blocks it creates the podnet.io
// CRDs before anything else, as the variant's README says to; for the
// variants whose agent enforces policy (Default, Blocks), the
// ClusterNetworkPolicy CRD too, so that every cluster test and the
// conformance harness have it.
func (c *Cluster) Apply(ctx context.Context, m *Manifests) error {
	store, err := ipamStoreOf(m)
	if err != nil {
		return err
	}
	if m.Variant == Blocks {
		if err := c.ApplyIPAMCRDs(ctx); err != nil {
			return err
		}
	}
	if m.Variant == Default || m.Variant == Blocks {
		if err := c.ApplyClusterNetworkPolicyCRD(ctx); err != nil {
			return err
		}
	}
	if err := c.applyAccess(ctx, m); err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().ConfigMaps(m.ConfigMap.Namespace).Create(ctx, m.ConfigMap, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("configmap %s: %w", m.ConfigMap.Name, err)
	}
	if _, err := c.Client.AppsV1().DaemonSets(m.DaemonSet.Namespace).Create(ctx, m.DaemonSet, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("daemonset %s: %w", m.DaemonSet.Name, err)
	}
	c.deployed = store
	return nil
}

// applyAccess creates the service accounts and their RBAC.
func (c *Cluster) applyAccess(ctx context.Context, m *Manifests) error {
	for _, sa := range m.ServiceAccounts {
		if _, err := c.Client.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("serviceaccount %s: %w", sa.Name, err)
		}
	}
	for _, r := range m.ClusterRoles {
		if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("clusterrole %s: %w", r.Name, err)
		}
	}
	for _, b := range m.ClusterRoleBindings {
		if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("clusterrolebinding %s: %w", b.Name, err)
		}
	}
	return nil
}

// Deploy applies the variant as a user of this cluster would: decoded
// strictly, localized, changed by edit when it is not nil (a user's
// tuning of the shipped objects), created through the API.
func (c *Cluster) Deploy(ctx context.Context, v Variant, edit func(*Manifests)) error {
	m, err := c.LoadManifests(v)
	if err != nil {
		return err
	}
	if err := c.Localize(m); err != nil {
		return err
	}
	if edit != nil {
		edit(m)
	}
	return c.Apply(ctx, m)
}
