package netpol

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
	itestutil "github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// node is a node namespace with the podnet plugin and the test IPAM, a
// fake API, and an agent's policy service and handshake that the test
// starts and stops.
type node struct {
	t      testing.TB
	c      *cluster
	bin    string
	host   string // the node's namespace
	socket string // the handshake's

	stop func() // the running agent's, nil when stopped
}

func newNode(t testing.TB) *node {
	t.Helper()
	itestutil.RequireRoot(t)
	n := &node{t: t, c: newCluster(t), bin: t.TempDir(), socket: filepath.Join(t.TempDir(), "policy.sock")}
	itestutil.BuildBinary(t, "./plugins/podnet", n.bin)
	itestutil.BuildBinaryAs(t, "./internal/testipamplugin", n.bin, "testipamplugin")
	_, n.host = itestutil.NewNodeNetNS(t)
	n.c.addNamespace("x", nil)
	n.c.addNode(self, "198.18.0.1")
	t.Cleanup(func() { n.stopAgent() })
	return n
}

// startAgent runs the policy service and its handshake on the node, as
// the agent does with --network-policy.
func (n *node) startAgent() *Service {
	n.t.Helper()
	s := New(Config{Node: self, NetNS: n.host, Sources: n.c.sources(), Debounce: time.Millisecond, CRDRecheck: 50 * time.Millisecond})
	adm := s.Admission(AdmissionConfig{Socket: n.socket, Rescan: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { errs <- s.Run(ctx) }()
	go func() { errs <- adm.Run(ctx) }()
	n.stop = func() {
		cancel()
		for range 2 {
			if err := <-errs; err != nil {
				n.t.Errorf("agent: %v", err)
			}
		}
	}
	select {
	case <-adm.ReadyC():
	case <-time.After(10 * time.Second):
		n.t.Fatal("handshake socket not listening")
	}
	return s
}

func (n *node) stopAgent() {
	if n.stop != nil {
		n.stop()
		n.stop = nil
	}
}

// testPod is one sandbox: its namespace, and the /29 its IPAM gives it
// (the first address the gateway, the second the pod's).
type testPod struct {
	name, ns, dataDir string
	rng               netip.Prefix
}

func (p *testPod) addr() netip.Addr { return p.rng.Addr().Next().Next() }

func (n *node) newPod(name string, i int) *testPod {
	_, ns := itestutil.NewNetNS(n.t)
	return &testPod{name: name, ns: ns, dataDir: n.t.TempDir(),
		rng: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, 0, byte(8 * i)}), 29)}
}

func (n *node) conf(p *testPod, withSocket bool) string {
	sock := ""
	if withSocket {
		sock = fmt.Sprintf(`,"policySocket":%q`, n.socket)
	}
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":"testnet","type":"podnet","mode":"routed"%s,"ipam":{"type":"testipamplugin","dataDir":%q,"ranges":[%q]}}`,
		sock, p.dataDir, p.rng)
}

// exec runs the plugin in the node's namespace, as a runtime would,
// with the pod's identity in CNI_ARGS.
func (n *node) exec(verb string, p *testPod, conf string) error {
	env := []string{"CNI_COMMAND=" + verb, "CNI_PATH=" + n.bin, "PATH=/usr/bin:/bin", "CNI_CONTAINERID=ctr-" + p.name,
		"CNI_IFNAME=eth0", "CNI_NETNS=" + p.ns, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=x;K8S_POD_NAME=" + p.name}
	_, err := (&cni.RawExec{HostNetNS: n.host}).ExecPlugin(context.Background(), filepath.Join(n.bin, "podnet"), []byte(conf), env)
	return err
}

func (n *node) add(p *testPod, withSocket bool) {
	n.t.Helper()
	if err := n.exec("ADD", p, n.conf(p, withSocket)); err != nil {
		n.t.Fatalf("ADD %s: %v", p.name, err)
	}
}

func (n *node) closed() []dataplane.ClosedPod {
	n.t.Helper()
	var out []dataplane.ClosedPod
	err := netns.Do(n.host, func() error {
		c, err := dataplane.NewClosed("", 0)
		if err != nil {
			return err
		}
		defer c.Close()
		out, err = c.List()
		return err
	})
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// udpServer counts the datagrams a socket in ns receives on port, by
// source, with the time of the first from each.
type udpServer struct {
	mu    sync.Mutex
	count map[netip.Addr]int
	first map[netip.Addr]time.Time
	conn  *net.UDPConn
}

func listenUDP(t testing.TB, ns string, port int) *udpServer {
	t.Helper()
	s := &udpServer{count: map[netip.Addr]int{}, first: map[netip.Addr]time.Time{}}
	if err := netns.Do(ns, func() (err error) {
		s.conn, err = net.ListenUDP("udp4", &net.UDPAddr{Port: port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := s.conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			a := from.Addr().Unmap()
			if s.count[a] == 0 {
				s.first[a] = time.Now()
			}
			s.count[a]++
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *udpServer) from(a netip.Addr) (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[a], s.first[a]
}

// sendUDP sends a datagram every millisecond from ns to dst until ctx
// ends; errors (no route yet, unreachable) are expected and ignored.
func sendUDP(ctx context.Context, t testing.TB, ns string, dst netip.AddrPort, sent *atomic.Int64) {
	var c *net.UDPConn
	if err := netns.Do(ns, func() (err error) { c, err = net.ListenUDP("udp4", nil); return err }); err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := c.WriteToUDPAddrPort([]byte("x"), dst); err == nil {
				sent.Add(1)
			}
		}
	}
}

// TestFirstPacketClosed is issue 22's first-packet guarantee with the
// agent stopped: a pod that a policy selects (x/db, ingress from app=web
// only) is wired while nothing answers the handshake, with a server
// listening in its namespace and clients in a pod the policy allows
// (web) and one it denies (other) sending to it from before its ADD
// starts, and the pod itself sending to the denied one. Until the agent
// is back nothing passes either way; once it has admitted the pod the
// allowed client gets through and the denied one never does. Without
// the handshake (no policySocket), the pod would be open from its ADD
// until the agent learnt of it, and the first check fails.
func TestFirstPacketClosed(t *testing.T) {
	n := newNode(t)
	n.c.addPolicy(denyFrom("x", "db", "db", "web"))
	db, web, other := n.newPod("db", 1), n.newPod("web", 2), n.newPod("other", 3)
	for _, p := range []*testPod{db, web, other} {
		n.c.addPod(apiPod("x", p.name, self, map[string]string{"app": p.name}))
	}

	// The allowed and the denied client are wired while the agent is
	// up; no policy selects them, so their ADDs do not wait for rules.
	n.startAgent()
	n.add(web, true)
	n.add(other, true)
	if c := n.closed(); len(c) != 0 {
		t.Fatalf("closed pods after the ADDs of unselected pods with the agent up: %+v", c)
	}
	// The kubelet reports their addresses; the agent restarted later
	// learns them from the API.
	for _, p := range []*testPod{web, other} {
		n.c.updatePod(apiPod("x", p.name, self, map[string]string{"app": p.name}, p.addr().String()))
	}
	n.stopAgent()

	// The server listens before its pod's ADD; the clients send from
	// the same instant, and so does the pod.
	srv := listenUDP(t, db.ns, 9000)
	otherSrv := listenUDP(t, other.ns, 9000)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sentWeb, sentOther, sentDB atomic.Int64
	wg.Go(func() { sendUDP(ctx, t, web.ns, netip.AddrPortFrom(db.addr(), 9000), &sentWeb) })
	wg.Go(func() { sendUDP(ctx, t, other.ns, netip.AddrPortFrom(db.addr(), 9000), &sentOther) })
	wg.Go(func() { sendUDP(ctx, t, db.ns, netip.AddrPortFrom(other.addr(), 9000), &sentDB) })
	defer func() { cancel(); wg.Wait() }()

	start := time.Now()
	n.add(db, true)
	addTook := time.Since(start)
	c := n.closed()
	if len(c) != 1 || c[0].Pod != "x/db" || !slices.Equal(c[0].Addrs, []netip.Addr{db.addr()}) {
		t.Errorf("closed pods after ADD with the agent stopped: %+v, want x/db with %s", c, db.addr())
	}
	t.Logf("ADD with no agent listening took %v", addTook)
	time.Sleep(500 * time.Millisecond)
	if sentDB.Load() == 0 {
		t.Fatal("the pod sent nothing: the probe is broken")
	}
	for _, from := range []netip.Addr{web.addr(), other.addr()} {
		if got, _ := srv.from(from); got != 0 {
			t.Errorf("the closed pod received %d datagrams from %s before the agent came back", got, from)
		}
	}
	if got, _ := otherSrv.from(db.addr()); got != 0 {
		t.Errorf("the closed pod sent %d datagrams before the agent came back", got)
	}

	// The agent comes back: it finds the closed pod, admits it with
	// the addresses in the closed set (the API has none yet), and opens
	// it once its rules are in place.
	back := time.Now()
	n.startAgent()
	itestutil.Eventually(t, "the allowed client reaches the pod", 10*time.Second, func() bool {
		got, _ := srv.from(web.addr())
		return got > 0
	})
	_, first := srv.from(web.addr())
	t.Logf("first allowed datagram %v after the agent started", first.Sub(back))
	itestutil.Eventually(t, "the closed entry removed", 5*time.Second, func() bool { return len(n.closed()) == 0 })
	itestutil.Eventually(t, "the pod's own traffic out", 5*time.Second, func() bool {
		got, _ := otherSrv.from(db.addr())
		return got > 0
	})
	time.Sleep(300 * time.Millisecond) // the denied client keeps trying
	if got, _ := srv.from(other.addr()); got != 0 {
		t.Errorf("the denied client's datagrams reached the pod %d times", got)
	}
	if sentOther.Load() == 0 || sentWeb.Load() == 0 {
		t.Errorf("clients sent %d (web) and %d (other) datagrams: the probe is broken", sentWeb.Load(), sentOther.Load())
	}

	// DEL leaves nothing closed, and a second DEL is fine.
	for range 2 {
		if err := n.exec("DEL", db, n.conf(db, true)); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
}

// TestAdmittedWithAgentUp: with the agent up, the ADD of a selected pod
// returns with the pod's rules in the kernel and nothing closed, and the
// ADD of a pod no policy selects asks for no rebuild: it waits for the
// agent's cache lookup alone.
func TestAdmittedWithAgentUp(t *testing.T) {
	n := newNode(t)
	n.c.addPolicy(denyFrom("x", "db", "db", "web"))
	db, web := n.newPod("db", 1), n.newPod("web", 2)
	for _, p := range []*testPod{db, web} {
		n.c.addPod(apiPod("x", p.name, self, map[string]string{"app": p.name}))
	}
	s := n.startAgent()
	itestutil.Eventually(t, "the first apply", 10*time.Second, func() bool { return s.Ready() == nil })

	n.add(db, true)
	tb := readTable(t, n.host)
	if !slices.Contains(tb.maps["in4"], db.addr().String()) {
		t.Errorf("when the selected pod's ADD returned, in4 held %v, want its address %s", tb.maps["in4"], db.addr())
	}
	if c := n.closed(); len(c) != 0 {
		t.Errorf("closed pods after a handshake answered: %+v", c)
	}

	before := s.reqGen.Load()
	n.add(web, true)
	if after := s.reqGen.Load(); after != before {
		t.Errorf("the ADD of a pod no policy selects asked for %d rebuilds", after-before)
	}
	if c := n.closed(); len(c) != 0 {
		t.Errorf("closed pods after a handshake answered: %+v", c)
	}
}
