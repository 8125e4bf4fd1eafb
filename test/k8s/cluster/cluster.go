// Package cluster runs a single-node Kubernetes cluster for podnet's
// tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// containerd and kubelet, all in a network namespace of the node's own
// (so every port, route, iptables chain and nft table they or podnet
// make vanishes with it), with private sockets, state directories,
// cgroup root, CNI directories and resolv.conf. Images come from archives
// built here (a static pause program, and podnet's image from `make
// image`); nothing is pulled. Everything it starts it stops by PID, and
// it restores what kubelet changes on the machine.
package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/ociimage"
)

const (
	// NodeName is the name kubelet registers.
	NodeName = "podnet-node-1"
	// NodeIP is the node's underlay address, on the link that holds its
	// default route (so the agent finds an underlay); the link ends in a
	// namespace of the harness's, so nothing sent there leaves the machine.
	NodeIP = "198.18.0.1"
	// PauseImage and PodnetImage are the images loaded into containerd.
	PauseImage  = "podnet.test/pause:1"
	PodnetImage = "podnet.test/podnet:dev"
	// EtcdEndpoint is etcd's client address inside the node namespace.
	EtcdEndpoint = "127.0.0.1:2379"

	apiserverAddr = "127.0.0.1:6443"
	underlayLink  = "underlay0"
)

// hostDirs are made on the machine by containerd, runc, the shims and
// podnet's hostPath volumes, outside the harness's directory. Parents
// come before their children.
var hostDirs = []string{
	"/var/lib/cni", "/var/lib/cni/results", "/var/lib/podnet",
	"/run/containerd", "/run/containerd/runc", "/run/containerd/runc/k8s.io", "/run/containerd/s",
}

// removeEmptyTree removes dir if it holds nothing but empty directories.
func removeEmptyTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			return fmt.Errorf("%s is not empty", dir)
		}
		if err := removeEmptyTree(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(dir)
}

// Cluster is a running single-node cluster.
type Cluster struct {
	t *testing.T
	// Dir holds every file of the cluster; removed at the end.
	Dir string
	// NetNS is the node's network namespace (path).
	NetNS string
	// OutsideNetNS (a name) is the far end of the node's uplink.
	OutsideNetNS string
	// CNIBinDir and CNIConfDir are containerd's CNI directories, private
	// to the harness: the DaemonSet's hostPath volumes point here.
	CNIBinDir, CNIConfDir string
	// PodLogsDir is kubelet's podLogsDir.
	PodLogsDir string
	// ModuleRoot is podnet's repository root.
	ModuleRoot string
	Client     *kubernetes.Clientset
	Config     *rest.Config

	containerdSock string
	logDir         string
	kubeBin        string
	pki            *pki
	procs          []*proc
	byName         map[string]*proc
	sysctls        map[string]string
	cgroupRoot     string // kubelet's, below every hierarchy's root
	newHostDirs    []string
}

// Start brings the cluster up to a registered node (not Ready: no CNI
// config is installed yet) and stops it when t ends.
func Start(t *testing.T) *Cluster {
	t.Helper()
	testutil.RequireRoot(t)
	if err := ensureNodeSoftware(t.Logf); err != nil {
		t.Fatal(err)
	}
	kubeBin, err := KubeBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	// The namespace is made first so that it is removed last, after every
	// process in it has stopped.
	_, nsPath := testutil.NewNodeNetNS(t)
	dir, err := os.MkdirTemp("", "podnet-k8s-")
	if err != nil {
		t.Fatal(err)
	}
	// Host directories a node's runtime and podnet's DaemonSet make
	// (the CNI result cache, podnet's state, runc's and the shims'
	// sockets): those that do not exist yet are removed again at the end
	// if empty.
	var newDirs []string
	for _, d := range hostDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			newDirs = append(newDirs, d)
		}
	}
	c := &Cluster{newHostDirs: newDirs,
		t: t, Dir: dir, NetNS: nsPath, kubeBin: kubeBin, byName: map[string]*proc{},
		CNIBinDir: filepath.Join(dir, "cni/bin"), CNIConfDir: filepath.Join(dir, "cni/net.d"),
		PodLogsDir: filepath.Join(dir, "pod-logs"), ModuleRoot: filepath.Dir(filepath.Dir(mod)),
		containerdSock: filepath.Join(dir, "containerd.sock"), logDir: filepath.Join(dir, "logs"),
	}
	t.Cleanup(c.stop)
	for _, d := range []string{c.CNIBinDir, c.CNIConfDir, c.PodLogsDir, c.logDir, filepath.Join(dir, "images")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		{"node network", c.setupUnderlay},
		{"images", c.buildImages},
		{"certificates", c.setupPKI},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"controller-manager and scheduler", c.startControllers},
		{"containerd", c.startContainerd},
		{"kubelet", c.startKubelet},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(); err != nil {
			t.Fatalf("cluster: %s: %v", s.name, err)
		}
		t.Logf("cluster: %s up in %s", s.name, time.Since(start).Round(10*time.Millisecond))
	}
	return c
}

// ensureNodeSoftware installs containerd and runc from the distribution
// when they are missing (Debian: containerd 1.6, runc 1.1).
func ensureNodeSoftware(logf func(string, ...any)) error {
	var missing bool
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "nsenter", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	logf("installing containerd and runc with apt-get")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "containerd", "runc", "iproute2", "util-linux"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

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

// buildImages writes the pause image (a static pause program) and
// podnet's image (`make image`) as archives in Dir/images.
func (c *Cluster) buildImages() error {
	mod := filepath.Join(c.ModuleRoot, "test/k8s")
	pause := filepath.Join(c.Dir, "images/pause")
	if err := goBuild(mod, "./cmd/pause", pause); err != nil {
		return err
	}
	data, err := os.ReadFile(pause)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(c.Dir, "images/pause.tar"))
	if err != nil {
		return err
	}
	err = ociimage.Write(f, ociimage.Image{
		Name: PauseImage, Entrypoint: []string{"/pause"},
		Files: []ociimage.File{{Path: "/pause", Mode: 0o755, Data: data}},
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// podnet's image the way a user without a registry makes it.
	bin := filepath.Join(c.Dir, "podnet-bin")
	cmd := exec.Command("make", "-C", c.ModuleRoot, "image", "BIN="+bin,
		"IMAGE="+PodnetImage, "IMAGE_TAR="+filepath.Join(c.Dir, "images/podnet.tar"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make image: %w\n%s", err, out)
	}
	return nil
}

func (c *Cluster) setupPKI() error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	if _, _, err := p.issue("apiserver", "kube-apiserver", nil,
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(NodeIP), net.ParseIP("10.96.0.1")},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, true); err != nil {
		return err
	}
	// One system:masters identity for the test, the controllers, kubelet
	// and the apiserver's calls to kubelet: this cluster tests networking,
	// not authorization.
	cert, key, err := p.issue("admin", "podnet-k8s-admin", []string{"system:masters"}, nil, nil, false)
	if err != nil {
		return err
	}
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: podnet
  cluster:
    server: https://%s
    certificate-authority: %s
users:
- name: admin
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: podnet
  context: {cluster: podnet, user: admin}
current-context: podnet
`, apiserverAddr, p.path("ca.crt"), p.path("admin.crt"), p.path("admin.key"))
	if err := os.WriteFile(c.kubeconfig(), []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host:            "https://" + apiserverAddr,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM, CertData: cert, KeyData: key},
		Dial:            c.DialContext,
		QPS:             100,
		Burst:           200,
	}
	c.Client, err = kubernetes.NewForConfig(c.Config)
	return err
}

func (c *Cluster) kubeconfig() string { return filepath.Join(c.Dir, "admin.kubeconfig") }

// DialContext dials from the node's network namespace: the API server,
// etcd, kubelet and pods are reachable only from there.
func (c *Cluster) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := netns.Do(c.NetNS, func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// HTTPClient returns a client whose connections start in the node's
// namespace: the node's view of the pod network.
func (c *Cluster) HTTPClient(timeout time.Duration) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.pki.caPEM)
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: c.DialContext, TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
	}}
}

func (c *Cluster) start(name string, env []string, bin string, args ...string) error {
	p, err := startProc(c.NetNS, c.logDir, name, env, bin, args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.byName[name] = p
	return nil
}

// waitFor polls cond until it returns nil, the process called name exits,
// or timeout passes.
func (c *Cluster) waitFor(name string, timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = cond(); err == nil {
			return nil
		}
		if p := c.byName[name]; p != nil && p.exited() {
			return fmt.Errorf("%s exited (%v):\n%s", name, p.err, indent(tail(p.log, 30)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not up after %s: %v", name, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *Cluster) startEtcd() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := c.start("etcd", []string{etcdRoleEnv + "=" + filepath.Join(c.Dir, "etcd")}, self); err != nil {
		return err
	}
	hc := c.HTTPClient(2 * time.Second)
	return c.waitFor("etcd", time.Minute, func() error {
		resp, err := hc.Get("http://" + EtcdEndpoint + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

func (c *Cluster) startAPIServer() error {
	p := c.pki
	host, port, _ := net.SplitHostPort(apiserverAddr)
	err := c.start("kube-apiserver", nil, filepath.Join(c.kubeBin, "kube-apiserver"),
		"--etcd-servers=http://"+EtcdEndpoint,
		"--bind-address="+host, "--secure-port="+port, "--advertise-address="+NodeIP,
		"--tls-cert-file="+p.path("apiserver.crt"), "--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--kubelet-client-certificate="+p.path("admin.crt"), "--kubelet-client-key="+p.path("admin.key"),
		// kubelet's address is the node's underlay address; this keeps
		// exec and logs working whatever addresses kubelet reports.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-key-file="+p.path("sa.pub"),
		"--service-account-signing-key-file="+p.path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/24",
		"--authorization-mode=Node,RBAC",
		// podnet's DaemonSet is privileged.
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir="+filepath.Join(c.Dir, "apiserver-certs"),
		"-v=1",
	)
	if err != nil {
		return err
	}
	hc := c.HTTPClient(5 * time.Second)
	return c.waitFor("kube-apiserver", 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		_ = hc
		if err != nil {
			return fmt.Errorf("%v %s", err, body)
		}
		return nil
	})
}

func (c *Cluster) startControllers() error {
	p := c.pki
	if err := c.start("kube-controller-manager", nil, filepath.Join(c.kubeBin, "kube-controller-manager"),
		"--kubeconfig="+c.kubeconfig(),
		"--bind-address=127.0.0.1", "--leader-elect=false",
		"--service-account-private-key-file="+p.path("sa.key"),
		"--root-ca-file="+p.path("ca.crt"),
		"--use-service-account-credentials=false",
		"--cert-dir="+filepath.Join(c.Dir, "kcm-certs"),
		"-v=1",
	); err != nil {
		return err
	}
	if err := c.start("kube-scheduler", nil, filepath.Join(c.kubeBin, "kube-scheduler"),
		"--kubeconfig="+c.kubeconfig(),
		"--bind-address=127.0.0.1", "--leader-elect=false",
		"-v=1",
	); err != nil {
		return err
	}
	// The ServiceAccount admission plugin refuses pods until the
	// controller-manager has made the namespace's default account.
	return c.waitFor("kube-controller-manager", 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (c *Cluster) startContainerd() error {
	root := filepath.Join(c.Dir, "containerd")
	conf := fmt.Sprintf(`version = 2
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
	confPath := filepath.Join(c.Dir, "containerd.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
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
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
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
	confPath := filepath.Join(c.Dir, "kubelet.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
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

// Node returns the node object.
func (c *Cluster) Node(ctx context.Context) (*corev1.Node, error) {
	return c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
}

// LogTails returns the last lines of the components' logs and of the
// podnet agent's container logs.
func (c *Cluster) LogTails(n int) string {
	var b strings.Builder
	for _, name := range []string{"kube-apiserver", "containerd", "kubelet"} {
		if p := c.byName[name]; p != nil {
			fmt.Fprintf(&b, "--- %s (%s):\n%s\n", name, p.log, indent(tail(p.log, n)))
		}
	}
	logs, _ := filepath.Glob(filepath.Join(c.PodLogsDir, "kube-system_podnet-*", "*", "*.log"))
	for _, l := range logs {
		fmt.Fprintf(&b, "--- %s:\n%s\n", l, indent(tail(l, n)))
	}
	return b.String()
}

// stop tears the cluster down: pods first, through the API, so that
// kubelet runs every CNI DEL; then what is left through CRI; then the
// processes in reverse order of start; then the machine's state.
func (c *Cluster) stop() {
	t := c.t
	if t.Failed() {
		t.Logf("cluster logs:\n%s", c.LogTails(40))
	}
	var errs []error
	if kl := c.byName["kubelet"]; kl != nil && !kl.exited() {
		if err := c.deleteAllPods(); err != nil {
			errs = append(errs, err)
		}
	}
	if p := c.byName["kubelet"]; p != nil {
		errs = append(errs, p.stop(30*time.Second))
	}
	if p := c.byName["containerd"]; p != nil && !p.exited() {
		errs = append(errs, removeSandboxes(c.containerdSock))
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.name == "kubelet" {
			continue
		}
		errs = append(errs, p.stop(20*time.Second))
		if p.name == "containerd" {
			for _, pid := range shimPIDs(c.containerdSock) {
				errs = append(errs, fmt.Errorf("containerd shim %d outlived its containers; killed", pid))
				if pr, err := os.FindProcess(pid); err == nil {
					_ = pr.Kill()
				}
			}
		}
	}
	if c.sysctls != nil {
		errs = append(errs, restoreSysctls(c.sysctls))
	}
	if c.cgroupRoot != "" {
		mounts, err := cgroupMounts(true)
		errs = append(errs, err)
		for _, m := range mounts {
			if _, err := os.Stat(filepath.Join(m, c.cgroupRoot)); err == nil {
				errs = append(errs, removeCgroupTree(filepath.Join(m, c.cgroupRoot)))
			}
		}
	}
	// Deepest first; a directory something else has put files in stays.
	for i := len(c.newHostDirs) - 1; i >= 0; i-- {
		_ = removeEmptyTree(c.newHostDirs[i])
	}
	if err := unmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	} else if left, _ := mountsUnder(c.Dir); len(left) > 0 {
		errs = append(errs, fmt.Errorf("mounts left under %s, not removing it: %v", c.Dir, left))
	} else {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("cluster teardown: %v", err)
	}
}

// deleteAllPods deletes the DaemonSets (so that nothing recreates pods)
// and every pod, and waits until they are gone from the API, that is
// until kubelet has torn each one down.
func (c *Cluster) deleteAllPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dss, err := c.Client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ds := range dss.Items {
		if err := c.Client.AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	// Application pods before podnet's agent: their CNI DEL does not
	// need the agent, but this is the order a node drains in.
	for _, sel := range []string{"app.kubernetes.io/name!=podnet", "app.kubernetes.io/name=podnet"} {
		pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if err := c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		for {
			pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return fmt.Errorf("waiting for pods (%s) to go: %w", sel, err)
			}
			if len(pods.Items) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				var names []string
				for _, p := range pods.Items {
					names = append(names, p.Namespace+"/"+p.Name)
				}
				return fmt.Errorf("pods not deleted after 2m: %v", names)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

// PIDs returns the PID of each component still running, by name.
func (c *Cluster) PIDs() map[string]int {
	m := map[string]int{}
	for _, p := range c.procs {
		if !p.exited() {
			m[p.name] = p.cmd.Process.Pid
		}
	}
	return m
}
