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
	podPool     = "10.103.0.0/16"
	podPool6    = "fd00:103::/112"
	networkName = "e2e"
	leaseTTL    = 2 * time.Second
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
	dir      string
	nodes    map[string]*node
}

type node struct {
	name    string
	ns      *ns
	addr    netip.Addr
	dir     string
	agent   *exec.Cmd
	exited  chan struct{}
	exitErr error // once exited is closed
	log     *syncBuffer
	runtime *cni.Runtime
	pods    []*pod
}

type pod struct {
	id   string
	node *node
	ns   string
	ip   netip.Addr // IPv4
	ip6  netip.Addr
}

func newCluster(t *testing.T, u *underlay, mode agent.Mode) *cluster {
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
	// What a cluster ships (deploy's ConfigMap, trimmed to what pod to
	// pod traffic needs): the same file for every node, without a node
	// name, which each agent adds when it installs the file.
	conf, _ := json.MarshalIndent(map[string]any{
		"cniVersion": cni.CurrentVersion, "name": networkName,
		"plugins": []any{map[string]any{
			"type": "podnet", "mode": "routed",
			"ipam": map[string]any{"type": "podnet-ipam", "store": c.store,
				"pools": []any{map[string]any{"name": "default", "cidr": podPool}, map[string]any{"name": "default6", "cidr": podPool6}}},
		}},
	}, "", "  ")
	c.netConf = filepath.Join(dir, "10-"+networkName+".conflist")
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
	for name, cidr := range map[string]string{"default": podPool, "default6": podPool6} {
		if err := c.alloc.PutPool(ctx, ipam.Pool{Name: name, CIDR: netip.MustParsePrefix(cidr)}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// addNode creates node i's namespace on the underlay; it has no agent yet.
func (c *cluster) addNode(i int) *node {
	t := c.t
	t.Helper()
	n := &node{name: fmt.Sprintf("n%d", i), ns: newNS(t), dir: filepath.Join(c.dir, fmt.Sprintf("n%d", i))}
	n.addr = c.u.attach(t, n.ns, i)
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
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.runtime.DelNetworkList(ctx, list, rt); err != nil {
			t.Errorf("pod %s: DEL: %v", id, err)
		}
	})
	p := &pod{id: id, node: n, ns: path}
	for _, ip := range res.IPs {
		if a := ip.Address.Addr(); a.Is4() {
			p.ip = a
		} else {
			p.ip6 = a
		}
	}
	if !netip.MustParsePrefix(podPool).Contains(p.ip) || !netip.MustParsePrefix(podPool6).Contains(p.ip6) {
		t.Fatalf("pod %s: result %+v: want an address from %s and one from %s", id, res.IPs, podPool, podPool6)
	}
	n.pods = append(n.pods, p)
	p.serve(t)
	return p
}

const echoPort = 7070

// serve starts a TCP echo server on each of the pod's addresses, inside
// the pod.
func (p *pod) serve(t *testing.T) {
	for _, ip := range []netip.Addr{p.ip, p.ip6} {
		p.serveOn(t, ip)
	}
}

func (p *pod) serveOn(t *testing.T, ip netip.Addr) {
	var l net.Listener
	err := netns.Do(p.ns, func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(echoPort)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = io.Copy(conn, conn)
			}()
		}
	}()
}

// talk opens a TCP connection from p to each of q's addresses and checks
// that a message comes back.
func (p *pod) talk(q *pod) error {
	return errors.Join(p.talkTo(q, q.ip), p.talkTo(q, q.ip6))
}

func (p *pod) talkTo(q *pod, dst netip.Addr) error {
	var conn net.Conn
	err := netns.Do(p.ns, func() (err error) {
		conn, err = (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", net.JoinHostPort(dst.String(), fmt.Sprint(echoPort)))
		return err
	})
	if err != nil {
		return fmt.Errorf("%s -> %s (%s): %w", p.id, q.id, dst, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	msg := []byte("hello from " + p.id)
	if _, err := conn.Write(msg); err != nil {
		return fmt.Errorf("%s -> %s (%s): write: %w", p.id, q.id, dst, err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("%s -> %s (%s): read: %w", p.id, q.id, dst, err)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("%s -> %s (%s): echo %q, want %q", p.id, q.id, dst, got, msg)
	}
	return nil
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

// checkMesh checks TCP from every pod to every other pod.
func (c *cluster) checkMesh() {
	t := c.t
	t.Helper()
	pods := c.allPods()
	var wg sync.WaitGroup
	errs := make(chan error, len(pods)*len(pods))
	for _, p := range pods {
		for _, q := range pods {
			if p != q {
				wg.Go(func() {
					if err := p.talk(q); err != nil {
						errs <- err
					}
				})
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("TCP ok between all %d pods over IPv4 and IPv6 (%d connections)", len(pods), 2*len(pods)*(len(pods)-1))
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

// blocksOf returns the blocks affine to node.
func (c *cluster) blocksOf(node string) []netip.Prefix {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := ipam.Keys{}
	kvs, _, err := c.ipamS.List(ctx, keys.NodeAffinities(node))
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Prefix
	for _, kv := range kvs {
		p, err := keys.ParseBlockKey(kv.Key)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
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
