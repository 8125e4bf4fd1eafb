package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// setupUnderlay gives the node its address and default route on a veth
// link, as a host's uplink would be. Its peer is in a namespace of its
// own standing for the outside network (198.18.0.254), where whatever
// the node sends out ends.
func (c *Cluster) setupUnderlay() error {
	outside, _ := testutil.NewNetNS(c.t)
	c.OutsideNetNS = outside
	err := netns.Do(c.NetNS, func() error {
		for _, args := range [][]string{
			{"link", "add", underlayLink, "type", "veth", "peer", "name", "uplink0", "netns", outside},
			{"addr", "add", NodeIP + "/24", "dev", underlayLink},
			{"link", "set", underlayLink, "up"},
			{"route", "add", "default", "dev", underlayLink},
		} {
			if err := run("ip", args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, args := range [][]string{
		{"-n", outside, "addr", "add", "198.18.0.254/24", "dev", "uplink0"},
		{"-n", outside, "link", "set", "uplink0", "up"},
		{"-n", outside, "link", "set", "lo", "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// startContainerd starts containerd on the harness's own sockets and
// directories and imports the images into the namespace kubelet's pods
// use (k8s.io).
func (c *Cluster) startContainerd() error {
	confPath := filepath.Join(c.Dir, "containerd.toml")
	if err := os.WriteFile(confPath, []byte(c.containerdConfig()), 0o644); err != nil {
		return err
	}
	if err := c.start("containerd", nil, "containerd", "--config="+confPath); err != nil {
		return err
	}
	if err := c.waitFor("containerd", time.Minute, func() error {
		_, err := runtimeStatus(c.containerdSock)
		return err
	}); err != nil {
		return err
	}
	for _, img := range []string{"pause.tar", "podnet.tar"} {
		if err := run("ctr", "--address", c.containerdSock, "-n", "k8s.io", "images", "import",
			filepath.Join(c.Dir, "images", img)); err != nil {
			return err
		}
	}
	return nil
}

// containerdConfig keeps every path of containerd's under Dir, so that it
// shares nothing with a containerd the machine may run.
func (c *Cluster) containerdConfig() string {
	root := filepath.Join(c.Dir, "containerd")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
# Plugins this node has no use for; they only log errors on load.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  address = %[5]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[7]q
  # runc cannot set oom_score_adj below the parent's without
  # CAP_SYS_RESOURCE, which a test machine may lack.
  restrict_oom_score_adj = true
  # Pods' network namespaces are pinned under state, not in the
  # machine's /run/netns that other clusters share: what a crash leaves
  # there is this cluster's, and goes with Dir.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
`, filepath.Join(root, "root"), filepath.Join(root, "state"), c.containerdSock,
		c.containerdSock+".ttrpc", c.containerdSock+".debug", filepath.Join(root, "opt"),
		PauseImage, c.CNIBinDir, c.CNIConfDir)
}

// startKubelet starts kubelet under a cgroup root of its own and waits
// until it has registered the node. The machine-wide sysctls kubelet
// sets are recorded first, for stop to write back.
func (c *Cluster) startKubelet() error {
	kdir := filepath.Join(c.Dir, "kubelet")
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		return err
	}
	// Pods must never resolve names through the machine's resolver.
	resolv := filepath.Join(c.Dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		return err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	cgroupRoot := "podnet-k8s-" + hex.EncodeToString(b[:])
	c.cgroupRoot = cgroupRoot
	if err := makeCgroupRoot(cgroupRoot); err != nil {
		return err
	}
	confPath := filepath.Join(c.Dir, "kubelet.yaml")
	if err := os.WriteFile(confPath, []byte(c.kubeletConfig(cgroupRoot, resolv)), 0o644); err != nil {
		return err
	}
	saved, err := readSysctls()
	if err != nil {
		return err
	}
	c.sysctls = saved
	if err := c.start("kubelet", nil, filepath.Join(c.kubeBin, "kubelet"),
		"--config="+confPath, "--kubeconfig="+c.kubeconfig(),
		"--root-dir="+kdir, "--cert-dir="+filepath.Join(kdir, "pki"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP,
		"-v=2",
	); err != nil {
		return err
	}
	return c.waitFor("kubelet", 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		return err
	})
}

// kubeletConfig is kubelet's configuration for a test machine: cgroupfs
// under cgroupRoot, swap allowed, fast status updates (the tests wait on
// them), and image GC and eviction thresholds a busy machine's disk and
// memory do not reach.
func (c *Cluster) kubeletConfig(cgroupRoot, resolv string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
failSwapOn: false
resolvConf: %s
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
address: %s
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization:
  mode: AlwaysAllow
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
`, cgroupRoot, resolv, c.containerdSock, c.PodLogsDir, NodeIP, c.pki.path("ca.crt"))
}
