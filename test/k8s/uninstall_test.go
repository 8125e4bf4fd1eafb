package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/podnet/podnet/test/k8s/cluster"
)

// uninstallObjects are deploy/kubernetes/uninstall's objects, decoded
// strictly, the image made the local one.
type uninstallObjects struct {
	sa      *corev1.ServiceAccount
	role    *rbacv1.ClusterRole
	binding *rbacv1.ClusterRoleBinding
	ds      *appsv1.DaemonSet
}

func loadUninstall(t *testing.T, c *cluster.Cluster) *uninstallObjects {
	t.Helper()
	dir := filepath.Join(c.ModuleRoot, "deploy", "kubernetes", "uninstall")
	o := &uninstallObjects{sa: &corev1.ServiceAccount{}, role: &rbacv1.ClusterRole{}, binding: &rbacv1.ClusterRoleBinding{}, ds: &appsv1.DaemonSet{}}
	for _, f := range []struct {
		file string
		objs []any
	}{{"serviceaccount.yaml", []any{o.sa}}, {"rbac.yaml", []any{o.role, o.binding}}, {"daemonset.yaml", []any{o.ds}}} {
		data, err := os.ReadFile(filepath.Join(dir, f.file))
		if err != nil {
			t.Fatal(err)
		}
		docs := strings.Split(string(data), "\n---\n")
		if len(docs) != len(f.objs) {
			t.Fatalf("%s: %d documents, want %d", f.file, len(docs), len(f.objs))
		}
		for i, doc := range docs {
			if err := yaml.UnmarshalStrict([]byte(doc), f.objs[i]); err != nil {
				t.Fatalf("%s: %v", f.file, err)
			}
		}
	}
	for i := range o.ds.Spec.Template.Spec.Containers {
		o.ds.Spec.Template.Spec.Containers[i].Image = cluster.PodnetImage
		o.ds.Spec.Template.Spec.Containers[i].ImagePullPolicy = corev1.PullNever
	}
	return o
}

func (o *uninstallObjects) apply(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if _, err := c.Client.CoreV1().ServiceAccounts(o.sa.Namespace).Create(ctx, o.sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, o.role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, o.binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().DaemonSets(o.ds.Namespace).Create(ctx, o.ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (o *uninstallObjects) delete(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	fg := metav1.DeletePropagationForeground
	errs := []error{
		c.Client.AppsV1().DaemonSets(o.ds.Namespace).Delete(ctx, o.ds.Name, metav1.DeleteOptions{PropagationPolicy: &fg}),
		c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, o.binding.Name, metav1.DeleteOptions{}),
		c.Client.RbacV1().ClusterRoles().Delete(ctx, o.role.Name, metav1.DeleteOptions{}),
		c.Client.CoreV1().ServiceAccounts(o.sa.Namespace).Delete(ctx, o.sa.Name, metav1.DeleteOptions{}),
	}
	for _, err := range errs {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitPodsGone(ctx, t, c, "app.kubernetes.io/name="+o.ds.Name)
}

// waitPodsGone waits until no pod of kube-system matches sel.
func waitPodsGone(ctx context.Context, t *testing.T, c *cluster.Cluster, sel string) {
	t.Helper()
	waitUntil(ctx, t, "pods "+sel+" gone", 2*time.Minute, func() error {
		l, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d left", len(l.Items))
		}
		return nil
	})
}

// The foreign CNI files planted on every node before removal.
const (
	foreignConf   = "99-foreign.conflist"
	foreignPlugin = "foreign-cni"
	foreignBody   = `{"cniVersion":"1.0.0","name":"foreign","plugins":[{"type":"foreign-cni"}]}`
)

// TestUninstall: podnet deployed from deploy/kubernetes on two nodes,
// pods talking across them; the DaemonSet deleted and
// deploy/kubernetes/uninstall applied: once its pods are ready, no node
// has any podnet link, route, table, config, plugin, state or
// annotation, a foreign CNI's files planted beside podnet's are
// untouched, and running pods keep their veths; then podnet applied
// again: the nodes turn Ready and new pods talk across them.
func TestUninstall(t *testing.T) {
	c := cluster.Start(t, cluster.WithNodes(2))
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	deployPodnet(ctx, t, c, cluster.Default, nil)
	servers := diagServers(ctx, t, c, "a")
	crossNodeTraffic(ctx, t, c, servers, "before", "via %s dev underlay0")
	for _, n := range c.Nodes {
		for path, body := range map[string]string{filepath.Join(n.CNIConfDir, foreignConf): foreignBody, filepath.Join(n.CNIBinDir, foreignPlugin): "#!/bin/sh\nexit 1\n"} {
			if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}

	m, err := c.LoadManifests(cluster.Default)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Localize(m); err != nil {
		t.Fatal(err)
	}
	fg := metav1.DeletePropagationForeground
	if err := c.Client.AppsV1().DaemonSets(m.DaemonSet.Namespace).Delete(ctx, m.DaemonSet.Name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	waitPodsGone(ctx, t, c, agentSelector)
	un := loadUninstall(t, c)
	un.apply(ctx, t, c)
	waitUntil(ctx, t, "every podnet-uninstall pod ready", 4*time.Minute, func() error {
		ds, err := c.Client.AppsV1().DaemonSets(un.ds.Namespace).Get(ctx, un.ds.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := ds.Status; st.DesiredNumberScheduled != int32(len(c.Nodes)) || st.NumberReady != st.DesiredNumberScheduled {
			return fmt.Errorf("%d of %d ready", st.NumberReady, st.DesiredNumberScheduled)
		}
		return nil
	})
	for i, n := range c.Nodes {
		nodeHasNoPodnet(ctx, t, c, n, servers[i])
	}
	un.delete(ctx, t, c)

	// Applied again (kubectl apply: the DaemonSet is what changed).
	if _, err := c.Client.AppsV1().DaemonSets(m.DaemonSet.Namespace).Create(ctx, m.DaemonSet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		waitNodeReady(ctx, t, c, n.Name, 3*time.Minute)
	}
	waitAgentReady(ctx, t, c, "")
	// The pods that ran through the removal go before new ones come:
	// the node's IPAM starts afresh and would hand their addresses out
	// again (ADD refuses an address still routed to a veth).
	for _, p := range servers {
		if err := c.Client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPodGone(ctx, t, c, p.Name)
	}
	crossNodeTraffic(ctx, t, c, diagServers(ctx, t, c, "b"), "after", "via %s dev underlay0")
}

// diagServers starts a diag server on every node and returns them.
func diagServers(ctx context.Context, t *testing.T, c *cluster.Cluster, tag string) []*corev1.Pod {
	t.Helper()
	var out []*corev1.Pod
	for _, n := range c.Nodes {
		name := fmt.Sprintf("diag-srv-%s-%s", tag, n.Name)
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, onNode(n, diagPod(name, "serve", "--listen", fmt.Sprintf(":%d", diagPort))), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		out = append(out, waitPod(ctx, t, c, name, corev1.PodRunning))
	}
	return out
}

// nodeHasNoPodnet checks n after removal: nothing of podnet in its conf
// and bin dirs, state and run dirs, links, routes, nftables tables and
// Node annotations; the foreign CNI's files as planted; the running
// pod's host veth still there.
func nodeHasNoPodnet(ctx context.Context, t *testing.T, c *cluster.Cluster, n *cluster.Node, running *corev1.Pod) {
	t.Helper()
	dirEntries := func(dir string) []string {
		es, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	if got := dirEntries(n.CNIConfDir); !slices.Equal(got, []string{foreignConf}) {
		t.Errorf("%s: /etc/cni/net.d holds %v, want only %s", n.Name, got, foreignConf)
	}
	if b, err := os.ReadFile(filepath.Join(n.CNIConfDir, foreignConf)); err != nil || string(b) != foreignBody {
		t.Errorf("%s: the foreign config changed: %q %v", n.Name, b, err)
	}
	if got := dirEntries(n.CNIBinDir); !slices.Contains(got, foreignPlugin) || slices.ContainsFunc(got, func(s string) bool {
		return s == "loopback" || strings.HasPrefix(s, "podnet")
	}) {
		t.Errorf("%s: /opt/cni/bin holds %v: want %s and no plugin of podnet's", n.Name, got, foreignPlugin)
	}
	for _, d := range []string{"/var/lib/podnet", "/run/podnet"} {
		if got := dirEntries(n.HostPath(d)); len(got) != 0 {
			t.Errorf("%s: %s holds %v", n.Name, d, got)
		}
	}
	if out, err := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-o", "link", "show", "dev", "podnet.vxlan").CombinedOutput(); err == nil {
		t.Errorf("%s: podnet.vxlan left: %s", n.Name, out)
	}
	for _, check := range []struct {
		args []string
		bad  func(string) bool
	}{
		{[]string{"ip", "-4", "route", "show", "table", "all", "proto", "97"}, func(out string) bool { return strings.TrimSpace(out) != "" }},
		{[]string{"ip", "-6", "route", "show", "table", "all", "proto", "97"}, func(out string) bool { return strings.TrimSpace(out) != "" }},
		{[]string{"nft", "list", "tables"}, func(out string) bool { return strings.Contains(out, " podnet") }},
	} {
		out, _ := exec.Command("nsenter", append([]string{"--net=" + n.NetNS}, check.args...)...).CombinedOutput()
		if check.bad(string(out)) {
			t.Errorf("%s: %s:\n%s", n.Name, strings.Join(check.args, " "), out)
		}
	}
	links, _ := exec.Command("nsenter", "--net="+n.NetNS, "ip", "-o", "link", "show", "type", "veth").CombinedOutput()
	if strings.Count(string(links), " pn") == 0 {
		t.Errorf("%s: the running pod %s's host veth went:\n%s", n.Name, running.Name, links)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range node.Annotations {
		if strings.HasPrefix(k, "podnet.io/") {
			t.Errorf("%s: annotation %s left", n.Name, k)
		}
	}
}
