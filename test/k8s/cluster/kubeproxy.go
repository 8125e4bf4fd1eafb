package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// KubernetesServiceIP is the ClusterIP of the default/kubernetes Service
// (the first address of ServiceCIDR), which the kubelet puts in every
// pod's KUBERNETES_SERVICE_HOST, host-network pods' too.
const KubernetesServiceIP = "10.96.0.1"

// ServiceCIDR is kube-apiserver's --service-cluster-ip-range.
const ServiceCIDR = "10.96.0.0/24"

// ProxyMode is kube-proxy's --proxy-mode.
type ProxyMode string

const (
	// ProxyIPTables is kube-proxy's default mode in Kubernetes 1.34.
	ProxyIPTables ProxyMode = "iptables"
	// ProxyNFTables is the mode that programs nftables directly.
	ProxyNFTables ProxyMode = "nftables"
)

// proxyModeEnv chooses the mode when no WithProxyMode option does.
const proxyModeEnv = "PODNET_K8S_PROXY_MODE"

// WithProxyMode runs every node's kube-proxy in mode m, whatever
// PODNET_K8S_PROXY_MODE says.
func WithProxyMode(m ProxyMode) Option { return func(o *options) { o.proxyMode = m } }

// proxyMode is the mode the options or the environment ask for, else
// kube-proxy's own default.
func proxyMode(o options) (ProxyMode, error) {
	m := o.proxyMode
	if m == "" {
		m = ProxyMode(os.Getenv(proxyModeEnv))
	}
	switch m {
	case "":
		return ProxyIPTables, nil
	case ProxyIPTables, ProxyNFTables:
		return m, nil
	}
	return "", fmt.Errorf("%s=%q: kube-proxy modes here are %q and %q", proxyModeEnv, m, ProxyIPTables, ProxyNFTables)
}

// ProxyMode is the mode the cluster's kube-proxies run in.
func (c *Cluster) ProxyMode() ProxyMode { return c.proxyMode }

// kubeProxyHealthzPort is kube-proxy's default healthz port.
const kubeProxyHealthzPort = "10256"

// startKubeProxy runs the node's kube-proxy as a kubeadm node does: in
// the host network (the node's namespaces), with a kubeconfig of its own
// whose identity, system:kube-proxy, the API server's bootstrap RBAC
// binds to system:node-proxier, and --cluster-cidr the pod range the
// manifests ship. It waits until kube-proxy has programmed the Services
// once (its healthz answers 200).
func (c *Cluster) startKubeProxy(n *Node) error {
	dir := filepath.Join(n.Root, "kube-proxy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.writeKubeconfigFor(kubeconfig, "kube-proxy"); err != nil {
		return err
	}
	conf := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(conf, []byte(kubeProxyConfig(n, c.proxyMode, kubeconfig)), 0o644); err != nil {
		return err
	}
	name := n.procName("kube-proxy")
	if err := c.start(name, n.place(), nil, filepath.Join(c.kubeBin, "kube-proxy"), "--config="+conf, "-v=2"); err != nil {
		return err
	}
	hc := n.HTTPClient(2 * time.Second)
	return c.waitFor(name, 2*time.Minute, func() error {
		resp, err := hc.Get("http://" + net.JoinHostPort(n.IP, kubeProxyHealthzPort) + "/healthz")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status + ": " + string(body))
		}
		return nil
	})
}

// kubeProxyConfig is kube-proxy's configuration file. What it leaves
// alone differs from a real node's in one way: conntrack.maxPerCore 0
// keeps it from setting nf_conntrack_max, which is one value for the
// whole machine (not per network namespace) and not the test's to
// change; the conntrack timeouts it sets are per namespace, the node's.
func kubeProxyConfig(n *Node, mode ProxyMode, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
mode: %s
clusterCIDR: %s
bindAddress: %s
healthzBindAddress: 0.0.0.0:%s
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
`, kubeconfig, n.Name, mode, ClusterCIDR, n.IP, kubeProxyHealthzPort)
}
