package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/internal/testutil"
)

const (
	// NodeIP is the first node's underlay address, on the link that holds
	// its default route (so the agent finds an underlay); the link ends
	// on a switch in a namespace of the harness's, so nothing sent there
	// leaves the machine. The control plane runs on the first node and
	// listens here; a test that means a node's address says which node
	// (Node.IP).
	NodeIP = "198.18.0.1"
	// OutsideIP is the switch's own address: the outside network, outside
	// every pod pool.
	OutsideIP = "198.18.0.254"
	// PauseImage and PodnetImage are the images loaded into containerd.
	PauseImage  = "podnet.test/pause:1"
	PodnetImage = "podnet.test/podnet:dev"
	// EtcdEndpoint is etcd's client address, on the first node's underlay
	// address so that every node's agent and plugins reach it.
	EtcdEndpoint = NodeIP + ":2379"

	apiserverPort = "6443"
	underlayLink  = "underlay0"
	switchBridge  = "sw0"
)

// Cluster is a running cluster: the control plane and the first node's
// kubelet and containerd on the first node, more nodes if asked for.
type Cluster struct {
	t testing.TB
	// Dir holds every file of the cluster; removed at the end.
	Dir string
	// Nodes are the cluster's nodes, the first one first. The control
	// plane runs in the first one's network namespace. Whatever looks at
	// one node's state (links, nftables, sandboxes, files, components) is
	// a method of Node: a test names the node it means.
	Nodes []*Node
	// OutsideNetNS (a name) is the switch's namespace, the outside
	// network.
	OutsideNetNS string
	// ModuleRoot is podnet's repository root.
	ModuleRoot string
	Client     *kubernetes.Clientset
	Config     *rest.Config

	containerd    Containerd
	containerdBin string  // its programs' directory; "" for $PATH
	reaper        *reaper // tears down what stop would, if the test dies first
	logDir        string
	kubeBin       string
	pki           *pki
	procs         []*proc
	byName        map[string]*proc
	sysctls       map[string]string
	newHostDirs   []string
	hostDirsLock  *os.File // shared while the cluster runs (lockHostDirs)
	// controlPlaneOnly: etcd and kube-apiserver alone (WithControlPlaneOnly).
	controlPlaneOnly bool
	// proxyMode is the mode of every node's kube-proxy.
	proxyMode ProxyMode
	// deployed is the IPAM store of the podnet variant applied (Apply),
	// as its agent names it on a node; "" before.
	deployed string
	// keep is PODNET_K8S_KEEP (keep.go); kept is set once the teardown
	// has kept the cluster.
	keep string
	kept bool
}

// Option changes what Start brings up.
type Option func(*options)

type options struct {
	nodes        int
	containerd   Containerd
	controlPlane bool
	proxyMode    ProxyMode
}

// WithNodes brings up n nodes (default 1), each a kubelet and containerd
// in network and mount namespaces of its own on the shared underlay.
func WithNodes(n int) Option { return func(o *options) { o.nodes = n } }

// WithControlPlaneOnly brings up etcd and kube-apiserver alone, on the
// first node's network namespace: no controllers, images, containerd or
// kubelet. Nothing then writes to the objects a test creates (no
// allocator gives Nodes podCIDRs, no lifecycle controller taints Nodes
// without a kubelet), as a benchmark of an API client wants.
func WithControlPlaneOnly() Option { return func(o *options) { o.controlPlane = true } }

// WithContainerd runs cd as the nodes' containerd, whatever
// PODNET_K8S_CONTAINERD says.
func WithContainerd(cd Containerd) Option {
	return func(o *options) { o.containerd = cd }
}

// Start brings the cluster up to registered nodes (not Ready: no CNI
// config is installed yet) and stops it when t ends. The nodes run the
// containerd opts or PODNET_K8S_CONTAINERD choose, else Debian's.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	testutil.RequireRoot(t)
	if err := ensureNodeSoftware(t.Logf); err != nil {
		t.Fatal(err)
	}
	kubeBin, err := KubeBinaries(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	o := options{nodes: 1}
	cd, cdBin := nodeContainerd(t, &o, opts)
	mode, err := proxyMode(o)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	keep, err := keepMode()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "podnet-k8s-")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := lockHostDirs()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{hostDirsLock: lock, newHostDirs: absentHostDirs(), t: t, Dir: dir, kubeBin: kubeBin, byName: map[string]*proc{},
		ModuleRoot: filepath.Dir(filepath.Dir(mod)), logDir: filepath.Join(dir, "logs"),
		containerd: cd, containerdBin: cdBin, controlPlaneOnly: o.controlPlane, proxyMode: mode, keep: keep}
	// The namespaces are made first so that they are removed last, after
	// every process in them has stopped (and the switch's before the
	// nodes' underlay links, which end on it, are gone).
	t.Logf("cluster: directory %s, component logs in %s (%s=1 keeps it all after the test)", dir, c.logDir, keepEnv)
	nsT := unlessKept{TB: t, c: c}
	c.OutsideNetNS, _ = testutil.NewNetNS(nsT)
	for i := 1; i <= o.nodes; i++ {
		n := c.newNode(i)
		n.netnsName, n.NetNS = testutil.NewNodeNetNS(nsT)
		c.Nodes = append(c.Nodes, n)
	}
	t.Cleanup(c.stop)
	if c.reaper, err = startReaper(); err != nil {
		t.Fatal(err)
	}
	c.reaper.send(c.reaperPlan())
	for _, d := range []string{c.logDir, filepath.Join(dir, "images")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.bringUp()
	return c
}

// bringUp starts the components in dependency order, each one up before
// the next starts, so that a failure names the component at fault.
func (c *Cluster) bringUp() {
	type step struct {
		name string
		fn   func() error
	}
	steps := []step{{"switch", c.setupSwitch}}
	for _, n := range c.Nodes {
		steps = append(steps,
			step{n.Name + " network", func() error { return c.setupUnderlay(n) }},
			step{n.Name + " mount namespace", func() error { return c.setupMountNS(n) }},
			step{n.Name + " hostname", func() error { return c.setupUTSNS(n) }})
	}
	if !c.controlPlaneOnly {
		steps = append(steps, step{"images", c.buildImages})
	}
	steps = append(steps, []step{
		{"certificates", c.setupPKI},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
	}...)
	if !c.controlPlaneOnly {
		steps = append(steps, step{"controller-manager and scheduler", c.startControllers})
		for _, n := range c.Nodes {
			steps = append(steps,
				step{n.Name + " containerd", func() error { return c.startContainerd(n) }},
				step{n.Name + " kubelet", func() error { return c.startKubelet(n) }},
				step{n.Name + " kube-proxy (" + string(c.proxyMode) + ")", func() error { return c.startKubeProxy(n) }})
		}
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(); err != nil {
			c.t.Fatalf("cluster: %s: %v", s.name, err)
		}
		c.t.Logf("cluster: %s up in %s", s.name, time.Since(start).Round(10*time.Millisecond))
	}
}

// controlPlane is where etcd, kube-apiserver and the controllers run:
// the first node's network namespace, the machine's mount namespace.
func (c *Cluster) controlPlane() place { return place{netNS: c.Nodes[0].NetNS} }

func (c *Cluster) start(name string, where place, env []string, bin string, args ...string) error {
	p, err := startProc(where, c.logDir, name, env, bin, args...)
	if err != nil {
		return err
	}
	c.noteProc(p)
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

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
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
