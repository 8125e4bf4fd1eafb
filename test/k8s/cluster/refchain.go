package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RefPluginsVersion is the containernetworking/plugins release of the
// reference chain podnet is compared with.
const RefPluginsVersion = "v1.9.1"

// RefNetwork is the reference chain's network name.
const RefNetwork = "refchain"

// refPlugins are the reference chain's plugins, by package: containerd
// execs loopback for every sandbox, the conflist names bridge and
// portmap, and bridge execs host-local.
var refPlugins = []string{
	"plugins/main/bridge", "plugins/main/loopback", "plugins/ipam/host-local", "plugins/meta/portmap",
}

// refPluginsInstall builds the reference plugins the way upstream
// releases them.
var refPluginsInstall = goInstall{
	what: "the reference CNI plugins", dir: "cni-plugins-" + RefPluginsVersion, version: RefPluginsVersion,
	pkgs: func() []string {
		var pkgs []string
		for _, p := range refPlugins {
			pkgs = append(pkgs, "github.com/containernetworking/plugins/"+p)
		}
		return pkgs
	}(),
}

// ReferencePlugins returns a directory holding the reference plugins at
// RefPluginsVersion, installing them from the Go module proxy (`go
// install ...@v1.9.1`, static, as upstream releases them) into the cache
// beside the Kubernetes binaries unless a build by the same toolchain is
// there. Concurrent callers wait on the cache's lock.
func ReferencePlugins(logf func(string, ...any)) (string, error) {
	return refPluginsInstall.bin(logf)
}

// InstallReferenceChain puts the reference plugins into every node's CNI
// bin directory and writes their conflist (RefConflist) into its conf
// directory, where containerd picks it up as it would podnet's: the nodes
// turn Ready without a restart. Each node's host-local range is its
// Node's podCIDR, and each node routes the other nodes' podCIDRs to their
// underlay addresses, as a host-gw fabric (or kindnet) would: the
// reference plugins set up a node's own pods only.
func (c *Cluster) InstallReferenceChain(ctx context.Context, logf func(string, ...any)) error {
	src, err := ReferencePlugins(logf)
	if err != nil {
		return err
	}
	podCIDRs := map[string]string{}
	for _, n := range c.Nodes {
		cidr, err := c.waitPodCIDR(ctx, n.Name)
		if err != nil {
			return err
		}
		podCIDRs[n.Name] = cidr
	}
	for _, n := range c.Nodes {
		for _, p := range refPlugins {
			name := filepath.Base(p)
			data, err := os.ReadFile(filepath.Join(src, name))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(n.CNIBinDir, name), data, 0o755); err != nil {
				return err
			}
		}
		for _, peer := range c.Nodes {
			if peer != n {
				if err := run("ip", "-n", n.netnsName, "route", "replace", podCIDRs[peer.Name], "via", peer.IP); err != nil {
					return err
				}
			}
		}
		conf, err := RefConflist(podCIDRs[n.Name], filepath.Join(n.Root, "host-local"))
		if err != nil {
			return err
		}
		// Written aside and renamed, so containerd never reads half a file.
		tmp := filepath.Join(n.CNIConfDir, ".10-refchain.conflist.tmp")
		if err := os.WriteFile(tmp, conf, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(n.CNIConfDir, "10-refchain.conflist")); err != nil {
			return err
		}
	}
	return nil
}

// waitPodCIDR returns the Node's first podCIDR, waiting for the
// controller manager to allocate it.
func (c *Cluster) waitPodCIDR(ctx context.Context, node string) (string, error) {
	for {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && n.Spec.PodCIDR != "" {
			return n.Spec.PodCIDR, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("node %s has no podCIDR: %w (last error %v)", node, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RefConflist is the reference chain's network: a bridge that is the
// pods' gateway and masquerades what leaves the pool, host-local on the
// node's podCIDR (its state under dataDir, the node's own, not the
// machine's /var/lib/cni/networks), and portmap with SNAT for host
// ports. The bridge's ipMasq masquerades whatever leaves the node's
// subnet, pods on other nodes included: that is the reference plugin's
// behaviour, kept as it is for a baseline. cniVersion 1.0.0: containerd
// 1.6 reads no later results.
func RefConflist(podCIDR, dataDir string) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       RefNetwork,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": podCIDR}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": dataDir,
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "snat": true},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}
