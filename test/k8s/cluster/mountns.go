package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// nodeHostPaths are the machine's paths that a node's components and
// podnet's hostPath volumes write, each with the directory under the
// node's root that stands in for it. Two nodes on one machine must not
// share them (each agent installs a conflist naming its own node; each
// containerd keeps its own CNI result cache and network namespaces), and
// a node must not touch the machine's own. The node's kubelet and
// containerd run in a mount namespace of the node's own in which each of
// these paths is a bind mount of the node's directory, so the shipped
// DaemonSet's hostPaths are used verbatim and land in the node's files.
var nodeHostPaths = []struct{ host, sub string }{
	{"/opt/cni/bin", "cni/bin"},
	{"/etc/cni/net.d", "cni/net.d"},
	{"/var/lib/cni", "cni/cache"},
	{"/var/lib/podnet", "podnet"},
	{"/run/podnet", "run-podnet"},
	// The DaemonSet's /var/run/wireguard, where each agent's wireguard-go
	// serves podnet.wg.sock: two nodes' agents must not share it (each
	// removes its own socket, and `wg` would find the wrong node's).
	{wireguardRunDir, "run-wireguard"},
	{"/run/netns", "netns"},
	{"/run/containerd", "run-containerd"},
	{"/var/log/containers", "container-logs"},
}

// hostDirs are the mount points of nodeHostPaths and their parents,
// parents first: those that do not exist yet are made for the bind mounts
// and removed again at the end if empty.
var hostDirs = []string{
	"/opt/cni", "/opt/cni/bin", "/etc/cni", "/etc/cni/net.d", "/var/lib/cni", "/var/lib/podnet",
	"/run/podnet", wireguardRunDir, "/run/netns", "/run/containerd", "/var/log/containers",
}

// wireguardRunDir is the machine's directory behind the DaemonSet's
// hostPath /var/run/wireguard: /run/wireguard where /var/run is a
// symlink to /run (as on this project's machines and every current
// distribution), which is what the kubelet and the runtime resolve it to,
// else /var/run/wireguard itself.
var wireguardRunDir = resolveVarRun("/var/run/wireguard")

// resolveVarRun returns p with /var/run resolved where it is a symlink.
func resolveVarRun(p string) string {
	dir, err := filepath.EvalSymlinks("/var/run")
	if err != nil {
		return p
	}
	return filepath.Join(dir, strings.TrimPrefix(p, "/var/run"))
}

// mountNSDir makes Dir/ns, where nodes' mount namespaces are bound: a
// private mount (a persistent namespace cannot be bound below a shared
// one, which would propagate it back into itself).
func (c *Cluster) mountNSDir() (string, error) {
	dir := filepath.Join(c.Dir, "ns")
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("make %s private: %w", dir, err)
	}
	return dir, nil
}

// setupMountNS makes the node's mount namespace: a copy of the machine's
// with no propagation back to it, whose mounts are shared among
// themselves (containerd requires that of a hostPath mounted with
// HostToContainer propagation, such as the agent's /run/netns), and in
// which every nodeHostPaths entry is the node's own directory.
func (c *Cluster) setupMountNS(n *Node) error {
	dir, err := c.mountNSDir()
	if err != nil {
		return err
	}
	n.mountNS = filepath.Join(dir, n.Name)
	if err := os.WriteFile(n.mountNS, nil, 0o600); err != nil {
		return err
	}
	if err := run("unshare", "--mount="+n.mountNS, "--propagation", "private", "true"); err != nil {
		return err
	}
	inNode := func(args ...string) error {
		return run("nsenter", append([]string{"--mount=" + n.mountNS, "--"}, args...)...)
	}
	if err := inNode("mount", "--make-rshared", "/"); err != nil {
		return err
	}
	for _, d := range hostDirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, p := range nodeHostPaths {
		src := n.HostPath(p.host)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := inNode("mount", "--bind", src, p.host); err != nil {
			return err
		}
	}
	return nil
}

// HostPath returns the file in the node's directory that stands for the
// machine path p inside the node's mount namespace, or p itself when the
// node does not keep p apart.
func (n *Node) HostPath(p string) string {
	if p == "/var/run" || strings.HasPrefix(p, "/var/run/") {
		p = resolveVarRun(p)
	}
	for _, hp := range nodeHostPaths {
		if p == hp.host || len(p) > len(hp.host) && p[:len(hp.host)+1] == hp.host+"/" {
			return filepath.Join(n.Root, "host", hp.sub, p[len(hp.host):])
		}
	}
	return p
}
