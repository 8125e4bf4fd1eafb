package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/netns"
)

const (
	// podPool6 is the IPv6 pool of the ConfigMap's dual-stack edit.
	podPool6 = "fd00:244::/64"
	leaseTTL = 2 * time.Second
	// GC runs often and with a short grace period so that a test sees
	// it work; a pod's ADD (allocation to cached result) takes far less.
	gcInterval = 250 * time.Millisecond
	gcGrace    = 2 * time.Second
)

// syncBuffer is a bytes.Buffer safe for a process writing while a test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cluster is an underlay, etcd on it, and nodes with agents.
type cluster struct {
	t        *testing.T
	u        *underlay
	mode     agent.Mode
	store    string // etcd://...
	cli      *clientv3.Client
	ipamS    ipam.Store
	alloc    *ipam.Allocator
	podnet   string // the podnet binary (CLI and agent)
	pluginBn string // the plugins the agents install
	netConf  string // the conflist the agents install
	network  shippedNetwork
	pool4    netip.Prefix
	pool6    netip.Prefix // invalid unless dual-stack
	outside  *outsideHost
	dir      string
	nodes    map[string]*node
}

type node struct {
	name    string
	ns      *ns
	addr    netip.Addr // on the underlay
	addr6   netip.Addr
	dir     string
	agent   *exec.Cmd
	exited  chan struct{}
	exitErr error // once exited is closed
	log     *syncBuffer
	runtime *cni.Runtime
	pods    []*pod
}

type pod struct {
	id      string
	node    *node
	ns      string
	ip      netip.Addr // IPv4
	ip6     netip.Addr // invalid unless dual-stack
	del     func() error
	deleted bool
}

// newCluster starts etcd on u and prepares the config every node's agent
// installs: the ConfigMap's conflist as shipped, with the dual-stack edit
// it documents when dualStack is set.
func newCluster(t *testing.T, u *underlay, mode agent.Mode, dualStack bool) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t, u: u, mode: mode, dir: dir, nodes: map[string]*node{}}
	binDir := filepath.Join(dir, "bin")
	c.pluginBn = filepath.Join(binDir, "cni")
	if err := os.MkdirAll(c.pluginBn, 0o755); err != nil {
		t.Fatal(err)
	}
	c.podnet = testutil.BuildBinary(t, "./cmd/podnet", binDir)
	testutil.BuildBinary(t, "./plugins/podnet", c.pluginBn)
	testutil.BuildBinary(t, "./plugins/podnet-ipam", c.pluginBn)
	c.store = "etcd://" + startEtcd(t, u)
	conf := shippedConflist(t, c.store)
	if dualStack {
		var err error
		if conf, err = withIPv6Pool(conf, netip.MustParsePrefix(podPool6)); err != nil {
			t.Fatalf("the ConfigMap's dual-stack edit: %v", err)
		}
	}
	var err error
	if c.network, err = parseNetwork(conf); err != nil {
		t.Fatalf("%s: %v\n%s", shippedConfKey, err, conf)
	}
	c.pool4, c.pool6 = c.network.pools["default"], c.network.pools["default6"]
	if !c.pool4.Addr().Is4() || dualStack != c.pool6.IsValid() {
		t.Fatalf("%s: pools %v: want default (IPv4) and, dual-stack only, default6", shippedConfKey, c.network.pools)
	}
	// The agent installs the file under its own name, as the DaemonSet
	// mounts the ConfigMap's key.
	c.netConf = filepath.Join(dir, shippedConfKey)
	if err := os.WriteFile(c.netConf, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	s, cli, err := agent.OpenStore(context.Background(), c.store, agent.StoreOptions{Dialer: dialerIn(u.hub.path)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c.cli, c.ipamS = cli, s
	c.alloc = ipam.New(s, ipam.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, cidr := range c.network.pools {
		if err := c.alloc.PutPool(ctx, ipam.Pool{Name: name, CIDR: cidr}); err != nil {
			t.Fatal(err)
		}
	}
	c.outside = startOutside(t, u)
	return c
}

func (c *cluster) dualStack() bool { return c.pool6.IsValid() }

// addNode creates node i's namespace on the underlay; it has no agent yet.
func (c *cluster) addNode(i int) *node {
	t := c.t
	t.Helper()
	n := &node{name: fmt.Sprintf("n%d", i), ns: newNodeNS(t), dir: filepath.Join(c.dir, fmt.Sprintf("n%d", i))}
	n.addr, n.addr6 = c.u.attach(t, n.ns, i)
	// Nothing of this machine's may stand in for what podnet must do.
	for _, key := range forwardingKeys {
		if v := n.sysctl(t, key); v != "0" {
			t.Fatalf("node %s before its agent: %s = %s, want 0 as on a fresh host", n.name, key, v)
		}
	}
	n.runtime = cni.NewRuntime([]string{filepath.Join(n.dir, "bin")}, cni.WithCacheDir(filepath.Join(n.dir, "cache")),
		cni.WithExec(&cni.RawExec{HostNetNS: n.ns.path}))
	c.nodes[n.name] = n
	return n
}

// startAgent runs `podnet agent` inside the node's namespace and waits
// until it is ready.
func (c *cluster) startAgent(n *node, extra ...string) {
	t := c.t
	t.Helper()
	n.log = &syncBuffer{}
	cmd := exec.Command(c.podnet, "agent", "--node", n.name, "--store", c.store, "--mode", string(c.mode),
		"--underlay-interface", "eth0", "--metrics-addr", "127.0.0.1:9603", "--lease-ttl", leaseTTL.String(),
		"--gc-interval", gcInterval.String(), "--gc-grace", gcGrace.String(), "--log-level", "info",
		"--install", "--src-dir", c.pluginBn, "--network-config", c.netConf,
		"--conf-dir", filepath.Join(n.dir, "net.d"), "--bin-dir", filepath.Join(n.dir, "bin"),
		"--cache-dir", filepath.Join(n.dir, "cache"))
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout, cmd.Stderr = n.log, n.log
	// Its own process group, so a terminal's signals do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := netns.Do(n.ns.path, cmd.Start); err != nil {
		t.Fatal(err)
	}
	n.agent, n.exited = cmd, make(chan struct{})
	go func() { n.exitErr = cmd.Wait(); close(n.exited) }()
	t.Cleanup(func() { c.stopAgent(n, syscall.SIGTERM) })
	c.waitReady(n)
}

// stopAgent signals the node's agent (a process this test started) and
// waits for it to exit.
func (c *cluster) stopAgent(n *node, sig syscall.Signal) {
	if n.agent == nil {
		return
	}
	cmd, exited := n.agent, n.exited
	n.agent = nil
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		c.t.Errorf("agent %s did not exit after %v; killing it", n.name, sig)
		_ = cmd.Process.Kill()
		<-exited
	}
	if sig == syscall.SIGTERM && n.exitErr != nil {
		c.t.Errorf("agent %s: exit after SIGTERM: %v", n.name, n.exitErr)
	}
	if c.t.Failed() {
		c.t.Logf("agent %s log:\n%s", n.name, n.log.String())
	}
}

// httpIn is an HTTP client whose connections start in the namespace.
func httpIn(path string) *http.Client {
	d := dialerIn(path)
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return d(ctx, addr) },
	}}
}

func (c *cluster) waitReady(n *node) {
	t := c.t
	t.Helper()
	cl := httpIn(n.ns.path)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := cl.Get("http://127.0.0.1:9603/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		select {
		case <-n.exited:
			t.Fatalf("agent %s exited:\n%s", n.name, n.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s not ready after 30s (%v):\n%s", n.name, err, n.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// addPod starts a pod on n the way a runtime does: the network config
// the node's agent installed, the plugins it installed, run inside the
// node's namespace. podnet-ipam (in process in the podnet plugin) takes
// the pod's address from the cluster pool in etcd.
func (c *cluster) addPod(n *node) *pod {
	t := c.t
	t.Helper()
	id := fmt.Sprintf("%s-pod%d", n.name, len(n.pods))
	_, path := testutil.NewNetNS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	confPath := filepath.Join(n.dir, "net.d", filepath.Base(c.netConf))
	b, err := os.ReadFile(confPath)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cni.ParseNetworkConfigList(b, confPath)
	if err != nil {
		t.Fatal(err)
	}
	rt := &cni.RuntimeConf{ContainerID: id, NetNS: path, IfName: "eth0"}
	res, err := n.runtime.AddNetworkList(ctx, list, rt)
	if err != nil {
		t.Fatalf("pod %s: ADD: %v", id, err)
	}
	p := &pod{id: id, node: n, ns: path}
	p.del = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.runtime.DelNetworkList(ctx, list, rt); err != nil {
			return fmt.Errorf("pod %s: DEL: %w", id, err)
		}
		return nil
	}
	t.Cleanup(func() {
		if !p.deleted {
			if err := p.del(); err != nil {
				t.Error(err)
			}
		}
	})
	for _, ip := range res.IPs {
		if a := ip.Address.Addr(); a.Is4() {
			p.ip = a
		} else {
			p.ip6 = a
		}
	}
	if !c.pool4.Contains(p.ip) || c.pool6.Contains(p.ip6) != c.dualStack() || p.ip6.IsValid() != c.dualStack() {
		t.Fatalf("pod %s: result %+v: want an address from %s and, dual-stack only, one from %s", id, res.IPs, c.pool4, c.pool6)
	}
	n.pods = append(n.pods, p)
	p.serve(t)
	return p
}

// delPods deletes every pod of the cluster, as the runtime does when
// they stop.
func (c *cluster) delPods() {
	t := c.t
	t.Helper()
	for _, p := range c.allPods() {
		p.deleted = true
		if err := p.del(); err != nil {
			t.Error(err)
		}
	}
}

// allPods returns every pod of the cluster.
func (c *cluster) allPods() []*pod {
	var out []*pod
	for i := 1; i <= len(c.nodes); i++ {
		if n := c.nodes[fmt.Sprintf("n%d", i)]; n != nil {
			out = append(out, n.pods...)
		}
	}
	return out
}

// routeTo reports whether n has an owned route to dst.
func (n *node) routeTo(dst netip.Prefix) (bool, error) {
	owned, err := agent.OwnedRoutes(n.ns.h)
	if err != nil {
		return false, err
	}
	_, ok := owned[dst]
	return ok, nil
}

// blocksOf returns the blocks node's IPAM index routes to it.
func (c *cluster) blocksOf(node string) []netip.Prefix {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := c.ipamS.Get(ctx, ipam.Keys{}.Node(node))
	if errors.Is(err, ipam.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var x ipam.NodeIndex
	if err := json.Unmarshal(kv.Value, &x); err != nil {
		t.Fatal(err)
	}
	out, _ := x.Routes()
	return out
}

// waitRoutes waits until every node in on has (want) or lacks (!want) a
// route to every block of node of, and returns how long it took.
func (c *cluster) waitRoutes(of string, on []*node, want bool, timeout time.Duration) time.Duration {
	t := c.t
	t.Helper()
	blocks := c.blocksOf(of)
	if len(blocks) == 0 {
		t.Fatalf("node %s has no blocks", of)
	}
	start := time.Now()
	for {
		done := true
		for _, n := range on {
			for _, b := range blocks {
				ok, err := n.routeTo(b)
				if err != nil {
					t.Fatal(err)
				}
				if ok != want {
					done = false
				}
			}
		}
		if done {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("routes to %s's blocks %v on %d nodes: want present=%v, not within %v", of, blocks, len(on), want, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
