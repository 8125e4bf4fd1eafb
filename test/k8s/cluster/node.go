package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/netns"
)

// Node is one machine of the cluster: a kubelet, a containerd and a
// kube-proxy in a network namespace of their own on the shared underlay,
// and a mount namespace of their own (see nodeHostPaths). Its methods
// look at or act on this node alone: its links and nftables (nodestate.go),
// its sandboxes, CNI cache and pinned namespaces (inspect.go), its
// components (restart.go), the IPAM store its plugins write
// (ipamstore.go), commands in its namespaces (Command, Podnet).
type Node struct {
	// Name is the name kubelet registers; IP its underlay address.
	Name, IP string
	// NetNS is the node's network namespace (path).
	NetNS string
	// Root holds the node's files: containerd's and kubelet's state, and
	// under host/ the directories that stand for the machine paths the
	// node keeps apart (HostPath).
	Root string
	// CNIBinDir and CNIConfDir are what the node's containerd sees as
	// /opt/cni/bin and /etc/cni/net.d, where the DaemonSet installs
	// podnet; CNICacheDir is its /var/lib/cni.
	CNIBinDir, CNIConfDir, CNICacheDir string
	// PodLogsDir is kubelet's podLogsDir.
	PodLogsDir string

	c              *Cluster
	index          int // 1 for the first node
	mountNS        string
	utsNS          string // its hostname is the node's name (utsns.go)
	containerdSock string
	cgroupRoot     string // kubelet's, below every hierarchy's root
	netnsName      string
}

// newNode describes node i (from 1) of the cluster: podnet-node-i at
// 198.18.0.i.
func (c *Cluster) newNode(i int) *Node {
	root := filepath.Join(c.Dir, "nodes", fmt.Sprintf("node-%d", i))
	n := &Node{Name: fmt.Sprintf("podnet-node-%d", i), IP: fmt.Sprintf("198.18.0.%d", i), Root: root, c: c, index: i,
		PodLogsDir: filepath.Join(root, "pod-logs"), containerdSock: filepath.Join(root, "containerd.sock")}
	n.CNIBinDir, n.CNIConfDir, n.CNICacheDir = n.HostPath("/opt/cni/bin"), n.HostPath("/etc/cni/net.d"), n.HostPath("/var/lib/cni")
	return n
}

// procName is the name of the node's component in logs and PIDs: the
// bare name on the first node (kubelet, containerd), name@node on others.
func (n *Node) procName(component string) string {
	if n.index == 1 {
		return component
	}
	return component + "@" + n.Name
}

func (n *Node) place() place { return place{netNS: n.NetNS, mountNS: n.mountNS, utsNS: n.utsNS} }

// Object returns the node's Node object from the API.
func (n *Node) Object(ctx context.Context) (*corev1.Node, error) {
	return n.c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
}

// DialContext dials from the node's network namespace: the API server,
// etcd, kubelet and pods are reachable only from a node's namespace (the
// control plane listens in the first node's).
func (n *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := netns.Do(n.NetNS, func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// HTTPClient returns a client whose connections start in the node's
// network namespace, the node's view of the pod network, and which trusts
// the cluster's CA.
func (n *Node) HTTPClient(timeout time.Duration) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(n.c.pki.caPEM)
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: n.DialContext, TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
	}}
}

// Command returns cmd to run in the node's network, mount and UTS
// namespaces, where its kubelet and containerd run: the node's links,
// routes and nftables, and its own /opt/cni/bin, /etc/cni/net.d,
// /var/lib/cni, /run/netns... (HostPath).
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append(append(n.place().nsenterArgs(), "--", name), args...)...)
}

// PID returns the PID of the node's component (containerd, kubelet,
// kube-proxy), 0 when it is not running.
func (n *Node) PID(component string) int {
	if p := n.c.byName[n.procName(component)]; p != nil && !p.exited() {
		return p.cmd.Process.Pid
	}
	return 0
}

// setupSwitch makes the underlay: a bridge in a namespace of its own
// standing for the outside network (198.18.0.254), where whatever a node
// sends out ends and to which every node is linked.
func (c *Cluster) setupSwitch() error {
	outside := c.OutsideNetNS
	for _, args := range [][]string{
		{"-n", outside, "link", "add", switchBridge, "type", "bridge"},
		{"-n", outside, "addr", "add", OutsideIP + "/24", "dev", switchBridge},
		{"-n", outside, "link", "set", switchBridge, "up"},
		{"-n", outside, "link", "set", "lo", "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// setupUnderlay gives the node its address and default route on a veth
// link to the switch, as a host's uplink would be.
func (c *Cluster) setupUnderlay(n *Node) error {
	peer := fmt.Sprintf("uplink%d", n.index)
	err := netns.Do(n.NetNS, func() error {
		for _, args := range [][]string{
			{"link", "add", underlayLink, "type", "veth", "peer", "name", peer, "netns", c.OutsideNetNS},
			{"addr", "add", n.IP + "/24", "dev", underlayLink},
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
		{"-n", c.OutsideNetNS, "link", "set", peer, "master", switchBridge},
		{"-n", c.OutsideNetNS, "link", "set", peer, "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// startContainerd starts the node's containerd on the harness's own
// sockets and directories and imports the images into the namespace
// kubelet's pods use (k8s.io).
func (c *Cluster) startContainerd(n *Node) error {
	confPath := filepath.Join(n.Root, "containerd.toml")
	if err := os.WriteFile(confPath, []byte(c.containerdConfig(n)), 0o644); err != nil {
		return err
	}
	name := n.procName("containerd")
	if err := c.start(name, n.place(), c.containerdEnv(), c.containerdCommand("containerd"), "--config="+confPath); err != nil {
		return err
	}
	if err := c.waitFor(name, time.Minute, func() error {
		_, err := runtimeStatus(n.containerdSock)
		return err
	}); err != nil {
		return err
	}
	for _, img := range []string{"pause.tar", "podnet.tar"} {
		if err := run(c.containerdCommand("ctr"), "--address", n.containerdSock, "-n", "k8s.io", "images", "import",
			filepath.Join(c.Dir, "images", img)); err != nil {
			return err
		}
	}
	return nil
}

// containerdConfig keeps every path of containerd's under the node's
// root, so that it shares nothing with another node or with a containerd
// the machine may run. The CNI directories are the standard ones: in the
// node's mount namespace they are the node's own.
func (c *Cluster) containerdConfig(n *Node) string {
	if c.containerd.configVersion == 3 {
		return c.containerdConfigV3(n)
	}
	// Plugins this node has no use for; they only log errors on load.
	disabled := `disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]`
	return containerdHeader(n, 2, disabled) + fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[1]q
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
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`, PauseImage)
}

// startKubelet starts the node's kubelet under a cgroup root of its own
// and waits until it has registered the node. The machine-wide sysctls
// kubelet sets are recorded before the first kubelet starts, for stop to
// write back.
func (c *Cluster) startKubelet(n *Node) error {
	kdir := filepath.Join(n.Root, "kubelet")
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
	n.cgroupRoot = "podnet-k8s-" + hex.EncodeToString(b[:])
	if err := makeCgroupRoot(n.cgroupRoot); err != nil {
		return err
	}
	confPath := filepath.Join(n.Root, "kubelet.yaml")
	if err := os.WriteFile(confPath, []byte(c.kubeletConfig(n, resolv)), 0o644); err != nil {
		return err
	}
	if c.sysctls == nil {
		saved, err := readSysctls()
		if err != nil {
			return err
		}
		c.sysctls = saved
	}
	name := n.procName("kubelet")
	if err := c.start(name, n.place(), nil, filepath.Join(c.kubeBin, "kubelet"),
		"--config="+confPath, "--kubeconfig="+c.kubeconfig(),
		"--root-dir="+kdir, "--cert-dir="+filepath.Join(kdir, "pki"),
		"--hostname-override="+n.Name, "--node-ip="+n.IP,
		"-v=2",
	); err != nil {
		return err
	}
	return c.waitFor(name, 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		return err
	})
}

// kubeletConfig is kubelet's configuration for a test machine: cgroupfs
// under the node's cgroup root, swap allowed, fast status updates (the
// tests wait on them), and image GC and eviction thresholds a busy
// machine's disk and memory do not reach. ClusterFirst pods resolve
// through the cluster's DNS (DeployDNS), never the machine's resolver.
func (c *Cluster) kubeletConfig(n *Node, resolv string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
failSwapOn: false
resolvConf: %s
clusterDNS: [%s]
clusterDomain: %s
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
`, n.cgroupRoot, resolv, DNSServiceIP, ClusterDomain, n.containerdSock, n.PodLogsDir, n.IP, c.pki.path("ca.crt"))
}

// containerdHeader is the start of the node's containerd config in the
// given config version: every path of containerd's under the node's root
// and its metrics on loopback, the same for every containerd the harness
// runs. topLevel holds more top-level keys, which must come before the
// first table.
func containerdHeader(n *Node, version int, topLevel string) string {
	root := filepath.Join(n.Root, "containerd")
	return fmt.Sprintf(`version = %[1]d
root = %[2]q
state = %[3]q
%[9]s

[grpc]
  address = %[4]q

[ttrpc]
  address = %[5]q

[debug]
  address = %[6]q

[metrics]
  address = %[7]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[8]q

`, version, filepath.Join(root, "root"), filepath.Join(root, "state"), n.containerdSock,
		n.containerdSock+".ttrpc", n.containerdSock+".debug", ContainerdMetricsAddr, filepath.Join(root, "opt"), topLevel)
}
