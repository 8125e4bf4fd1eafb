package e2enet

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/netns"
)

// What a packet too large for its path costs: an ICMP "fragmentation
// needed" (a destination unreachable, IPv4) or "packet too big" (IPv6)
// back to the sender, which then resends smaller. With the pods' MTU
// right for the underlay none is ever sent; where ICMP is filtered, each
// one that would have been is a black hole.

// icmpCounters are the kernel's counters (/proc/net/snmp and snmp6) that
// count such messages: IPv4 has no counter for "fragmentation needed"
// alone, so every destination unreachable counts.
var icmpCounters = []string{
	"Icmp.InDestUnreachs", "Icmp.OutDestUnreachs",
	"Icmp6InDestUnreachs", "Icmp6OutDestUnreachs", "Icmp6InPktTooBigs", "Icmp6OutPktTooBigs",
}

// retransCounter counts TCP segments sent again, which a lost ICMP
// leaves behind.
const retransCounter = "Tcp.RetransSegs"

// snmpIn reads the SNMP counters of the network namespace at path, keyed
// "<Group>.<Name>" for /proc/net/snmp and as named in /proc/net/snmp6.
// They are read through /proc/thread-self: /proc/net is the namespace of
// the process's main thread, not of the thread netns.Do switched.
func snmpIn(path string) (map[string]int64, error) {
	out := map[string]int64{}
	err := netns.Do(path, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		if err := parseSNMP(b, out); err != nil {
			return err
		}
		b, err = os.ReadFile("/proc/thread-self/net/snmp6")
		if err != nil {
			return err
		}
		return parseSNMP6(b, out)
	})
	return out, err
}

// parseSNMP reads /proc/net/snmp's pairs of lines, "Group: names" then
// "Group: values".
func parseSNMP(b []byte, out map[string]int64) error {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		group, names, ok1 := strings.Cut(lines[i], ":")
		group2, values, ok2 := strings.Cut(lines[i+1], ":")
		n, v := strings.Fields(names), strings.Fields(values)
		if !ok1 || !ok2 || group != group2 || len(n) != len(v) {
			return fmt.Errorf("snmp: lines %d-%d: %q, %q: want names and values of one group", i+1, i+2, lines[i], lines[i+1])
		}
		for j := range n {
			x, err := strconv.ParseInt(v[j], 10, 64)
			if err != nil {
				return fmt.Errorf("snmp: %s.%s %q: %w", group, n[j], v[j], err)
			}
			out[group+"."+n[j]] = x
		}
	}
	return nil
}

// parseSNMP6 reads /proc/net/snmp6's "Name value" lines.
func parseSNMP6(b []byte, out map[string]int64) error {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 2 {
			continue
		}
		x, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("snmp6: %s %q: %w", f[0], f[1], err)
		}
		out[f[0]] = x
	}
	return s.Err()
}

// LinkMTU is the MTU of the interface name in the namespace at path.
func LinkMTU(path, name string) (int, error) {
	var mtu int
	err := netns.Do(path, func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		mtu = l.Attrs().MTU
		return nil
	})
	return mtu, err
}

// CheckPodMTU: every pod's eth0 has MTU want.
func (c *Cluster) CheckPodMTU(want int) {
	t := c.T
	t.Helper()
	for _, p := range c.AllPods() {
		got, err := LinkMTU(p.NS, "eth0")
		if err != nil {
			t.Fatalf("pod %s: %v", p.ID, err)
		}
		if got != want {
			t.Errorf("pod %s on %s: eth0 MTU %d, want %d", p.ID, p.Node.Name, got, want)
		}
	}
}

// CheckBulkTransfer sends size bytes over TCP from p to each address of
// q of a family p has, and q's echo sends them back, while no namespace
// on the way (the pods, their nodes, the underlay's hub) sends or
// receives a single ICMP destination unreachable or packet too big:
// both pods' full-sized segments fit the path from the first. p and q
// should be on different nodes, and no other traffic should run
// meanwhile.
func (c *Cluster) CheckBulkTransfer(p, q *Pod, size int) {
	t := c.T
	t.Helper()
	where := map[string]string{
		"pod " + p.ID: p.NS, "pod " + q.ID: q.NS,
		"node " + p.Node.Name: p.Node.NS.Path, "node " + q.Node.Name: q.Node.NS.Path, "the underlay's hub": c.U.Hub.Path,
	}
	snapshot := func() map[string]map[string]int64 {
		t.Helper()
		out := map[string]map[string]int64{}
		for name, path := range where {
			s, err := snmpIn(path)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, k := range append(icmpCounters, retransCounter) {
				if _, ok := s[k]; !ok {
					t.Fatalf("%s: no counter %s", name, k)
				}
			}
			out[name] = s
		}
		return out
	}
	data := make([]byte, size)
	_, _ = rand.Read(data)
	for _, dst := range q.Addrs() {
		if !p.own(dst).IsValid() {
			continue
		}
		before := snapshot()
		start := time.Now()
		if err := p.transfer(dst, data); err != nil {
			t.Fatalf("%s -> %s (%s), %d bytes each way: %v", p.ID, q.ID, dst, size, err)
		}
		took := time.Since(start)
		after := snapshot()
		var retrans int64
		for name := range where {
			for _, k := range icmpCounters {
				if d := after[name][k] - before[name][k]; d != 0 {
					t.Errorf("%s -> %s (%s): %s counted %d more %s: a packet did not fit the path (pods' MTU too large for the underlay)",
						p.ID, q.ID, dst, name, d, k)
				}
			}
			retrans += after[name][retransCounter] - before[name][retransCounter]
		}
		t.Logf("%s -> %s (%s): %d bytes each way in %v; %d TCP segments retransmitted on the way", p.ID, q.ID, dst, size, took, retrans)
	}
}

// transfer sends data to the echo server at dst and checks that it
// comes back whole.
func (p *Pod) transfer(dst netip.Addr, data []byte) error {
	var conn net.Conn
	err := netns.Do(p.NS, func() (err error) {
		conn, err = (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", net.JoinHostPort(dst.String(), fmt.Sprint(echoPort)))
		return err
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(echoTimeout))
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		if err == nil {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	got, rerr := io.ReadAll(conn)
	if err := <-errc; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("read: %w", rerr)
	}
	want := p.own(dst).String() + " "
	if !bytes.HasPrefix(got, []byte(want)) || !bytes.Equal(got[len(want):], data) {
		return fmt.Errorf("%d bytes came back, want %q and the %d bytes sent", len(got), want, len(data))
	}
	return nil
}
