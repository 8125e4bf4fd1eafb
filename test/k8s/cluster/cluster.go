package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
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
	netnsName      string
	reaper         *reaper // tears down what stop would, if the test dies first
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
	nsName, nsPath := testutil.NewNodeNetNS(t)
	dir, err := os.MkdirTemp("", "podnet-k8s-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{newHostDirs: absentHostDirs(),
		t: t, Dir: dir, NetNS: nsPath, netnsName: nsName, kubeBin: kubeBin, byName: map[string]*proc{},
		CNIBinDir: filepath.Join(dir, "cni/bin"), CNIConfDir: filepath.Join(dir, "cni/net.d"),
		PodLogsDir: filepath.Join(dir, "pod-logs"), ModuleRoot: filepath.Dir(filepath.Dir(mod)),
		containerdSock: filepath.Join(dir, "containerd.sock"), logDir: filepath.Join(dir, "logs"),
	}
	t.Cleanup(c.stop)
	if c.reaper, err = startReaper(); err != nil {
		t.Fatal(err)
	}
	c.reaper.send(reaperMsg{Dir: dir, ContainerdSock: c.containerdSock, NetNS: []string{nsName}})
	for _, d := range []string{c.CNIBinDir, c.CNIConfDir, c.PodLogsDir, c.logDir, filepath.Join(dir, "images")} {
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
			c.t.Fatalf("cluster: %s: %v", s.name, err)
		}
		c.t.Logf("cluster: %s up in %s", s.name, time.Since(start).Round(10*time.Millisecond))
	}
}

func (c *Cluster) start(name string, env []string, bin string, args ...string) error {
	p, err := startProc(c.NetNS, c.logDir, name, env, bin, args...)
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

// Node returns the node object.
func (c *Cluster) Node(ctx context.Context) (*corev1.Node, error) {
	return c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
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
