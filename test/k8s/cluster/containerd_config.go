package cluster

import (
	"fmt"
	"path/filepath"
)

// containerdConfigV3 is containerdConfig for containerd 2.x, in the
// config version 2.0 introduced, which every 2.x reads (2.3 added version
// 4 and migrates 3 at start, with a warning; docs/cri/config.md). The CRI
// plugin's settings are split between io.containerd.cri.v1.images
// (snapshotter; the sandbox image, now a "pinned" image) and
// io.containerd.cri.v1.runtime (runtimes, CNI, restrict_oom_score_adj).
// Two defaults that 1.x did not have would reach outside the harness's
// directories, so they are set: NRI, on by default since 2.0, would
// listen on /var/run/nri/nri.sock, one per machine; CDI, also on, reads
// specs from /etc/cdi and /var/run/cdi.
func (c *Cluster) containerdConfigV3(n *Node) string {
	root := filepath.Join(n.Root, "containerd")
	return containerdHeader(n, 3, "") + fmt.Sprintf(`[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[1]q

[plugins."io.containerd.cri.v1.runtime"]
  # runc cannot set oom_score_adj below the parent's without
  # CAP_SYS_RESOURCE, which a test machine may lack.
  restrict_oom_score_adj = true
  cdi_spec_dirs = [%[2]q]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    # bin_dirs since 2.1 (bin_dir is deprecated).
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
`, PauseImage, filepath.Join(root, "cdi"))
}
