package e2enet

import (
	"fmt"
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
	"github.com/podnet/podnet/dataplane/nftlayout"
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
func (n *Node) sysctl(t testing.TB, key string) string {
	t.Helper()
	var v string
	err := netns.Do(n.NS.Path, func() (err error) { v, err = dataplane.ReadSysctl(key); return err })
	if err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	return v
}

// dualStack reports whether n's pods have IPv6 addresses too.
func (n *Node) dualStack() bool {
	return slices.ContainsFunc(n.Pools, func(p netip.Prefix) bool { return p.Addr().Is6() })
}

// CheckForwarding: once n has pods, podnet has turned forwarding on for
// every family its pods have.
func (c *Cluster) CheckForwarding(n *Node) {
	t := c.T
	t.Helper()
	keys := forwardingKeys[:1]
	if n.dualStack() {
		keys = forwardingKeys
	}
	for _, key := range keys {
		if v := n.sysctl(t, key); v != "1" {
			t.Errorf("node %s with pods: %s = %s, want 1 (podnet turns forwarding on)", n.Name, key, v)
		}
	}
}

// CheckTraffic checks TCP from every pod to every other pod's addresses,
// and UDP from every pod to the outside hosts of its families, all at
// once, and reports every failure before it stops the test.
func (c *Cluster) CheckTraffic() {
	t := c.T
	t.Helper()
	pods := c.AllPods()
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
			for _, dst := range q.Addrs() {
				if p.own(dst).IsValid() {
					conns++
					wg.Go(func() { report(p.talkTo(q, dst)) })
				}
			}
		}
		for _, dst := range c.outsideAddrs(p) {
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

// outsideAddrs are the outside hosts of the families p has.
func (c *Cluster) outsideAddrs(p *Pod) []netip.Addr {
	if p.IP6.IsValid() {
		return []netip.Addr{c.U.Outside4, c.U.Outside6}
	}
	return []netip.Addr{c.U.Outside4}
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

func startOutside(t testing.TB, u *Underlay) *outsideHost {
	t.Helper()
	o := &outsideHost{seen: map[string]netip.Addr{}}
	for _, a := range []netip.Addr{u.Outside4, u.Outside6} {
		var conn *net.UDPConn
		err := netns.Do(u.Hub.Path, func() (err error) {
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
func (o *outsideHost) reach(p *Pod, dst netip.Addr) error {
	want := p.Node.Addr
	if dst.Is6() {
		want = p.Node.Addr6
	}
	what := fmt.Sprintf("%s (%s) -> outside host %s", p.ID, p.own(dst), dst)
	var conn *net.UDPConn
	err := netns.Do(p.NS, func() (err error) {
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
			return fmt.Errorf("%s: the outside host saw source %s, want %s, node %s's underlay address (masqueraded)", what, got, want, p.Node.Name)
		}
		return nil
	}
	o.mu.Lock()
	src, ok := o.seen[msg]
	o.mu.Unlock()
	if ok {
		return fmt.Errorf("%s: the outside host saw source %s, want %s, node %s's underlay address (masqueraded); its answer did not come back (%v)", what, src, want, p.Node.Name, lastErr)
	}
	return fmt.Errorf("%s: the outside host saw nothing, want it to see source %s, node %s's underlay address (masqueraded): %v", what, want, p.Node.Name, lastErr)
}

// multicast is never masqueraded: dataplane excludes it on every
// network.
var multicast = []netip.Prefix{netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("ff00::/8")}

// CheckMasqClean, once every pod is deleted: nothing of them is left in
// n's masquerade sets. The pod sets are empty and the exclusion sets
// hold exactly the network's own prefixes (masqExclude and multicast),
// never an address of a pod.
func (c *Cluster) CheckMasqClean(n *Node) {
	t := c.T
	t.Helper()
	f, err := os.Open(n.NS.Path)
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
		t.Errorf("node %s: sets of table inet %s: %v", n.Name, table.Name, err)
		return
	}
	var excl4, excl6 []string
	for _, p := range append(slices.Clone(c.Network.Exclude), multicast...) {
		if p.Addr().Is4() {
			excl4 = append(excl4, p.String())
		} else {
			excl6 = append(excl6, p.String())
		}
	}
	name := c.Network.Name
	want := map[string]string{
		"pods4-" + name: "", "pods6-" + name: "",
		"nomasq4-" + name: joinSorted(excl4), "nomasq6-" + name: joinSorted(excl6),
		nftlayout.MarkerName(dataplane.MasqLayout): "", // the table's layout marker
	}
	got := map[string]string{}
	for _, s := range sets {
		elems, err := conn.GetSetElements(s)
		if err != nil {
			t.Errorf("node %s: elements of set %s: %v", n.Name, s.Name, err)
			return
		}
		got[s.Name] = joinSorted(testutil.SetContents(s, elems))
	}
	if !maps.Equal(got, want) {
		t.Errorf("node %s after DEL of every pod: table inet %s holds %s, want %s", n.Name, table.Name, describeSets(got), describeSets(want))
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
