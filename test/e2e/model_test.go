package e2e

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// What Kubernetes' network model promises and the shipped config
// (masquerade on) must keep: every pod reaches every other pod, on its
// node or another, without NAT (the peer sees the pod's own address),
// on a node that had forwarding off; and traffic that leaves the pools
// leaves under the node's address.

// forwardingKeys are the switches a node must have on to carry pod
// traffic, IPv4's and IPv6's.
var forwardingKeys = []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"}

// sysctl reads key in n's namespace.
func (n *node) sysctl(t testing.TB, key string) string {
	t.Helper()
	var v string
	err := netns.Do(n.ns.path, func() (err error) { v, err = dataplane.ReadSysctl(key); return err })
	if err != nil {
		t.Fatalf("node %s: %v", n.name, err)
	}
	return v
}

// checkForwarding: once n has pods, podnet has turned forwarding on for
// every family its pods have.
func (c *cluster) checkForwarding(n *node) {
	t := c.t
	t.Helper()
	keys := forwardingKeys[:1]
	if c.dualStack() {
		keys = forwardingKeys
	}
	for _, key := range keys {
		if v := n.sysctl(t, key); v != "1" {
			t.Errorf("node %s with pods: %s = %s, want 1 (podnet turns forwarding on)", n.name, key, v)
		}
	}
}

// addrs are the pod's addresses, IPv4 first.
func (p *pod) addrs() []netip.Addr {
	var out []netip.Addr
	for _, a := range []netip.Addr{p.ip, p.ip6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// own is the pod's address of dst's family.
func (p *pod) own(dst netip.Addr) netip.Addr {
	if dst.Is4() {
		return p.ip
	}
	return p.ip6
}

const echoPort = 7070

// serve starts a TCP server on each of the pod's addresses, inside the
// pod: it reads a message to its end and answers with the source address
// it saw and the message.
func (p *pod) serve(t *testing.T) {
	for _, ip := range p.addrs() {
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
				msg, err := io.ReadAll(conn)
				if err != nil {
					return
				}
				src := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
				_, _ = fmt.Fprintf(conn, "%s %s", src, msg)
			}()
		}
	}()
}

// talkTo opens a TCP connection from p to q's address dst and checks
// that the message comes back, and that q saw p's own address as the
// source.
func (p *pod) talkTo(q *pod, dst netip.Addr) error {
	what := fmt.Sprintf("%s -> %s (%s)", p.id, q.id, dst)
	var conn net.Conn
	err := netns.Do(p.ns, func() (err error) {
		conn, err = (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", net.JoinHostPort(dst.String(), fmt.Sprint(echoPort)))
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	msg := "hello from " + p.id
	if _, err := conn.Write([]byte(msg)); err != nil {
		return fmt.Errorf("%s: write: %w", what, err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("%s: read: %w", what, err)
	}
	seen, echoed, ok := strings.Cut(string(got), " ")
	if !ok || echoed != msg {
		return fmt.Errorf("%s: answer %q, want the source address seen and %q", what, got, msg)
	}
	if want := p.own(dst); seen != want.String() {
		return fmt.Errorf("%s: %s saw source %s, want %s's own address %s (no NAT between pods)", what, q.id, seen, p.id, want)
	}
	return nil
}

// checkTraffic checks TCP from every pod to every other pod's addresses,
// and UDP from every pod to the outside hosts, all at once, and reports
// every failure before it stops the test.
func (c *cluster) checkTraffic() {
	t := c.t
	t.Helper()
	pods := c.allPods()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	report := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	conns, outs := 0, 0
	for _, p := range pods {
		for _, q := range pods {
			if p == q {
				continue
			}
			for _, dst := range q.addrs() {
				conns++
				wg.Go(func() { report(p.talkTo(q, dst)) })
			}
		}
		for _, dst := range c.outsideAddrs() {
			outs++
			wg.Go(func() { report(c.outside.reach(p, dst)) })
		}
	}
	wg.Wait()
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d pods: %d TCP connections between them, each seen from the pod's own address; %d datagrams to outside hosts, each seen from the node's", len(pods), conns, outs)
}

// outsideAddrs are the outside hosts of the families the pods have.
func (c *cluster) outsideAddrs() []netip.Addr {
	if c.dualStack() {
		return []netip.Addr{c.u.outside4, c.u.outside6}
	}
	return []netip.Addr{c.u.outside4}
}

const outsidePort = 7071

// outsideHost answers UDP on the underlay's outside addresses with the
// source address it saw. It also remembers each message's source: a pod
// address that was not masqueraded has no route back from the outside,
// and the test must still say what the outside host saw.
type outsideHost struct {
	seq  atomic.Int64
	mu   sync.Mutex
	seen map[string]netip.Addr // by message
}

func startOutside(t *testing.T, u *underlay) *outsideHost {
	t.Helper()
	o := &outsideHost{seen: map[string]netip.Addr{}}
	for _, a := range []netip.Addr{u.outside4, u.outside6} {
		var conn *net.UDPConn
		err := netns.Do(u.hub.path, func() (err error) {
			conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, outsidePort)))
			return err
		})
		if err != nil {
			t.Fatalf("outside host %s: %v", a, err)
		}
		t.Cleanup(func() { conn.Close() })
		go o.serve(conn)
	}
	return o
}

func (o *outsideHost) serve(conn *net.UDPConn) {
	buf := make([]byte, 512)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		src := from.Addr().Unmap()
		o.mu.Lock()
		o.seen[string(buf[:n])] = src
		o.mu.Unlock()
		_, _ = conn.WriteToUDPAddrPort([]byte(src.String()), from)
	}
}

// reach sends a datagram from p to the outside host dst and checks that
// the host saw it from p's node's underlay address: masqueraded.
func (o *outsideHost) reach(p *pod, dst netip.Addr) error {
	want := p.node.addr
	if dst.Is6() {
		want = p.node.addr6
	}
	what := fmt.Sprintf("%s (%s) -> outside host %s", p.id, p.own(dst), dst)
	var conn *net.UDPConn
	err := netns.Do(p.ns, func() (err error) {
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, outsidePort)))
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer conn.Close()
	msg := fmt.Sprintf("%s #%d", what, o.seq.Add(1))
	buf := make([]byte, 64)
	var lastErr error
	// A datagram is retried: the first may wait on neighbour resolution.
	for range 3 {
		if _, err := conn.Write([]byte(msg)); err != nil {
			lastErr = err
			time.Sleep(100 * time.Millisecond)
			continue
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			lastErr = err
			continue
		}
		if got := string(buf[:n]); got != want.String() {
			return fmt.Errorf("%s: the outside host saw source %s, want %s, node %s's underlay address (masqueraded)", what, got, want, p.node.name)
		}
		return nil
	}
	o.mu.Lock()
	src, ok := o.seen[msg]
	o.mu.Unlock()
	if ok {
		return fmt.Errorf("%s: the outside host saw source %s, want %s, node %s's underlay address (masqueraded); its answer did not come back (%v)", what, src, want, p.node.name, lastErr)
	}
	return fmt.Errorf("%s: the outside host saw nothing, want it to see source %s, node %s's underlay address (masqueraded): %v", what, want, p.node.name, lastErr)
}

// multicast is never masqueraded: dataplane excludes it on every
// network.
var multicast = []netip.Prefix{netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("ff00::/8")}

// checkMasqClean, once every pod is deleted: nothing of them is left in
// n's masquerade sets. The pod sets are empty and the exclusion sets
// hold exactly the network's own prefixes (masqExclude and multicast),
// never an address of a pod.
func (c *cluster) checkMasqClean(n *node) {
	t := c.t
	t.Helper()
	f, err := os.Open(n.ns.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Name: dataplane.MasqTableName, Family: nftables.TableFamilyINet}
	sets, err := conn.GetSets(table)
	if err != nil {
		t.Errorf("node %s: sets of table inet %s: %v", n.name, table.Name, err)
		return
	}
	var excl4, excl6 []string
	for _, p := range append(slices.Clone(c.network.exclude), multicast...) {
		if p.Addr().Is4() {
			excl4 = append(excl4, p.String())
		} else {
			excl6 = append(excl6, p.String())
		}
	}
	name := c.network.name
	want := map[string]string{
		"pods4-" + name: "", "pods6-" + name: "",
		"nomasq4-" + name: joinSorted(excl4), "nomasq6-" + name: joinSorted(excl6),
	}
	got := map[string]string{}
	for _, s := range sets {
		elems, err := conn.GetSetElements(s)
		if err != nil {
			t.Errorf("node %s: elements of set %s: %v", n.name, s.Name, err)
			return
		}
		got[s.Name] = joinSorted(testutil.SetContents(s, elems))
	}
	if !maps.Equal(got, want) {
		t.Errorf("node %s after DEL of every pod: table inet %s holds %s, want %s", n.name, table.Name, describeSets(got), describeSets(want))
	}
}

func joinSorted(s []string) string {
	slices.Sort(s)
	return strings.Join(s, " ")
}

func describeSets(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s {%s}", k, m[k]))
	}
	return strings.Join(out, ", ")
}
