package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// Addresses of the test topology. Pods get 10.100.0.0/24 and
// fd00:100::/64 from the test IPAM; the node's underlay address is in
// 198.18.0.0/15 (IPv6: the documentation prefix). All of it exists only inside the namespaces a test
// creates.
const (
	nodeAddr    = "198.18.0.1"
	uplinkAddr  = "198.18.0.2"
	nodeAddr6   = "2001:db8:198::1" // documentation prefix: never routed
	uplinkAddr6 = "2001:db8:198::2"
	podRange4   = "10.100.0.0/24"
	podRange6   = "fd00:100::/64"
)

// env is one test "node": a host namespace with an uplink namespace
// behind it, and a plugin directory with podnet and the test IPAM.
type env struct {
	t       testing.TB
	binDir  string
	host    string // host namespace path
	uplink  string // uplink namespace path
	dataDir string // the test IPAM's
}

var faultBuild struct {
	once sync.Once
	bin  []byte
	err  error
}

// buildFault builds podnet with the podnetfault tag (testutil builds
// without tags) and installs it in dir.
func buildFault(t testing.TB, dir string) {
	t.Helper()
	faultBuild.once.Do(func() {
		root, err := testutil.ModuleRoot()
		if err != nil {
			faultBuild.err = err
			return
		}
		tmp, err := os.MkdirTemp("", "podnet-fault-")
		if err != nil {
			faultBuild.err = err
			return
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("go", "build", "-tags", "podnetfault", "-o", filepath.Join(tmp, "podnet"), "./plugins/podnet")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			faultBuild.err = fmt.Errorf("%v: %s", err, out)
			return
		}
		faultBuild.bin, faultBuild.err = os.ReadFile(filepath.Join(tmp, "podnet"))
	})
	if faultBuild.err != nil {
		t.Fatalf("build podnet with podnetfault: %v", faultBuild.err)
	}
	if err := os.WriteFile(filepath.Join(dir, "podnet"), faultBuild.bin, 0o755); err != nil {
		t.Fatal(err)
	}
}

func newEnv(t testing.TB, fault bool) *env {
	t.Helper()
	testutil.RequireRoot(t)
	e := &env{t: t, binDir: t.TempDir(), dataDir: t.TempDir()}
	if fault {
		buildFault(t, e.binDir)
	} else {
		testutil.BuildBinary(t, "./plugins/podnet", e.binDir)
	}
	testutil.BuildBinaryAs(t, "./internal/testipamplugin", e.binDir, "testipamplugin")
	_, e.host = testutil.NewNodeNetNS(t)
	_, e.uplink = testutil.NewNetNS(t)
	e.wireUplink()
	return e
}

// wireUplink links host and uplink with a veth: the host is
// 198.18.0.1/24 with a default route via the uplink's 198.18.0.2.
func (e *env) wireUplink() {
	t := e.t
	t.Helper()
	f, err := os.Open(e.uplink)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = netns.Do(e.host, func() error {
		h, err := dataplane.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		la := netlink.NewLinkAttrs()
		la.Name = "up0"
		veth := &netlink.Veth{LinkAttrs: la, PeerName: "up0", PeerNamespace: netlink.NsFd(f.Fd())}
		if err := h.LinkAdd(veth); err != nil {
			return err
		}
		if err := dataplane.AddAddr(h, veth.Index, netip.MustParsePrefix(nodeAddr+"/24")); err != nil {
			return err
		}
		if err := dataplane.AddAddr(h, veth.Index, netip.MustParsePrefix(nodeAddr6+"/64")); err != nil {
			return err
		}
		for _, name := range []string{"up0", "lo"} {
			l, err := h.LinkByName(name)
			if err != nil {
				return err
			}
			if err := h.LinkSetUp(l); err != nil {
				return err
			}
		}
		if err := dataplane.AddRoute(h, veth.Index, dataplane.LinkRoute{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr(uplinkAddr)}); err != nil {
			return err
		}
		return dataplane.AddRoute(h, veth.Index, dataplane.LinkRoute{Dst: netip.MustParsePrefix("::/0"), GW: netip.MustParseAddr(uplinkAddr6)})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = onLink(e.uplink, "up0", func(h *netlink.Handle, l netlink.Link) error {
		if err := dataplane.AddAddr(h, l.Attrs().Index, netip.MustParsePrefix(uplinkAddr+"/24")); err != nil {
			return err
		}
		if err := dataplane.AddAddr(h, l.Attrs().Index, netip.MustParsePrefix(uplinkAddr6+"/64")); err != nil {
			return err
		}
		return h.LinkSetUp(l)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// onLink runs fn on the link called name in the namespace at ns, with a
// netlink handle there.
func onLink(ns, name string, fn func(*netlink.Handle, netlink.Link) error) error {
	return netns.Do(ns, func() error {
		h, err := dataplane.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("link %s: %w", name, err)
		}
		return fn(h, l)
	})
}

// conf is a network configuration for the test IPAM; extra are more
// top-level fields, e.g. `"mode":"bridge"`.
func (e *env) conf(extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":"testnet","type":"podnet"%s,"ipam":{"type":"testipamplugin","dataDir":%q,"ranges":[%q,%q]}}`,
		extra, e.dataDir, podRange4, podRange6)
}

// pod is one container: its namespace and ID.
type pod struct {
	id, ns string
	res    *cni.Result
}

func (e *env) newPod(id string) *pod {
	_, ns := testutil.NewNetNS(e.t)
	return &pod{id: id, ns: ns}
}

// run execs podnet in the host namespace, as a runtime on that node
// would, and returns stdout or the plugin's error.
func (e *env) run(cmd, conf string, p *pod, extraEnv ...string) ([]byte, error) {
	e.t.Helper()
	return e.runPlugin("podnet", cmd, conf, p, extraEnv...)
}

// runPlugin is run for any plugin in the plugin directory.
func (e *env) runPlugin(plugin, cmd, conf string, p *pod, extraEnv ...string) ([]byte, error) {
	e.t.Helper()
	env := append([]string{"CNI_COMMAND=" + cmd, "CNI_PATH=" + e.binDir, "PATH=/usr/bin:/bin"}, extraEnv...)
	if p != nil {
		env = append(env, "CNI_CONTAINERID="+p.id, "CNI_IFNAME=eth0")
		if p.ns != "" {
			env = append(env, "CNI_NETNS="+p.ns)
		}
	}
	// The runtime's own executor, started in the test's host namespace:
	// its own process group, the plugin's CNI error as the error.
	return (&cni.RawExec{HostNetNS: e.host}).ExecPlugin(context.Background(), filepath.Join(e.binDir, plugin), []byte(conf), env)
}

// add runs ADD and keeps the result on p.
func (e *env) add(conf string, p *pod) *cni.Result {
	e.t.Helper()
	out, err := e.run("ADD", conf, p)
	if err != nil {
		e.t.Fatalf("ADD %s: %v", p.id, err)
	}
	res, err := cni.ParseResult(out)
	if err != nil {
		e.t.Fatalf("ADD %s result: %v\n%s", p.id, err, out)
	}
	p.res = res
	return res
}

// withPrev is conf with prevResult set to res.
func withPrev(conf string, res *cni.Result) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(conf), &m)
	m["prevResult"] = json.RawMessage(res.Bytes())
	b, _ := json.Marshal(m)
	return string(b)
}

func (e *env) del(conf string, p *pod) {
	e.t.Helper()
	if p.res != nil {
		conf = withPrev(conf, p.res)
	}
	if _, err := e.run("DEL", conf, p); err != nil {
		e.t.Fatalf("DEL %s: %v", p.id, err)
	}
}

// addr is p's address of a family.
func (p *pod) addr(v4 bool) netip.Addr {
	for _, ip := range p.res.IPs {
		if ip.Address.Addr().Is4() == v4 {
			return ip.Address.Addr()
		}
	}
	return netip.Addr{}
}

// echo listens in the namespace at server and connects from the one at
// client; it returns the source address the server saw.
func echo(t testing.TB, client, server string, dst netip.Addr) (netip.Addr, error) {
	t.Helper()
	var ln net.Listener
	listenAddr := netip.AddrPortFrom(dst, 0).String()
	if err := netns.Do(server, func() (err error) { ln, err = net.Listen("tcp", listenAddr); return err }); err != nil {
		return netip.Addr{}, fmt.Errorf("listen on %s: %w", listenAddr, err)
	}
	defer ln.Close()
	seen := make(chan netip.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		seen <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		var b [5]byte
		n, _ := c.Read(b[:])
		c.Write(b[:n])
	}()
	target := ln.Addr().(*net.TCPAddr).AddrPort()
	err := netns.Do(client, func() error {
		c, err := net.DialTimeout("tcp", target.String(), 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("hello")); err != nil {
			return err
		}
		var b [5]byte
		if _, err := c.Read(b[:]); err != nil || string(b[:]) != "hello" {
			return fmt.Errorf("echo: %q %v", b, err)
		}
		return nil
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("connect to %s: %w", target, err)
	}
	return <-seen, nil
}

// hostState is what of podnet's is left in the host namespace.
type hostState struct {
	links  []string // pn* links
	routes []string // routes into the pod ranges, but bridge subnets
	elems  int      // masquerade set elements
	guards []string // source guard chains, by host interface
	procs  []string // /proc/sys/net/ipv4/conf entries of pn* links
}

func (e *env) leftovers() hostState {
	e.t.Helper()
	var s hostState
	pod4, pod6 := netip.MustParsePrefix(podRange4), netip.MustParsePrefix(podRange6)
	err := netns.Do(e.host, func() error {
		h, err := dataplane.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		links, err := h.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, "pn") && l.Type() != "bridge" {
				s.links = append(s.links, l.Attrs().Name)
			}
		}
		routes, err := h.RouteList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, r := range routes {
			p, ok := dataplane.PrefixOf(r.Dst)
			if ok && p.IsSingleIP() && (pod4.Contains(p.Addr()) || pod6.Contains(p.Addr())) {
				s.routes = append(s.routes, r.String())
			}
		}
		m, err := dataplane.NewMasq()
		if err != nil {
			return err
		}
		defer m.Close()
		members, err := m.Members("testnet")
		if err != nil {
			return err
		}
		s.elems = len(members)
		gs, err := dataplane.NewGuards()
		if err != nil {
			return err
		}
		defer gs.Close()
		guards, err := gs.Owners()
		if err != nil {
			return err
		}
		s.guards = slices.Sorted(maps.Keys(guards))
		entries, err := os.ReadDir("/proc/sys/net/ipv4/conf")
		if err != nil {
			return err
		}
		for _, en := range entries {
			if dataplane.IsHostVethName(en.Name()) {
				s.procs = append(s.procs, en.Name())
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// requireClean fails unless nothing of any pod is left: no host veth,
// no host route, no masquerade element, no source guard, no sysctl
// directory, no address allocated.
func (e *env) requireClean() {
	e.t.Helper()
	if s := e.leftovers(); len(s.links)+len(s.routes)+s.elems+len(s.procs)+len(s.guards) != 0 {
		e.t.Fatalf("left behind: %+v", s)
	}
	if n := e.allocations(); n != 0 {
		e.t.Fatalf("%d IPAM allocations left", n)
	}
}

func (e *env) allocations() int {
	b, err := os.ReadFile(filepath.Join(e.dataDir, "state.json"))
	if os.IsNotExist(err) {
		return 0
	}
	var s struct {
		Allocs map[string]any `json:"allocs"`
	}
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return len(s.Allocs)
}

// ipamCalls counts the IPAM's invocations of verb for a container.
func (e *env) ipamCalls(verb, id string) int {
	b, _ := os.ReadFile(filepath.Join(e.dataDir, "log"))
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == verb && f[1] == id {
			n++
		}
	}
	return n
}
