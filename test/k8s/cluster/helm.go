package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// HelmRelease is the release name and namespace of HelmInstall.
const (
	HelmRelease   = "podnet"
	helmNamespace = "kube-system"
)

// restGetter gives Helm the cluster's own client config, whose Dial
// enters the first node's network namespace, where the API server
// listens (a kubeconfig file cannot say that).
type restGetter struct{ cfg *rest.Config }

func (g restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(g.cfg))
	if err != nil {
		return nil, err
	}
	return memory.NewMemCacheClient(dc), nil
}

func (g restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil), nil
}

func (g restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(),
		&clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: helmNamespace}})
}

// helmAction is Helm's action configuration for this cluster, releases
// kept as Secrets in kube-system, as the helm CLI keeps them.
func (c *Cluster) helmAction() (*action.Configuration, error) {
	cfg := new(action.Configuration)
	logf := func(format string, v ...any) { c.t.Logf("helm: "+format, v...) }
	if err := cfg.Init(restGetter{c.Config}, helmNamespace, "secret", logf); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// HelmValues are the values a user of this cluster sets: the image built
// locally, never pulled. The chart's defaults otherwise (its pools are
// ClusterCIDR, the controller manager's).
func HelmValues() map[string]any {
	repo, tag, _ := strings.Cut(PodnetImage, ":")
	return map[string]any{"image": map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"}}
}

// HelmInstall installs deploy/helm/podnet with Helm's Go SDK as `helm
// install podnet deploy/helm/podnet -n kube-system` does, with vals, and
// remembers the variant it rendered as the one deployed (see
// IPAMStoreSpec). It does not wait for the pods.
func (c *Cluster) HelmInstall(ctx context.Context, vals map[string]any) (*release.Release, error) {
	cfg, ch, err := c.helmChart()
	if err != nil {
		return nil, err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace = HelmRelease, helmNamespace
	rel, err := in.RunWithContext(ctx, ch, vals)
	if err != nil {
		return nil, fmt.Errorf("helm install: %w", err)
	}
	return rel, c.noteDeployed(rel)
}

// HelmUpgrade upgrades the release as `helm upgrade --reuse-values` does,
// with vals on top of the values it was installed with.
func (c *Cluster) HelmUpgrade(ctx context.Context, vals map[string]any) (*release.Release, error) {
	cfg, ch, err := c.helmChart()
	if err != nil {
		return nil, err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.ReuseValues = helmNamespace, true
	rel, err := up.RunWithContext(ctx, HelmRelease, ch, vals)
	if err != nil {
		return nil, fmt.Errorf("helm upgrade: %w", err)
	}
	return rel, c.noteDeployed(rel)
}

// HelmUninstall uninstalls the release as `helm uninstall` does.
func (c *Cluster) HelmUninstall() error {
	cfg, err := c.helmAction()
	if err != nil {
		return err
	}
	if _, err := action.NewUninstall(cfg).Run(HelmRelease); err != nil {
		return fmt.Errorf("helm uninstall: %w", err)
	}
	return nil
}

// noteDeployed decodes the release's manifest as LoadManifests decodes
// a directory (CRDs aside) and records its IPAM store.
func (c *Cluster) noteDeployed(rel *release.Release) error {
	m := &Manifests{Variant: Default}
	for i, doc := range documentSeparator.Split(rel.Manifest, -1) {
		if strings.Contains(doc, "\nkind: CustomResourceDefinition\n") {
			continue
		}
		if err := m.add([]byte(doc)); err != nil {
			return fmt.Errorf("release %s, document %d: %w", rel.Name, i+1, err)
		}
	}
	if m.DaemonSet == nil {
		return fmt.Errorf("release %s: no DaemonSet", rel.Name)
	}
	store, err := ipamStoreOf(m)
	if err != nil {
		return err
	}
	c.deployed = store
	return nil
}

// helmChart is the action configuration for the cluster and the chart
// of deploy/helm/podnet, loaded from the module's tree.
func (c *Cluster) helmChart() (*action.Configuration, *chart.Chart, error) {
	cfg, err := c.helmAction()
	if err != nil {
		return nil, nil, err
	}
	ch, err := loader.Load(filepath.Join(c.ModuleRoot, "deploy/helm/podnet"))
	return cfg, ch, err
}
