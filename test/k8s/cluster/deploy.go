package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// shippedEtcd is the placeholder etcd endpoint in the shipped ConfigMap.
const shippedEtcd = "192.0.2.10:2379"

// Manifests are deploy/kubernetes/*.yaml, decoded.
type Manifests struct {
	ServiceAccount *corev1.ServiceAccount
	ConfigMap      *corev1.ConfigMap
	DaemonSet      *appsv1.DaemonSet
}

// LoadManifests decodes the shipped manifests strictly.
func (c *Cluster) LoadManifests() (*Manifests, error) {
	dir := filepath.Join(c.ModuleRoot, "deploy/kubernetes")
	m := &Manifests{ServiceAccount: &corev1.ServiceAccount{}, ConfigMap: &corev1.ConfigMap{}, DaemonSet: &appsv1.DaemonSet{}}
	for file, obj := range map[string]any{
		"serviceaccount.yaml": m.ServiceAccount, "configmap.yaml": m.ConfigMap, "daemonset.yaml": m.DaemonSet,
	} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, file), err)
		}
	}
	return m, nil
}

// Localize makes the edits a user of this cluster makes before applying:
// the image is the one built locally (never pulled) and etcd is the
// cluster's. The conflist is otherwise verbatim, and so are the
// DaemonSet's hostPaths: each node's kubelet and containerd see their own
// directories at /opt/cni/bin, /etc/cni/net.d and the rest (see
// nodeHostPaths).
func (c *Cluster) Localize(m *Manifests) error {
	cm := m.ConfigMap
	if cm.Data["etcd_endpoints"] != shippedEtcd {
		return fmt.Errorf("configmap.yaml: etcd_endpoints is %q, want the placeholder %q", cm.Data["etcd_endpoints"], shippedEtcd)
	}
	cm.Data["etcd_endpoints"] = EtcdEndpoint
	conf := cm.Data["10-podnet.conflist"]
	if !strings.Contains(conf, "etcd://"+shippedEtcd) {
		return fmt.Errorf("configmap.yaml: 10-podnet.conflist has no etcd://%s store", shippedEtcd)
	}
	cm.Data["10-podnet.conflist"] = strings.ReplaceAll(conf, "etcd://"+shippedEtcd, "etcd://"+EtcdEndpoint)
	spec := &m.DaemonSet.Spec.Template.Spec
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].Image = PodnetImage
			cs[i].ImagePullPolicy = corev1.PullNever
		}
	}
	return nil
}

// Apply creates the objects (the cluster is new: create is apply).
func (c *Cluster) Apply(ctx context.Context, m *Manifests) error {
	if _, err := c.Client.CoreV1().ServiceAccounts(m.ServiceAccount.Namespace).Create(ctx, m.ServiceAccount, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("serviceaccount %s: %w", m.ServiceAccount.Name, err)
	}
	if _, err := c.Client.CoreV1().ConfigMaps(m.ConfigMap.Namespace).Create(ctx, m.ConfigMap, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("configmap %s: %w", m.ConfigMap.Name, err)
	}
	if _, err := c.Client.AppsV1().DaemonSets(m.DaemonSet.Namespace).Create(ctx, m.DaemonSet, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("daemonset %s: %w", m.DaemonSet.Name, err)
	}
	return nil
}

// Deploy applies deploy/kubernetes as a user of this cluster would:
// decoded strictly, localized, changed by edit when it is not nil (a
// user's tuning of the shipped objects), created through the API.
func (c *Cluster) Deploy(ctx context.Context, edit func(*Manifests)) error {
	m, err := c.LoadManifests()
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
