package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ClusterCIDR is kube-controller-manager's --cluster-cidr: every Node's
// spec.podCIDRs is a /24 of it. The node-CIDR manifests ship it as their
// cluster_cidr.
const ClusterCIDR = "10.244.0.0/16"

// NodeCIDRManifests are deploy/kubernetes/node-cidr/*.yaml, decoded: the
// etcd model's objects and the agent's RBAC.
type NodeCIDRManifests struct {
	Manifests
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
}

var documentSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// LoadNodeCIDRManifests decodes the node-CIDR model's manifests strictly.
func (c *Cluster) LoadNodeCIDRManifests() (*NodeCIDRManifests, error) {
	dir := filepath.Join(c.ModuleRoot, "deploy/kubernetes/node-cidr")
	m := &NodeCIDRManifests{
		Manifests:   Manifests{ServiceAccount: &corev1.ServiceAccount{}, ConfigMap: &corev1.ConfigMap{}, DaemonSet: &appsv1.DaemonSet{}},
		ClusterRole: &rbacv1.ClusterRole{}, ClusterRoleBinding: &rbacv1.ClusterRoleBinding{},
	}
	files := []struct {
		file string
		objs []any
	}{
		{"serviceaccount.yaml", []any{m.ServiceAccount}},
		{"rbac.yaml", []any{m.ClusterRole, m.ClusterRoleBinding}},
		{"configmap.yaml", []any{m.ConfigMap}},
		{"daemonset.yaml", []any{m.DaemonSet}},
	}
	for _, f := range files {
		path := filepath.Join(dir, f.file)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		docs := documentSeparator.Split(string(data), -1)
		if len(docs) != len(f.objs) {
			return nil, fmt.Errorf("%s: %d documents, want %d", path, len(docs), len(f.objs))
		}
		for i, obj := range f.objs {
			if err := yaml.UnmarshalStrict([]byte(docs[i]), obj); err != nil {
				return nil, fmt.Errorf("%s, document %d: %w", path, i+1, err)
			}
		}
	}
	return m, nil
}

// LocalizeNodeCIDR makes the one edit a user of this cluster makes: the
// image is the one built locally (never pulled). The cluster CIDR must
// already be this cluster's; everything else is verbatim.
func (c *Cluster) LocalizeNodeCIDR(m *NodeCIDRManifests) error {
	if got := m.ConfigMap.Data["cluster_cidr"]; got != ClusterCIDR {
		return fmt.Errorf("node-cidr/configmap.yaml: cluster_cidr is %q, want the controller manager's %q", got, ClusterCIDR)
	}
	localImage(&m.DaemonSet.Spec.Template.Spec)
	return nil
}

// ApplyNodeCIDR creates the objects, RBAC first (the cluster is new:
// create is apply).
func (c *Cluster) ApplyNodeCIDR(ctx context.Context, m *NodeCIDRManifests) error {
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, m.ClusterRole, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("clusterrole %s: %w", m.ClusterRole.Name, err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, m.ClusterRoleBinding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("clusterrolebinding %s: %w", m.ClusterRoleBinding.Name, err)
	}
	return c.Apply(ctx, &m.Manifests)
}

// localImage runs every container of spec on the image built locally.
func localImage(spec *corev1.PodSpec) {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].Image = PodnetImage
			cs[i].ImagePullPolicy = corev1.PullNever
		}
	}
}
