package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// ReferencePlugins returns a directory holding the reference plugins at
// RefPluginsVersion, installing them from the Go module proxy (`go
// install ...@v1.9.1`, static, as upstream releases them) into the cache
// beside the Kubernetes binaries unless a build by the same toolchain is
// there. Concurrent callers wait on the cache's lock.
func ReferencePlugins(logf func(string, ...any)) (string, error) {
	kube, err := CacheDir()
	if err != nil {
		return "", err
	}
	cache := filepath.Join(filepath.Dir(kube), "cni-plugins-"+RefPluginsVersion)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the reference plugins are built with go, not in $PATH: %w", err)
	}
	goVer, err := exec.Command(goTool, "env", "GOVERSION", "GOOS", "GOARCH").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	stamp := RefPluginsVersion + " " + strings.Join(strings.Fields(string(goVer)), " ")
	unlock, err := lockCache(cache)
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(cache, "bin")
	if data, err := os.ReadFile(filepath.Join(bin, ".stamp")); err == nil && string(data) == stamp && refPluginsPresent(bin) {
		return bin, nil
	}
	return bin, installRefPlugins(logf, goTool, cache, bin, stamp)
}

func refPluginsPresent(bin string) bool {
	for _, p := range refPlugins {
		if fi, err := os.Stat(filepath.Join(bin, filepath.Base(p))); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// installRefPlugins installs into a directory of its own first and
// writes the stamp last, as buildKube does: a cut-short install is never
// reused.
func installRefPlugins(logf func(string, ...any), goTool, cache, bin, stamp string) error {
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	args := []string{"install", "-trimpath"}
	for _, p := range refPlugins {
		args = append(args, "github.com/containernetworking/plugins/"+p+"@"+RefPluginsVersion)
	}
	logf("installing the reference CNI plugins %s into %s", RefPluginsVersion, bin)
	start := time.Now()
	cmd := exec.Command(goTool, args...)
	// Outside any module: `go install pkg@version` builds the release's
	// own go.mod.
	cmd.Dir = cache
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	logf("installed the reference CNI plugins in %s", time.Since(start).Round(time.Second))
	if err := os.RemoveAll(bin); err != nil {
		return err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bin, ".stamp"), []byte(stamp), 0o644)
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
