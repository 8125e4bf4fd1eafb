package policyrules

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/policy"
)

// The test network: a node namespace routing, as podnet's routed mode
// does (a /32 and a /128 per pod to its host veth; the pods' gateways
// are 169.254.1.1 by proxy ARP and fe80::1 on every host veth), for
// local pods in namespaces of their own, and an "outside" namespace on
// the node's uplink that holds another node (n2, which also runs a
// remote pod) and an external host.
var (
	nodeIP4, nodeIP6         = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00:198:18::1")
	n2IP4, n2IP6             = netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("fd00:198:18::2")
	externalIP4, externalIP6 = netip.MustParseAddr("198.19.0.10"), netip.MustParseAddr("fd00:198:19::10")
	remoteIP4, remoteIP6     = netip.MustParseAddr("10.245.0.7"), netip.MustParseAddr("fd00:245::7")
	gateway4, gateway6       = netip.MustParseAddr("169.254.1.1"), netip.MustParseAddr("fe80::1")
)

// tcpPorts and udpPorts are where every namespace listens.
var (
	tcpPorts = []uint16{53, 80, 81, 8080}
	udpPorts = []uint16{53, 80}
)

type topology struct {
	node, outside string // namespace paths
	pods          []*podNS
	// nsOf maps every address of the test to the namespace that has it.
	nsOf map[netip.Addr]string
	udp  *udpLog
}

type podNS struct {
	key    policy.PodKey
	path   string
	v4, v6 netip.Addr
}

func podAddrs(i int) (netip.Addr, netip.Addr) {
	return netip.AddrFrom4([4]byte{10, 244, 0, byte(i + 2)}), netip.MustParseAddr(fmt.Sprintf("fd00:244::%x", i+2))
}

// newTopology builds the network with n local pods, named by keys, and
// starts the listeners. Everything goes with t.
func newTopology(t testing.TB, keys []policy.PodKey) *topology {
	t.Helper()
	testutil.RequireRoot(t)
	tp := &topology{nsOf: map[netip.Addr]string{}, udp: &udpLog{seen: map[string]bool{}}}
	_, tp.node = testutil.NewNodeNetNS(t)
	_, tp.outside = testutil.NewNetNS(t)
	sysctls := append(dataplane.NodeForwardingSysctls(true, true),
		dataplane.Sysctl{Key: "net/ipv6/conf/default/accept_dad", Value: "0"},
		dataplane.Sysctl{Key: "net/ipv4/conf/all/rp_filter", Value: "0"},
		dataplane.Sysctl{Key: "net/ipv4/conf/default/rp_filter", Value: "0"})
	must(t, netns.Do(tp.node, func() error { return dataplane.WriteSysctls(sysctls) }))
	nh := handle(t, tp.node)

	// The uplink and the outside.
	uplink := veth(t, nh, "up0", tp.outside)
	must(t, dataplane.AddAddr(nh, uplink, netip.MustParsePrefix("198.18.0.1/24")))
	must(t, dataplane.AddAddr(nh, uplink, netip.MustParsePrefix("fd00:198:18::1/64")))
	// The default routes also make proxy ARP answer for the pods'
	// gateway: it answers for addresses routed through another link.
	must(t, nh.RouteAdd(&netlink.Route{Gw: n2IP4.AsSlice()}))
	must(t, nh.RouteAdd(&netlink.Route{Dst: dataplane.IPNet(netip.MustParsePrefix("::/0")), Gw: n2IP6.AsSlice()}))
	oh := handle(t, tp.outside)
	must(t, netns.Do(tp.outside, func() error {
		return dataplane.WriteSysctls([]dataplane.Sysctl{{Key: "net/ipv6/conf/all/accept_dad", Value: "0"}, {Key: "net/ipv6/conf/eth0/accept_dad", Value: "0"}})
	}))
	oif := linkUp(t, oh, "eth0")
	linkUp(t, oh, "lo")
	for _, p := range []string{"198.18.0.2/24", "fd00:198:18::2/64"} {
		must(t, dataplane.AddAddr(oh, oif, netip.MustParsePrefix(p)))
	}
	for _, a := range []netip.Addr{externalIP4, externalIP6, remoteIP4, remoteIP6} {
		must(t, dataplane.AddAddr(oh, 1, dataplane.HostPrefix(a)))
	}
	must(t, oh.RouteAdd(&netlink.Route{Dst: dataplane.IPNet(netip.MustParsePrefix("10.244.0.0/16")), Gw: nodeIP4.AsSlice()}))
	must(t, oh.RouteAdd(&netlink.Route{Dst: dataplane.IPNet(netip.MustParsePrefix("fd00:244::/64")), Gw: nodeIP6.AsSlice()}))
	for _, a := range []netip.Addr{n2IP4, n2IP6, externalIP4, externalIP6, remoteIP4, remoteIP6} {
		tp.nsOf[a] = tp.outside
	}
	tp.nsOf[nodeIP4], tp.nsOf[nodeIP6] = tp.node, tp.node

	// The pods.
	for i, k := range keys {
		p := &podNS{key: k}
		p.v4, p.v6 = podAddrs(i)
		_, p.path = testutil.NewNetNS(t)
		must(t, netns.Do(p.path, func() error {
			return dataplane.WriteSysctls([]dataplane.Sysctl{{Key: "net/ipv6/conf/default/accept_dad", Value: "0"}, {Key: "net/ipv6/conf/all/accept_dad", Value: "0"}})
		}))
		hostIf := fmt.Sprintf("pv%d", i)
		idx := veth(t, nh, hostIf, p.path)
		must(t, netns.Do(tp.node, func() error { return dataplane.WriteSysctls(dataplane.RoutedHostSysctls(hostIf, true, true)) }))
		must(t, dataplane.AddAddr(nh, idx, netip.MustParsePrefix("fe80::1/64")))
		must(t, dataplane.AddHostRoute(nh, idx, p.v4))
		must(t, dataplane.AddHostRoute(nh, idx, p.v6))
		ph := handle(t, p.path)
		linkUp(t, ph, "lo")
		eth := linkUp(t, ph, "eth0")
		must(t, dataplane.AddAddr(ph, eth, dataplane.HostPrefix(p.v4)))
		must(t, dataplane.AddAddr(ph, eth, dataplane.HostPrefix(p.v6)))
		must(t, ph.RouteAdd(&netlink.Route{LinkIndex: eth, Dst: dataplane.IPNet(dataplane.HostPrefix(gateway4)), Scope: netlink.SCOPE_LINK}))
		must(t, ph.RouteAdd(&netlink.Route{LinkIndex: eth, Gw: gateway4.AsSlice()}))
		must(t, ph.RouteAdd(&netlink.Route{LinkIndex: eth, Gw: gateway6.AsSlice(), Dst: dataplane.IPNet(netip.MustParsePrefix("::/0"))}))
		tp.pods = append(tp.pods, p)
		tp.nsOf[p.v4], tp.nsOf[p.v6] = p.path, p.path
	}
	for _, ns := range append([]string{tp.node, tp.outside}, tp.podPaths()...) {
		tp.listen(t, ns)
	}
	// Without policy, every pair must connect: the network itself works.
	for _, p := range tp.pods {
		for _, dst := range []netip.Addr{nodeIP4, nodeIP6, externalIP4, externalIP6, remoteIP4, remoteIP6} {
			src := p.v4
			if dst.Is6() {
				src = p.v6
			}
			if !tp.probe(src, dst, policy.TCP, 80, 3*time.Second) {
				t.Fatalf("topology: %s cannot reach %s without policy", src, dst)
			}
		}
	}
	return tp
}

func (tp *topology) podPaths() []string {
	var out []string
	for _, p := range tp.pods {
		out = append(out, p.path)
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func handle(t testing.TB, path string) *netlink.Handle {
	t.Helper()
	var h *netlink.Handle
	must(t, netns.Do(path, func() (err error) { h, err = dataplane.NewHandle(); return err }))
	t.Cleanup(h.Close)
	return h
}

// veth makes name in the namespace of h with its peer eth0 in peerNS, up.
func veth(t testing.TB, h *netlink.Handle, name, peerNS string) int {
	t.Helper()
	f, err := os.Open(peerNS)
	must(t, err)
	defer f.Close()
	idx, err := dataplane.CreateVeth(h, dataplane.Veth{HostName: name, PeerName: "eth0", PeerNSFd: int(f.Fd())})
	must(t, err)
	must(t, dataplane.SetUp(h, idx))
	return idx
}

func linkUp(t testing.TB, h *netlink.Handle, name string) int {
	t.Helper()
	l, err := h.LinkByName(name)
	must(t, err)
	must(t, h.LinkSetUp(l))
	return l.Attrs().Index
}

// udpLog records the probes that arrived, by payload.
type udpLog struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (u *udpLog) add(s string) {
	u.mu.Lock()
	u.seen[s] = true
	u.mu.Unlock()
}

func (u *udpLog) has(s string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[s]
}

// listen starts TCP and UDP listeners on every address of the namespace
// (dual stack); they stop with t.
func (tp *topology) listen(t testing.TB, ns string) {
	t.Helper()
	var closers []io.Closer
	must(t, netns.Do(ns, func() error {
		for _, port := range tcpPorts {
			l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			closers = append(closers, l)
			go serveEcho(l)
		}
		for _, port := range udpPorts {
			c, err := net.ListenPacket("udp", fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			closers = append(closers, c)
			go func() {
				buf := make([]byte, 256)
				for {
					n, _, err := c.ReadFrom(buf)
					if err != nil {
						return
					}
					tp.udp.add(string(buf[:n]))
				}
			}()
		}
		return nil
	}))
	t.Cleanup(func() {
		for _, c := range closers {
			c.Close()
		}
	})
}

// serveEcho echoes what each connection sends, until the listener closes.
func serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

var probeSeq struct {
	sync.Mutex
	n int
}

// probe sends a TCP SYN or a UDP datagram from src (in its namespace) to
// dst and reports whether it got through within wait.
func (tp *topology) probe(src, dst netip.Addr, proto policy.Protocol, port uint16, wait time.Duration) bool {
	ns := tp.nsOf[src]
	switch proto {
	case policy.TCP:
		ok := false
		err := netns.Do(ns, func() error {
			d := net.Dialer{Timeout: wait, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
			c, err := d.Dial("tcp", netip.AddrPortFrom(dst, port).String())
			if err == nil {
				ok = true
				c.Close()
			}
			return nil
		})
		return err == nil && ok
	case policy.UDP:
		probeSeq.Lock()
		probeSeq.n++
		id := fmt.Sprintf("probe %d %s %s %d", probeSeq.n, src, dst, port)
		probeSeq.Unlock()
		err := netns.Do(ns, func() error {
			c, err := net.DialUDP("udp", &net.UDPAddr{IP: src.AsSlice()}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, port)))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte(id))
			return err
		})
		if err != nil {
			return false
		}
		deadline := time.Now().Add(wait)
		for {
			if tp.udp.has(id) {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return false
}

// dialIn opens a TCP connection from src to dst:port in src's namespace.
func (tp *topology) dialIn(src, dst netip.Addr, port uint16, wait time.Duration) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(tp.nsOf[src], func() (err error) {
		d := net.Dialer{Timeout: wait, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
		c, err = d.Dial("tcp", netip.AddrPortFrom(dst, port).String())
		return err
	})
	return c, err
}

// echo reports whether c carries a message there and back within wait.
func echo(c net.Conn, msg string, wait time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		return err
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return errors.New("echo: got " + string(buf))
	}
	return nil
}

// rendererIn opens a Renderer in the node's namespace.
func (tp *topology) renderer(t testing.TB, opts ...Option) *Renderer {
	t.Helper()
	f, err := os.Open(tp.node)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	r, err := New("n1", append([]Option{WithNetNSFd(int(f.Fd()))}, opts...)...)
	must(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

var _ = unix.AF_INET
