package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables/expr"
	"github.com/podnet/podnet/dataplane/nflog"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/netns"
	"github.com/vishvananda/netlink"
)

// guardLog collects the NFLOG records of group FlowLogGroup.
type guardLog struct {
	mu   sync.Mutex
	recs []nflog.Record
}

func (l *guardLog) from(src netip.Addr) []nflog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []nflog.Record
	for _, r := range l.recs {
		if r.Src == src {
			out = append(out, r)
		}
	}
	return out
}

func listenGuardLog(t *testing.T, path string) *guardLog {
	t.Helper()
	c, err := nflog.Listen(FlowLogGroup, nflog.WithNetNSFd(nsFd(t, path)))
	if err != nil {
		t.Fatal(err)
	}
	l := &guardLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			recs, err := c.Receive()
			if errors.Is(err, nflog.ErrLost) {
				continue
			}
			if err != nil {
				return
			}
			l.mu.Lock()
			l.recs = append(l.recs, recs...)
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return l
}

// TestGuardLogsDrops: a packet the source guard drops, for a forged
// source address or a forged MAC, comes on NFLOG group FlowLogGroup with
// the prefix GuardLogPrefix; a packet it accepts still gets through and
// is not logged. For a routed pod (inet table) and a bridge port (bridge
// table).
func TestGuardLogsDrops(t *testing.T) {
	for _, bridged := range []bool{false, true} {
		t.Run(fmt.Sprintf("bridged=%v", bridged), func(t *testing.T) { testGuardLogsDrops(t, bridged) })
	}
}

// guardedPod is a pod behind a guarded host veth (a bridge port when
// bridged) with a second, unguarded address, and a UDP server on the
// host's 10.1.0.1:9999.
type guardedPod struct {
	host, ctr string
	ch        *netlink.Handle
	eth       netlink.Link
	gwMAC     net.HardwareAddr
	srv       *net.UDPConn
}

func newGuardedPod(t *testing.T, bridged bool, own netip.Addr) *guardedPod {
	gp := &guardedPod{host: newNS(t), ctr: newNS(t)}
	hh := handleIn(t, gp.host)
	gp.ch = handleIn(t, gp.ctr)
	name := HostVethName("ctr1", "eth0")
	hmac, cmac := AttachmentMACs("ctr1", "eth0")
	idx, err := CreateVeth(hh, Veth{HostName: name, HostMAC: hmac, PeerName: "eth0", PeerMAC: cmac, PeerNSFd: nsFd(t, gp.ctr)})
	must(t, err)
	gw := idx
	gp.gwMAC = hmac
	if bridged {
		br, err := EnsureBridge(hh, Bridge{Name: "br0"})
		must(t, err)
		must(t, SetMaster(hh, idx, br.Index))
		gw, gp.gwMAC = br.Index, br.HardwareAddr
	}
	must(t, AddAddr(hh, gw, netip.MustParsePrefix("10.1.0.1/24")))
	gp.eth, err = LinkByName(gp.ch, "eth0")
	must(t, err)
	for _, p := range []string{own.String() + "/24", "10.1.0.99/24"} {
		must(t, AddAddr(gp.ch, gp.eth.Attrs().Index, netip.MustParsePrefix(p)))
	}
	must(t, SetUp(gp.ch, gp.eth.Attrs().Index))
	g := Guard{Owner: tag.Owner{Network: "n1", ContainerID: "ctr1", IfName: "eth0"}, HostIf: name, PodMAC: cmac, Addrs: []netip.Addr{own}, Bridged: bridged}
	must(t, netns.Do(gp.host, func() error {
		gs, err := NewGuards()
		if err != nil {
			return err
		}
		defer gs.Close()
		return gs.Install(g)
	}))
	must(t, netns.Do(gp.host, func() (err error) {
		gp.srv, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(10, 1, 0, 1), Port: 9999})
		return err
	}))
	t.Cleanup(func() { gp.srv.Close() })
	return gp
}

// send sends msg from src in the pod to the host's server.
func (gp *guardedPod) send(t *testing.T, src netip.Addr, msg string) {
	t.Helper()
	must(t, netns.Do(gp.ctr, func() error {
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: src.AsSlice()}, &net.UDPAddr{IP: net.IPv4(10, 1, 0, 1), Port: 9999})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(msg))
		return err
	}))
}

// received is what the server got within wait, "" for nothing.
func (gp *guardedPod) received(t *testing.T, wait time.Duration) string {
	buf := make([]byte, 64)
	must(t, gp.srv.SetReadDeadline(time.Now().Add(wait)))
	n, _, err := gp.srv.ReadFromUDP(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func testGuardLogsDrops(t *testing.T, bridged bool) {
	own, forged := netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("10.1.0.99")
	gp := newGuardedPod(t, bridged, own)
	log := listenGuardLog(t, gp.host)
	gp.send(t, own, "own")
	if got := gp.received(t, 2*time.Second); got != "own" {
		t.Fatalf("the pod's own packet did not get through: %q", got)
	}
	gp.send(t, forged, "forged")
	if got := gp.received(t, 300*time.Millisecond); got != "" {
		t.Fatalf("a forged source got through: %q", got)
	}
	waitGuardRecord(t, log, forged, "a forged source")
	if recs := log.from(own); len(recs) != 0 {
		t.Errorf("an accepted packet was logged: %+v", recs)
	}
	// A forged MAC: the pod's own address from another MAC.
	must(t, gp.ch.LinkSetHardwareAddr(gp.eth, net.HardwareAddr{2, 0, 0, 0, 0, 0x99}))
	// The new MAC flushed the pod's neighbours, and its ARP from that
	// MAC is dropped too (a bridge port's guard sees it): a static
	// neighbour lets the datagram go.
	must(t, gp.ch.NeighSet(&netlink.Neigh{LinkIndex: gp.eth.Attrs().Index, State: netlink.NUD_PERMANENT,
		IP: net.IPv4(10, 1, 0, 1), HardwareAddr: gp.gwMAC}))
	gp.send(t, own, "mac")
	if got := gp.received(t, 300*time.Millisecond); got != "" {
		t.Fatalf("a forged MAC got through: %q", got)
	}
	waitGuardRecord(t, log, own, "a forged MAC")
}

func waitGuardRecord(t *testing.T, log *guardLog, src netip.Addr, what string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range log.from(src) {
			if r.Prefix == GuardLogPrefix && r.DstPort == 9999 {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("no %s record of %s's packet dropped by the guard; records from it: %+v", GuardLogPrefix, what, log.from(src))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestGuardOlderTableKeepsItsRules: a guard table an older podnet wrote
// (plain drops, no drop-log chain) is left as it is by Install, which
// adds elements only while the table is there, and is Current: its
// drops log nothing until the table is written again (after a reboot,
// an uninstall, or its deletion), which the next Install then does.
func TestGuardOlderTableKeepsItsRules(t *testing.T) {
	host := newNS(t)
	_, cmac := AttachmentMACs("ctr1", "eth0")
	g := Guard{Owner: tag.Owner{Network: "n1", ContainerID: "ctr1", IfName: "eth0"}, HostIf: HostVethName("ctr1", "eth0"),
		PodMAC: cmac, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5")}}
	g2 := g
	g2.Owner.ContainerID, g2.HostIf = "ctr2", HostVethName("ctr2", "eth0")
	must(t, netns.Do(host, func() error {
		gs, err := NewGuards()
		if err != nil {
			return err
		}
		defer gs.Close()
		must(t, gs.Install(g))
		// The older podnet's rules: drops where this one goes to drop-log.
		o := newGuardObjects(false)
		gs.conn.FlushChain(o.chain)
		for _, r := range o.rules() {
			for i, e := range r.Exprs {
				if v, ok := e.(*expr.Verdict); ok && v.Kind == expr.VerdictGoto {
					r.Exprs[i] = &expr.Verdict{Kind: expr.VerdictDrop}
				}
			}
			gs.conn.AddRule(r)
		}
		gs.conn.FlushChain(o.drop)
		gs.conn.DelChain(o.drop)
		gs.conn.DeleteObject(o.limit)
		must(t, gs.conn.Flush())

		must(t, gs.Install(g2))
		if n := gotos(t, gs, o); n != 0 {
			t.Errorf("Install rewrote an older table's rules (%d gotos)", n)
		}
		for _, x := range []Guard{g, g2} {
			if ok, err := gs.Current(x); !ok || err != nil {
				t.Errorf("an older table's guard of %s is not Current: %v", x.HostIf, err)
			}
		}
		gs.conn.DelTable(o.table)
		must(t, gs.conn.Flush())
		must(t, gs.Install(g))
		if n := gotos(t, gs, o); n != 2 {
			t.Errorf("a table written again has %d gotos to %s, want 2 (the MAC drop, the final drop)", n, guardDropChainName)
		}
		// Declaring over a table of this version (racing ADDs, a set gone)
		// leaves one copy of every rule.
		for range 2 {
			must(t, gs.addBatch(newGuardObjects(false), nil, true))
		}
		drops, err := gs.conn.GetRules(o.table, o.drop)
		must(t, err)
		if n := gotos(t, gs, o); n != 2 || len(drops) != 2 {
			t.Errorf("declared again: %d gotos, %d rules in %s, want 2 and 2", n, len(drops), guardDropChainName)
		}
		gs.conn.DelTable(o.table)
		return gs.conn.Flush()
	}))
}

// gotos counts the base chain's rules that go to drop-log.
func gotos(t *testing.T, gs *Guards, o *guardObjects) int {
	t.Helper()
	rules, err := gs.conn.GetRules(o.table, o.chain)
	must(t, err)
	n := 0
	for _, r := range rules {
		for _, e := range r.Exprs {
			if v, ok := e.(*expr.Verdict); ok && v.Kind == expr.VerdictGoto && v.Chain == guardDropChainName {
				n++
			}
		}
	}
	return n
}
