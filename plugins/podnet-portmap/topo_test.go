package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/portmap"
)

// Addresses of the test topology. The host's own address is on an
// uplink veth to a third namespace ("ext"), in 198.18.0.0/15; the pods
// hang off the host on veths in 10.101.0.0/24 (and fd00:101::/64).
const (
	hostAddr = "198.18.0.1"
	extAddr  = "198.18.0.2"
	netName  = "pmtest"
)

// topo is a host namespace (a fresh node: testutil.NewNodeNetNS) with an
// uplink to ext, and pods attached. Every verb runs in the host
// namespace, never in the namespace of the machine running the test.
type topo struct {
	t    testing.TB
	host string // netns paths
	ext  string
	bin  string
	dir  string // CNI_PATH, and the lock file
}

// pod is a container namespace with one veth to the host.
type pod struct {
	ns     string
	id     string
	hostIf string
	ip4    netip.Addr
	ip6    netip.Addr
}

func do(t testing.TB, ns string, fn func() error) {
	t.Helper()
	if err := netns.Do(ns, fn); err != nil {
		t.Fatal(err)
	}
}

func writeSysctl(path, val string) error { return os.WriteFile(path, []byte(val), 0o644) }

func linkUp(name string, addrs ...string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, a := range addrs {
		p, err := netlink.ParseAddr(a)
		if err != nil {
			return err
		}
		p.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(l, p); err != nil {
			return fmt.Errorf("add %s to %s: %w", a, name, err)
		}
	}
	return netlink.LinkSetUp(l)
}

// vethTo creates a veth pair in the current namespace, name here and
// peer in the namespace at peerNS.
func vethTo(name, peer, peerNS string) error {
	ns, err := netns.Open(peerNS)
	if err != nil {
		return err
	}
	defer ns.Close()
	f, err := os.Open(peerNS)
	if err != nil {
		return err
	}
	defer f.Close()
	return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer, PeerNamespace: netlink.NsFd(int(f.Fd()))})
}

func newTopo(t testing.TB) *topo {
	t.Helper()
	testutil.RequireRoot(t)
	_, host := testutil.NewNodeNetNS(t)
	_, ext := testutil.NewNetNS(t)
	dir := t.TempDir()
	tp := &topo{t: t, host: host, ext: ext, dir: dir, bin: testutil.BuildBinary(t, "./plugins/podnet-portmap", dir)}
	do(t, ext, func() error { return linkUp("lo") })
	do(t, host, func() error {
		if err := vethTo("up0", "eth0", ext); err != nil {
			return err
		}
		if err := linkUp("up0", hostAddr+"/15"); err != nil {
			return err
		}
		// The main plugin turns forwarding on; podnet-portmap relies on it.
		if err := writeSysctl("/proc/sys/net/ipv4/ip_forward", "1"); err != nil {
			return err
		}
		return writeSysctl("/proc/sys/net/ipv6/conf/all/forwarding", "1")
	})
	do(t, ext, func() error { return linkUp("eth0", extAddr+"/15") })
	return tp
}

// addPod attaches a pod with the n-th address of 10.101.0.0/24 (and of
// fd00:101::/64 when v6).
func (tp *topo) addPod(n int, v6 bool) *pod {
	t := tp.t
	t.Helper()
	_, ns := testutil.NewNetNS(t)
	p := &pod{ns: ns, id: fmt.Sprintf("ctr%d", n), hostIf: fmt.Sprintf("vh%d", n),
		ip4: netip.AddrFrom4([4]byte{10, 101, 0, byte(n)})}
	gw4 := "10.101.0.254"
	if v6 {
		p.ip6 = netip.MustParseAddr(fmt.Sprintf("fd00:101::%d", n))
	}
	do(t, tp.host, func() error {
		if err := vethTo(p.hostIf, "eth0", ns); err != nil {
			return err
		}
		addrs := []string{gw4 + "/32"}
		if v6 {
			addrs = append(addrs, "fd00:101::fe/128")
		}
		if err := linkUp(p.hostIf, addrs...); err != nil {
			return err
		}
		l, err := netlink.LinkByName(p.hostIf)
		if err != nil {
			return err
		}
		routes := []netip.Prefix{netip.PrefixFrom(p.ip4, 32)}
		if v6 {
			routes = append(routes, netip.PrefixFrom(p.ip6, 128))
		}
		for _, r := range routes {
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(r), Scope: netlink.SCOPE_LINK}); err != nil {
				return fmt.Errorf("route %s: %w", r, err)
			}
		}
		return nil
	})
	do(t, ns, func() error {
		if err := linkUp("lo"); err != nil {
			return err
		}
		addrs := []string{p.ip4.String() + "/32"}
		if v6 {
			addrs = append(addrs, p.ip6.String()+"/128")
		}
		if err := linkUp("eth0", addrs...); err != nil {
			return err
		}
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		gws := []string{gw4}
		if v6 {
			gws = append(gws, "fd00:101::fe")
		}
		for _, gw := range gws {
			g := netip.MustParseAddr(gw)
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(netip.PrefixFrom(g, g.BitLen())), Scope: netlink.SCOPE_LINK}); err != nil {
				return fmt.Errorf("route to %s: %w", gw, err)
			}
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IP(g.AsSlice())}); err != nil {
				return fmt.Errorf("default via %s: %w", gw, err)
			}
		}
		return nil
	})
	return p
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// prevResult describes p as the main plugin would.
func (p *pod) prevResult() *cni.Result {
	r := &cni.Result{
		CNIVersion: cni.CurrentVersion,
		Interfaces: []*cni.Interface{{Name: p.hostIf}, {Name: "eth0", Sandbox: p.ns}},
		IPs:        []*cni.IPConfig{{Interface: cni.IntPtr(1), Address: netip.PrefixFrom(p.ip4, 32)}},
	}
	if p.ip6.IsValid() {
		r.IPs = append(r.IPs, &cni.IPConfig{Interface: cni.IntPtr(1), Address: netip.PrefixFrom(p.ip6, 128)})
	}
	return r
}

// conf is the plugin's stdin for p with the given mappings (nil: an
// empty list, as a runtime sends for a pod without host ports).
func (p *pod) conf(t testing.TB, mappings []portmap.RuntimeMapping, withPrev bool) []byte {
	t.Helper()
	if mappings == nil {
		mappings = []portmap.RuntimeMapping{}
	}
	return p.stdin(t, map[string]any{"portMappings": mappings}, withPrev)
}

// confNoCapArgs is the plugin's stdin for p without runtimeConfig, as a
// runtime given no capability arguments writes it.
func (p *pod) confNoCapArgs(t testing.TB, withPrev bool) []byte {
	t.Helper()
	return p.stdin(t, nil, withPrev)
}

func (p *pod) stdin(t testing.TB, runtimeConfig map[string]any, withPrev bool) []byte {
	t.Helper()
	c := map[string]any{
		"cniVersion": "1.1.0",
		"name":       netName,
		"type":       "podnet-portmap",
	}
	if runtimeConfig != nil {
		c["runtimeConfig"] = runtimeConfig
	}
	if withPrev {
		c["prevResult"] = p.prevResult()
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exec runs the plugin binary inside the host namespace. It returns the
// CNI error from stdout when the plugin failed.
func (tp *topo) exec(verb string, p *pod, stdin []byte) (string, error) {
	cmd := exec.Command(tp.bin)
	cmd.Env = []string{"CNI_COMMAND=" + verb, "CNI_PATH=" + tp.dir}
	if p != nil {
		cmd.Env = append(cmd.Env, "CNI_CONTAINERID="+p.id, "CNI_NETNS="+p.ns, "CNI_IFNAME=eth0")
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The child inherits the namespace of the thread that forks it.
	if err := netns.Do(tp.host, cmd.Start); err != nil {
		return "", err
	}
	err := cmd.Wait()
	if err != nil {
		var ce cni.Error
		if jerr := json.Unmarshal(stdout.Bytes(), &ce); jerr == nil && ce.Code != 0 {
			return stdout.String(), &ce
		}
		return stdout.String(), fmt.Errorf("%s: %v; stdout %q; stderr %q", verb, err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func (tp *topo) mustExec(verb string, p *pod, stdin []byte) string {
	tp.t.Helper()
	out, err := tp.exec(verb, p, stdin)
	if err != nil {
		tp.t.Fatalf("%s: %v", verb, err)
	}
	return out
}

// gc runs GC with the given valid attachments.
func (tp *topo) gc(valid ...*pod) {
	tp.t.Helper()
	var va []map[string]string
	for _, p := range valid {
		va = append(va, map[string]string{"containerID": p.id, "ifname": "eth0"})
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": netName, "type": "podnet-portmap", "cni.dev/valid-attachments": va})
	tp.mustExec("GC", nil, b)
}

// entries lists the table's elements in the host namespace; tableExists
// is false when there is no table at all.
func (tp *topo) entries() (es []portmap.Entry, tableExists bool) {
	tp.t.Helper()
	do(tp.t, tp.host, func() error {
		n, err := portmap.OpenNFT()
		if err != nil {
			return err
		}
		defer n.Close()
		var missing bool
		es, missing, err = n.List(portmap.AllSets)
		tableExists = !missing
		return err
	})
	return es, tableExists
}

// dropTable deletes the table in the host namespace, as a flush of the
// ruleset by someone else would.
func (tp *topo) dropTable() {
	tp.t.Helper()
	do(tp.t, tp.host, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.DelTable(&nftables.Table{Name: portmap.TableName, Family: nftables.TableFamilyINet})
		return c.Flush()
	})
}

func (tp *topo) owned(p *pod) []portmap.Entry {
	es, _ := tp.entries()
	return portmap.Owned(tag.Owner{Network: netName, ContainerID: p.id, IfName: "eth0"}, es)
}

// serveTCP listens on port in ns and answers each connection with
// "hello <remote address>\n".
func serveTCP(t testing.TB, ns, addr string) {
	t.Helper()
	var ln net.Listener
	do(t, ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "hello %s\n", c.RemoteAddr())
			c.Close()
		}
	}()
}

// serveUDP answers each datagram on addr in ns with "hello <remote>".
func serveUDP(t testing.TB, ns, addr string) {
	t.Helper()
	var pc net.PacketConn
	do(t, ns, func() (err error) {
		pc, err = net.ListenPacket("udp", addr)
		return err
	})
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte("hello "+from.String()), from)
		}
	}()
}

// dialTCP connects from ns to addr and returns the server's greeting.
func dialTCP(ns, addr string) (string, error) {
	var line string
	err := netns.Do(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return strings.TrimSpace(line), err
}

// dialUDP sends one datagram from ns to addr and returns the answer.
func dialUDP(ns, addr string) (string, error) { return dialUDPFrom(ns, "", addr) }

// dialUDPFrom is dialUDP from the local address laddr ("" for any).
func dialUDPFrom(ns, laddr, addr string) (string, error) {
	var reply string
	err := netns.Do(ns, func() error {
		d := net.Dialer{}
		if laddr != "" {
			la, err := net.ResolveUDPAddr("udp", laddr)
			if err != nil {
				return err
			}
			d.LocalAddr = la
		}
		c, err := d.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 1500)
		for try := 0; try < 3; try++ {
			if _, err := c.Write([]byte("ping")); err != nil {
				return err
			}
			c.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
			n, err := c.Read(buf)
			if err == nil {
				reply = string(buf[:n])
				return nil
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				return err
			}
		}
		return errors.New("no UDP answer")
	})
	return reply, err
}

// nftList is `nft list table` in the host namespace, for failure logs.
func (tp *topo) nftList() string {
	cmd := exec.Command("nft", "list", "table", "inet", portmap.TableName)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netns.Do(tp.host, cmd.Start); err != nil {
		return err.Error()
	}
	cmd.Wait()
	return out.String()
}
