package e2enet

import (
	"bytes"
	"context"
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

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

const (
	// GCInterval and GCGrace are the agents' IPAM GC settings: GC runs
	// often and with a short grace period so that a test sees it work; a
	// pod's ADD (allocation to cached result) takes far less.
	GCInterval = 250 * time.Millisecond
	GCGrace    = 2 * time.Second
	// metricsAddr is where every agent serves, inside its node.
	metricsAddr = "127.0.0.1:9603"
)

// Cluster is an underlay and nodes with agents. The caller sets NetConf,
// Network and AgentFlags before it starts an agent.
type Cluster struct {
	T testing.TB
	U *Underlay
	// Mode is the agents' --mode.
	Mode route.Mode
	// Podnet is the podnet binary (CLI and agent); PluginDir holds the
	// plugins the agents install.
	Podnet, PluginDir string
	// Dir holds the nodes' directories; removed at the end.
	Dir string
	// NetConf is the conflist the agents install (--network-config),
	// under the name the DaemonSet mounts the ConfigMap's key as.
	NetConf string
	// Network is what the installed config says the checks need.
	Network Network
	// AgentFlags are the datastore's flags for n's agent.
	AgentFlags func(n *Node) []string
	// AgentWrap, when set, is the command line that runs n's agent
	// given the agent's own (argv): a wrapper that must exec it, so that
	// the agent keeps the PID the test signals.
	AgentWrap func(n *Node, argv []string) []string

	outside *outsideHost
	nodes   []*Node
}

// Network is the installed network: its name and masqExclude.
type Network struct {
	Name    string
	Exclude []netip.Prefix
}

// Node is a node namespace on the underlay with its agent.
type Node struct {
	Name string
	NS   *NS
	// Addr and Addr6 are its underlay addresses.
	Addr, Addr6 netip.Addr
	// Dir holds its CNI directories (bin, net.d, cache) and what its
	// datastore flags put there.
	Dir string
	// Pools are the prefixes its pods' addresses come from: one address
	// of each family in them.
	Pools []netip.Prefix
	Pods  []*Pod

	agent   *exec.Cmd
	exited  chan struct{}
	exitErr error // once exited is closed
	log     *SyncBuffer
	runtime *cni.Runtime
}

// New builds the podnet binary and plugins, as `make build` does, and
// starts the outside hosts on u.
func New(t testing.TB, u *Underlay, mode route.Mode) *Cluster {
	t.Helper()
	dir := t.TempDir()
	c := &Cluster{T: t, U: u, Mode: mode, Dir: dir}
	binDir := filepath.Join(dir, "bin")
	c.PluginDir = filepath.Join(binDir, "cni")
	if err := os.MkdirAll(c.PluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.Podnet = testutil.BuildBinary(t, "./cmd/podnet", binDir)
	testutil.BuildBinary(t, "./plugins/podnet", c.PluginDir)
	testutil.BuildBinary(t, "./plugins/podnet-ipam", c.PluginDir)
	c.outside = startOutside(t, u)
	return c
}

// Nodes are the cluster's nodes in the order they were added.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// AddNode creates node i's namespace (node "n<i>") on the underlay,
// with forwarding off as on a fresh host; it has no agent yet. Its pods
// take their addresses from pools.
func (c *Cluster) AddNode(i int, pools ...netip.Prefix) *Node {
	t := c.T
	t.Helper()
	n := &Node{Name: fmt.Sprintf("n%d", i), NS: newNodeNS(t), Dir: filepath.Join(c.Dir, fmt.Sprintf("n%d", i)), Pools: pools}
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.Addr, n.Addr6 = c.U.attach(t, n.NS, i)
	// Nothing of this machine's may stand in for what podnet must do.
	for _, key := range forwardingKeys {
		if v := n.sysctl(t, key); v != "0" {
			t.Fatalf("node %s before its agent: %s = %s, want 0 as on a fresh host", n.Name, key, v)
		}
	}
	n.runtime = cni.NewRuntime([]string{filepath.Join(n.Dir, "bin")}, cni.WithCacheDir(filepath.Join(n.Dir, "cache")),
		cni.WithExec(&cni.RawExec{HostNetNS: n.NS.Path}))
	c.nodes = append(c.nodes, n)
	return n
}

// ConfPath is where n's agent installs the network config.
func (c *Cluster) ConfPath(n *Node) string {
	return filepath.Join(n.Dir, "net.d", filepath.Base(c.NetConf))
}

// StartAgent runs `podnet agent` inside the node's namespace, with the
// datastore's flags and extra, and waits until it is ready.
func (c *Cluster) StartAgent(n *Node, extra ...string) {
	c.T.Helper()
	c.LaunchAgent(n, extra...)
	c.WaitReady(n)
}

// LaunchAgent is StartAgent without the wait: the agent may wait for
// something its datastore has not said yet.
func (c *Cluster) LaunchAgent(n *Node, extra ...string) {
	t := c.T
	t.Helper()
	n.log = &SyncBuffer{}
	cmd := exec.Command(c.Podnet, "agent", "--node", n.Name, "--mode", string(c.Mode),
		"--underlay-interface", "eth0", "--metrics-addr", metricsAddr,
		"--gc-interval", GCInterval.String(), "--gc-grace", GCGrace.String(), "--log-level", "info",
		"--install", "--src-dir", c.PluginDir, "--network-config", c.NetConf,
		"--conf-dir", filepath.Join(n.Dir, "net.d"), "--bin-dir", filepath.Join(n.Dir, "bin"),
		"--cache-dir", filepath.Join(n.Dir, "cache"),
		// The node's own record of the sysctls its agent changes, never
		// the machine's /var/lib/podnet.
		"--sysctl-record", filepath.Join(n.Dir, "sysctls.json"))
	cmd.Args = append(cmd.Args, c.AgentFlags(n)...)
	cmd.Args = append(cmd.Args, extra...)
	if c.AgentWrap != nil {
		argv := c.AgentWrap(n, cmd.Args)
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	cmd.Stdout, cmd.Stderr = n.log, n.log
	// Its own process group, so a terminal's signals do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := netns.Do(n.NS.Path, cmd.Start); err != nil {
		t.Fatal(err)
	}
	n.agent, n.exited = cmd, make(chan struct{})
	go func() { n.exitErr = cmd.Wait(); close(n.exited) }()
	t.Cleanup(func() { c.StopAgent(n, syscall.SIGTERM) })
}

// StopAgent signals the node's agent (a process this test started) and
// waits for it to exit; after SIGTERM it must exit cleanly.
func (c *Cluster) StopAgent(n *Node, sig syscall.Signal) {
	if n.agent == nil {
		return
	}
	cmd, exited := n.agent, n.exited
	n.agent = nil
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		c.T.Errorf("agent %s did not exit after %v; killing it", n.Name, sig)
		_ = cmd.Process.Kill()
		<-exited
	}
	if sig == syscall.SIGTERM && n.exitErr != nil {
		c.T.Errorf("agent %s: exit after SIGTERM: %v", n.Name, n.exitErr)
	}
	if c.T.Failed() {
		c.T.Logf("agent %s log:\n%s", n.Name, n.log.String())
	}
}

// WaitReady waits until n's agent serves /readyz with 200 OK.
func (c *Cluster) WaitReady(n *Node) {
	t := c.T
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Ready(n)
		if err == nil {
			return
		}
		select {
		case <-n.exited:
			t.Fatalf("agent %s exited:\n%s", n.Name, n.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s not ready after 30s (%v):\n%s", n.Name, err, n.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ready is nil once n's agent serves /readyz with 200 OK, else why not:
// the agent's own reason when it answers.
func (c *Cluster) Ready(n *Node) error {
	resp, err := HTTPIn(n.NS.Path).Get("http://" + metricsAddr + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// Get fetches path from the node agent's metrics server.
func (c *Cluster) Get(n *Node, path string) string {
	t := c.T
	t.Helper()
	resp, err := HTTPIn(n.NS.Path).Get("http://" + metricsAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// DialerIn dials from inside the namespace at path: the socket belongs to
// the namespace it was created in, whichever thread uses it later.
func DialerIn(path string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var c net.Conn
		err := netns.Do(path, func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	}
}

// HTTPIn is an HTTP client whose connections start in the namespace.
func HTTPIn(path string) *http.Client {
	d := DialerIn(path)
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return d(ctx, addr) },
	}}
}

// SyncBuffer is a bytes.Buffer safe for a process writing while a test
// reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Log is what n's agent has written (stdout and stderr) since it was
// last started.
func (n *Node) Log() string {
	if n.log == nil {
		return ""
	}
	return n.log.String()
}

// AgentPID is the PID of n's running agent (a process this test
// started), 0 when it has none: to run a command in its namespaces.
func (n *Node) AgentPID() int {
	if n.agent == nil || n.agent.Process == nil {
		return 0
	}
	return n.agent.Process.Pid
}
