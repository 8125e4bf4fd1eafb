package cluster

import (
	"context"
	_ "embed"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeRouterVersion is the kube-router release whose network policy
// controller is podnet's policy measurement peer: iptables and ipset,
// which this project's kernel has (kube-network-policies needs nft
// queue, which it lacks).
const KubeRouterVersion = "v2.1.0"

// KubeRouterImage is the image InstallKubeRouter builds and loads.
const KubeRouterImage = "podnet.test/kube-router:" + KubeRouterVersion

// KubeRouterNamespace and KubeRouterDaemonSet name the DaemonSet
// kuberouter.yaml creates; KubeRouterMetricsPort is its Prometheus port
// on each node (host network).
const (
	KubeRouterNamespace   = "kube-system"
	KubeRouterDaemonSet   = "kube-router"
	KubeRouterMetricsPort = 20245
)

//go:embed kuberouter.yaml
var kubeRouterYAML []byte

var kubeRouterInstall = goInstall{
	what: "kube-router", dir: "kube-router-" + KubeRouterVersion, version: KubeRouterVersion,
	pkgs: []string{"github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"},
	// As its Makefile does: without a version it logs "Malformed
	// version" at start.
	ldflags: "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=" + KubeRouterVersion,
}

// KubeRouter returns the path of kube-router KubeRouterVersion, built
// from the Go module proxy into the cache beside the Kubernetes binaries
// (static; about a minute the first time) unless a build by the same
// toolchain is there.
func KubeRouter(logf func(string, ...any)) (string, error) {
	bin, err := kubeRouterInstall.bin(logf)
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, "kube-router"), nil
}

// kubeRouterManifests decodes kuberouter.yaml strictly, as LoadManifests
// does a variant's.
func kubeRouterManifests() (*Manifests, error) {
	m := &Manifests{}
	for i, doc := range documentSeparator.Split(string(kubeRouterYAML), -1) {
		if err := m.add([]byte(doc)); err != nil {
			return nil, fmt.Errorf("kuberouter.yaml, document %d: %w", i+1, err)
		}
	}
	if m.DaemonSet == nil || m.ConfigMap != nil {
		return nil, fmt.Errorf("kuberouter.yaml: want a DaemonSet and no ConfigMap")
	}
	return m, nil
}

// InstallKubeRouter builds kube-router's image, loads it into every
// node's containerd and creates its service account, RBAC and
// DaemonSet: the network policy controller alone (no router, no service
// proxy) on every node, in the host network, as a user runs it beside
// another CNI. It returns once every node's kube-router pod is Ready.
// The cluster's CNI is the caller's (podnet with --network-policy off
// is the combination measured).
func (c *Cluster) InstallKubeRouter(ctx context.Context, logf func(string, ...any)) error {
	m, err := kubeRouterManifests()
	if err != nil {
		return err
	}
	prog, err := KubeRouter(logf)
	if err != nil {
		return err
	}
	archive := filepath.Join(c.Dir, "images/kube-router.tar")
	if err := writeKubeRouterImage(logf, prog, archive); err != nil {
		return err
	}
	if err := c.LoadImages(archive); err != nil {
		return err
	}
	if err := c.applyAccess(ctx, m); err != nil {
		return err
	}
	if _, err := c.Client.AppsV1().DaemonSets(KubeRouterNamespace).Create(ctx, m.DaemonSet, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("daemonset kube-router: %w", err)
	}
	return c.WaitKubeRouterReady(ctx, 3*time.Minute)
}

// WaitKubeRouterReady waits until kube-router's DaemonSet has a Ready,
// up-to-date pod on every node.
func (c *Cluster) WaitKubeRouterReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ds, err := c.Client.AppsV1().DaemonSets(KubeRouterNamespace).Get(ctx, KubeRouterDaemonSet, metav1.GetOptions{})
		if err == nil {
			st := ds.Status
			if st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled == int32(len(c.Nodes)) &&
				st.NumberReady == st.DesiredNumberScheduled && st.UpdatedNumberScheduled == st.DesiredNumberScheduled {
				return nil
			}
			err = fmt.Errorf("%d of %d ready, %d updated", st.NumberReady, st.DesiredNumberScheduled, st.UpdatedNumberScheduled)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-router not ready on every node in %s: %v", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-router not ready on every node: %w (%v)", ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
