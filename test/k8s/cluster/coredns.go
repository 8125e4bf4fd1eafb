package cluster

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/podnet/podnet/test/k8s/ociimage"
)

const (
	// CoreDNSVersion is the CoreDNS release the cluster's DNS runs, the
	// one dnsbuild/go.mod requires (coredns_test.go checks they agree).
	CoreDNSVersion = "v1.15.0"
	// CoreDNSImage is the image coredns.yaml names, assembled here.
	CoreDNSImage = "podnet.test/coredns:" + CoreDNSVersion
	// DNSServiceIP is the kube-dns Service's ClusterIP (kubeadm's choice,
	// the tenth address of --service-cluster-ip-range), which every
	// kubelet writes into its ClusterFirst pods' resolv.conf.
	DNSServiceIP = "10.96.0.10"
	// ClusterDomain is the DNS domain of the cluster's Services and pods.
	ClusterDomain = "cluster.local"
)

// corednsYAML is the DNS add-on DeployDNS applies.
//
//go:embed coredns.yaml
var corednsYAML []byte

// corednsBuild is the wrapper module CoreDNS is built from, and its main
// package: CoreDNS with only the plugins coredns.yaml's Corefile uses
// (dnsbuild/coredns/main.go says which).
const (
	corednsBuild = "dnsbuild"
	corednsPkg   = "github.com/podnet/podnet/test/k8s/dnsbuild/coredns"
)

// CoreDNSBinary returns the path of a static coredns at CoreDNSVersion,
// built from dnsbuild/ into the cache beside the Kubernetes binaries
// (coredns-<version> below the cache root) unless the cache holds a build
// of the same wrapper module by the same toolchain (as KubeBinaries does:
// under a lock, the stamp written last). Only the plugins the Corefile
// uses are compiled in, so a cold build downloads and compiles a fraction
// of what a full CoreDNS needs, and the program has no plugin that could
// send a query off the machine.
func CoreDNSBinary(logf func(string, ...any)) (string, error) {
	b, err := newCachedBuild("CoreDNS "+CoreDNSVersion, corednsBuild, "coredns-"+CoreDNSVersion)
	if err != nil {
		return "", err
	}
	b.pkgs = []string{corednsPkg}
	bin, err := b.get(logf)
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, b.commands()[0]), nil
}

// writeCoreDNSImage writes CoreDNSImage, the coredns program alone, as
// an archive the nodes' containerd imports (as the pause image is made).
func writeCoreDNSImage(bin, archive string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	err = ociimage.Write(f, ociimage.Image{
		Name: CoreDNSImage, Entrypoint: []string{"/coredns"},
		Cmd:   []string{"-conf", "/etc/coredns/Corefile"},
		Files: []ociimage.File{{Path: "/coredns", Mode: 0o755, Data: data}},
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// DNSAddon is the cluster's DNS as coredns.yaml has it, decoded.
type DNSAddon struct {
	ServiceAccount     *corev1.ServiceAccount
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	ConfigMap          *corev1.ConfigMap
	Deployment         *appsv1.Deployment
	Service            *corev1.Service
}

// Corefile is the CoreDNS configuration the add-on ships.
func (a *DNSAddon) Corefile() string { return a.ConfigMap.Data["Corefile"] }

// LoadDNSAddon decodes coredns.yaml strictly: every object exactly once,
// and no other kind.
func LoadDNSAddon() (*DNSAddon, error) {
	a := &DNSAddon{}
	for i, doc := range documentSeparator.Split(string(corednsYAML), -1) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("coredns.yaml, document %d: %w", i+1, err)
		}
		var err error
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ServiceAccount":
			err = decodeOnce(&a.ServiceAccount, doc)
		case "rbac.authorization.k8s.io/v1 ClusterRole":
			err = decodeOnce(&a.ClusterRole, doc)
		case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
			err = decodeOnce(&a.ClusterRoleBinding, doc)
		case "v1 ConfigMap":
			err = decodeOnce(&a.ConfigMap, doc)
		case "apps/v1 Deployment":
			err = decodeOnce(&a.Deployment, doc)
		case "v1 Service":
			err = decodeOnce(&a.Service, doc)
		default:
			err = errors.New("not a kind of the DNS add-on")
		}
		if err != nil {
			return nil, fmt.Errorf("coredns.yaml, document %d (%s %s): %w", i+1, tm.APIVersion, tm.Kind, err)
		}
	}
	if a.ServiceAccount == nil || a.ClusterRole == nil || a.ClusterRoleBinding == nil || a.ConfigMap == nil ||
		a.Deployment == nil || a.Service == nil {
		return nil, errors.New("coredns.yaml: want a ServiceAccount, ClusterRole, ClusterRoleBinding, ConfigMap, Deployment and Service")
	}
	return a, nil
}

// decodeOnce decodes doc strictly into a new *dst, which must be the
// first of its kind.
func decodeOnce[T any](dst **T, doc string) error {
	if *dst != nil {
		return errors.New("a second one")
	}
	*dst = new(T)
	return yaml.UnmarshalStrict([]byte(doc), *dst)
}

// DeployDNS installs CoreDNSVersion, applies the DNS add-on (coredns.yaml)
// and waits until every replica of its Deployment is Ready, which takes
// pods, so podnet must be deployed first. The kube-dns Service gets
// DNSServiceIP, where the kubelets send their ClusterFirst pods' queries.
// CoreDNS finds the API server at the kubernetes Service, as any pod with
// an in-cluster config does. Nothing it is configured to answer leaves
// the cluster: a name outside ClusterDomain and the reverse zones is
// NXDOMAIN.
func (c *Cluster) DeployDNS(ctx context.Context) error {
	a, err := LoadDNSAddon()
	if err != nil {
		return err
	}
	bin, err := CoreDNSBinary(c.t.Logf)
	if err != nil {
		return err
	}
	archive := filepath.Join(c.Dir, "images/coredns.tar")
	if err := writeCoreDNSImage(bin, archive); err != nil {
		return err
	}
	if err := c.LoadImages(archive); err != nil {
		return err
	}
	if err := c.applyDNSAddon(ctx, a); err != nil {
		return err
	}
	start := time.Now()
	if err := c.waitDeploymentReady(ctx, a.Deployment, 3*time.Minute); err != nil {
		return err
	}
	c.t.Logf("cluster: CoreDNS %s Ready in %s", CoreDNSVersion, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// applyDNSAddon creates the objects, the ones the pods need first (the
// cluster is new: create is apply).
func (c *Cluster) applyDNSAddon(ctx context.Context, a *DNSAddon) error {
	cl := c.Client
	for _, create := range []struct {
		what string
		fn   func() error
	}{
		{"serviceaccount", func() error {
			_, err := cl.CoreV1().ServiceAccounts(a.ServiceAccount.Namespace).Create(ctx, a.ServiceAccount, metav1.CreateOptions{})
			return err
		}},
		{"clusterrole", func() error {
			_, err := cl.RbacV1().ClusterRoles().Create(ctx, a.ClusterRole, metav1.CreateOptions{})
			return err
		}},
		{"clusterrolebinding", func() error {
			_, err := cl.RbacV1().ClusterRoleBindings().Create(ctx, a.ClusterRoleBinding, metav1.CreateOptions{})
			return err
		}},
		{"configmap", func() error {
			_, err := cl.CoreV1().ConfigMaps(a.ConfigMap.Namespace).Create(ctx, a.ConfigMap, metav1.CreateOptions{})
			return err
		}},
		{"service", func() error {
			_, err := cl.CoreV1().Services(a.Service.Namespace).Create(ctx, a.Service, metav1.CreateOptions{})
			return err
		}},
		{"deployment", func() error {
			_, err := cl.AppsV1().Deployments(a.Deployment.Namespace).Create(ctx, a.Deployment, metav1.CreateOptions{})
			return err
		}},
	} {
		if err := create.fn(); err != nil {
			return fmt.Errorf("DNS add-on: %s: %w", create.what, err)
		}
	}
	return nil
}

// waitDeploymentReady waits until the Deployment's controller has seen
// its spec and every replica it wants is Ready; past timeout it says
// where each pod stands.
func (c *Cluster) waitDeploymentReady(ctx context.Context, d *appsv1.Deployment, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		got, err := c.Client.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		if err == nil {
			want := int32(1)
			if got.Spec.Replicas != nil {
				want = *got.Spec.Replicas
			}
			st := got.Status
			if st.ObservedGeneration >= got.Generation && st.UpdatedReplicas == want && st.ReadyReplicas == want {
				return nil
			}
			last = fmt.Sprintf("%d of %d replicas Ready", st.ReadyReplicas, want)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deployment %s/%s not Ready after %s: %s%s", d.Namespace, d.Name, timeout, last,
				c.podsSummary(d.Namespace, d.Spec.Selector))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// podsSummary says where each pod the selector picks stands, for an error
// message.
func (c *Cluster) podsSummary(ns string, sel *metav1.LabelSelector) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(sel)})
	if err != nil {
		return "; pods: " + err.Error()
	}
	var lines []string
	for _, p := range pods.Items {
		s := fmt.Sprintf("%s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue && cond.Message != "" {
				s += fmt.Sprintf(", %s: %s", cond.Type, cond.Message)
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				s += fmt.Sprintf(", %s waiting: %s %s", cs.Name, w.Reason, w.Message)
			}
			if cs.RestartCount > 0 {
				s += fmt.Sprintf(", %s restarted %d times", cs.Name, cs.RestartCount)
			}
		}
		lines = append(lines, s)
	}
	sort.Strings(lines)
	return "\n\t" + strings.Join(lines, "\n\t")
}
