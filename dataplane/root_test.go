package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// newNS makes a throw-away namespace for t; nothing in these tests
// touches the test process's own namespace.
func newNS(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	_, p := testutil.NewNodeNetNS(t)
	return p
}

// handleIn returns a rtnetlink handle bound to the namespace at path.
func handleIn(t testing.TB, path string) *netlink.Handle {
	t.Helper()
	var h *netlink.Handle
	if err := netns.Do(path, func() (err error) { h, err = NewHandle(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func nsFd(t testing.TB, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

func TestVethPeerInContainer(t *testing.T) {
	host, ctr := newNS(t), newNS(t)
	hh, ch := handleIn(t, host), handleIn(t, ctr)
	name := HostVethName("ctr1", "eth0")
	hmac, cmac := AttachmentMACs("ctr1", "eth0")
	owner := tag.Owner{Network: "n1", ContainerID: "ctr1", IfName: "eth0"}
	idx, err := CreateVeth(hh, Veth{HostName: name, HostMAC: hmac, HostAlias: owner.Alias(), PeerName: "eth0", PeerMAC: cmac, PeerNSFd: nsFd(t, ctr), MTU: 1400})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := LinkByName(hh, name)
	if err != nil || hl == nil || hl.Attrs().Index != idx {
		t.Fatalf("host end: %v %v", hl, err)
	}
	if got, _ := tag.ParseAlias(hl.Attrs().Alias); got != owner {
		t.Errorf("alias %q", hl.Attrs().Alias)
	}
	if hl.Attrs().MTU != 1400 || hl.Attrs().HardwareAddr.String() != hmac.String() {
		t.Errorf("host end attrs %+v", hl.Attrs())
	}
	cl, err := LinkByName(ch, "eth0")
	if err != nil || cl == nil {
		t.Fatalf("container end: %v %v", cl, err)
	}
	if cl.Attrs().HardwareAddr.String() != cmac.String() || !IsPeerOf(hl, cl) {
		t.Errorf("container end %+v", cl.Attrs())
	}
	if l, _ := LinkByName(hh, "eth0"); l != nil {
		t.Error("peer exists in the host namespace")
	}
	// The name taken: a conflict, not a silent reuse.
	_, err = CreateVeth(hh, Veth{HostName: name, PeerName: "eth1", PeerNSFd: nsFd(t, ctr)})
	if !errors.Is(err, &Error{Kind: KindConflict}) {
		t.Fatalf("second create: %v", err)
	}
	if err := DeleteLink(hh, name); err != nil {
		t.Fatal(err)
	}
	if l, _ := LinkByName(ch, "eth0"); l != nil {
		t.Error("deleting the host end left the container end")
	}
	if err := DeleteLink(hh, name); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}

func TestHostRouteConflict(t *testing.T) {
	host, ctr := newNS(t), newNS(t)
	hh := handleIn(t, host)
	var idx [2]int
	for i := range idx {
		var err error
		idx[i], err = CreateVeth(hh, Veth{HostName: HostVethName(fmt.Sprint("c", i), "eth0"), PeerName: fmt.Sprint("eth", i), PeerNSFd: nsFd(t, ctr)})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ip := range []string{"10.100.0.5", "fd00:100::5"} {
		a := netip.MustParseAddr(ip)
		if err := AddHostRoute(hh, idx[0], a); err != nil {
			t.Fatalf("%s: %v", ip, err)
		}
		if err := AddHostRoute(hh, idx[0], a); err != nil {
			t.Fatalf("%s repeated: %v", ip, err)
		}
		err := AddHostRoute(hh, idx[1], a)
		var de *Error
		if !errors.As(err, &de) || de.Kind != KindConflict {
			t.Fatalf("%s on another link: %v", ip, err)
		}
		t.Logf("conflict: %v", err)
	}
	got, err := HostRoutes(hh, idx[0])
	if err != nil || len(got) != 2 {
		t.Fatalf("host routes %v %v", got, err)
	}
}

func TestSysctlsInNamespace(t *testing.T) {
	host := newNS(t)
	hh := handleIn(t, host)
	if err := hh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "pntest0"}, PeerName: "pntest1"}); err != nil {
		t.Fatal(err)
	}
	list := append(NodeForwardingSysctls(true, true), RoutedHostSysctls("pntest0", true, true)...)
	err := netns.Do(host, func() error {
		if d := CheckSysctls(list); len(d) == 0 {
			return errors.New("a fresh namespace already has the settings")
		}
		if err := WriteSysctls(list); err != nil {
			return err
		}
		if d := CheckSysctls(list); len(d) != 0 {
			return fmt.Errorf("after write: %v", d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The test's own namespace has no such interface: the writes went to
	// the namespace of the thread.
	if _, err := ReadSysctl("net/ipv4/conf/pntest0/proxy_arp"); err == nil {
		t.Fatal("sysctl visible outside the namespace")
	}
}

func TestEnsureBridgeConcurrent(t *testing.T) {
	host := newNS(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			h := handleIn(t, host)
			_, errs[i] = EnsureBridge(h, Bridge{Name: "pnbr0", MTU: 1400, Promisc: true})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	h := handleIn(t, host)
	l, err := LinkByName(h, "pnbr0")
	if err != nil || l == nil || l.Attrs().MTU != 1400 || l.Attrs().Promisc == 0 {
		t.Fatalf("bridge %+v %v", l, err)
	}
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "pndummy"}, PeerName: "pndummy1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureBridge(h, Bridge{Name: "pndummy"}); !errors.Is(err, &Error{Kind: KindNotBridge}) {
		t.Fatalf("a veth taken for a bridge: %v", err)
	}
}

func masqIn(t *testing.T, path string) *Masq {
	t.Helper()
	var m *Masq
	if err := netns.Do(path, func() (err error) { m, err = NewMasq(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestMasqConcurrentAddRemove(t *testing.T) {
	host := newNS(t)
	n := MasqNetwork{Network: "n1", Exclude: []netip.Prefix{netip.MustParsePrefix("10.100.0.0/16"), netip.MustParsePrefix("fd00:100::/64")}}
	const pods = 6
	var wg sync.WaitGroup
	errs := make([]error, pods)
	for i := range pods {
		wg.Go(func() {
			m := masqIn(t, host) // one process each, as plugins are
			o := tag.Owner{Network: "n1", ContainerID: fmt.Sprint("c", i), IfName: "eth0"}
			addrs := []netip.Addr{netip.MustParseAddr(fmt.Sprintf("10.100.0.%d", 10+i)), netip.MustParseAddr(fmt.Sprintf("fd00:100::%d", 10+i))}
			errs[i] = m.AddPod(n, o, addrs)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	m := masqIn(t, host)
	o := newMasqObjects("n1")
	rules, err := m.conn.GetRules(o.table, o.chain)
	if err != nil || len(rules) != 2 {
		t.Fatalf("%d rules after racing ADDs (%v), want 2", len(rules), err)
	}
	if ok, err := m.RulesCurrent(n); !ok || err != nil {
		t.Fatalf("rules current: %v %v", ok, err)
	}
	members, err := m.Members("n1")
	if err != nil || len(members) != 2*pods {
		t.Fatalf("members %v %v", members, err)
	}
	if o := members[netip.MustParseAddr("fd00:100::12")]; o.ContainerID != "c2" || o.IfName != "eth0" {
		t.Fatalf("owner %+v", o)
	}
	for i := range pods {
		addrs := []netip.Addr{netip.MustParseAddr(fmt.Sprintf("10.100.0.%d", 10+i)), netip.MustParseAddr(fmt.Sprintf("fd00:100::%d", 10+i))}
		if err := m.RemovePod("n1", addrs); err != nil {
			t.Fatal(err)
		}
		if err := m.RemovePod("n1", addrs); err != nil {
			t.Fatalf("second remove: %v", err)
		}
	}
	if members, err := m.Members("n1"); err != nil || len(members) != 0 {
		t.Fatalf("after remove %v %v", members, err)
	}
	if err := m.RemovePod("never-added", []netip.Addr{netip.MustParseAddr("10.1.1.1")}); err != nil {
		t.Fatalf("remove from a network without sets: %v", err)
	}
	// The exclusions are the network's, not the pods': the same two
	// prefixes and multicast after every ADD and DEL.
	want := []string{"10.100.0.0/16", "224.0.0.0/4", "fd00:100::/64", "ff00::/8"}
	if got := excluded(t, m, "n1"); !slices.Equal(got, want) {
		t.Fatalf("exclusions %v, want %v", got, want)
	}
}

// excluded lists the network's exclusion sets, each interval as the
// prefix it is.
func excluded(t *testing.T, m *Masq, network string) []string {
	t.Helper()
	o := newMasqObjects(network)
	var out []string
	for _, s := range []*nftables.Set{o.exclude4, o.exclude6} {
		elems, err := m.conn.GetSetElements(s)
		if err != nil {
			t.Fatalf("list %s: %v", s.Name, err)
		}
		out = append(out, testutil.SetContents(s, elems)...)
	}
	return out
}

// A node that ran a podnet before v2 has a /32 per routed pod in its
// exclusion set, pods that have long gone among them. The first ADD with
// this podnet replaces the rules (their tag names the version) and the
// exclusions with them.
func TestMasqUpgradeDropsPodExclusions(t *testing.T) {
	host := newNS(t)
	m := masqIn(t, host)
	o := newMasqObjects("n1")
	if err := m.declare(o); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"10.100.0.7/32", "10.100.0.9/32", "10.100.3.2/32"} {
		if err := m.conn.SetAddElements(o.exclude4, intervalElements(netip.MustParsePrefix(p))); err != nil {
			t.Fatal(err)
		}
	}
	// v1's rules: the tag had v1 and the hash of no exclusions.
	for i, r := range o.rules(MasqNetwork{Network: "n1"}) {
		r.UserData = []byte("podnet masq v1 " + []string{"ipv4", "ipv6"}[i] + " e3b0c44298fc")
		m.conn.AddRule(r)
	}
	if err := m.conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := excluded(t, m, "n1"); len(got) != 3 {
		t.Fatalf("the old state: %v", got)
	}
	n := MasqNetwork{Network: "n1", Exclude: []netip.Prefix{netip.MustParsePrefix("10.100.0.0/16")}}
	owner := tag.Owner{Network: "n1", ContainerID: "c", IfName: "eth0"}
	if err := m.AddPod(n, owner, []netip.Addr{netip.MustParseAddr("10.100.0.11")}); err != nil {
		t.Fatal(err)
	}
	if got, want := excluded(t, m, "n1"), []string{"10.100.0.0/16", "224.0.0.0/4", "ff00::/8"}; !slices.Equal(got, want) {
		t.Fatalf("exclusions after the upgrade %v, want %v", got, want)
	}
	if ok, err := m.RulesCurrent(n); !ok || err != nil {
		t.Fatalf("rules current: %v %v", ok, err)
	}
}

func TestMasqExcludeOverlap(t *testing.T) {
	host := newNS(t)
	m := masqIn(t, host)
	// Subnets from the IPAM's results are added as pods come.
	added := func(p string) MasqNetwork {
		return MasqNetwork{Network: "n1", ExcludeAdded: true, Exclude: []netip.Prefix{netip.MustParsePrefix(p)}}
	}
	o := tag.Owner{Network: "n1", ContainerID: "c", IfName: "eth0"}
	if err := m.AddPod(added("10.100.0.0/16"), o, []netip.Addr{netip.MustParseAddr("10.100.1.2")}); err != nil {
		t.Fatal(err)
	}
	// A narrower subnet inside one already excluded must not fail.
	if err := m.AddPod(added("10.100.1.0/24"), o, []netip.Addr{netip.MustParseAddr("10.100.1.3")}); err != nil {
		t.Fatal(err)
	}
	if err := m.AddPod(added("10.101.0.0/24"), o, []netip.Addr{netip.MustParseAddr("10.101.0.3")}); err != nil {
		t.Fatal(err)
	}
	if got, want := excluded(t, m, "n1"), []string{"10.100.0.0/16", "10.101.0.0/24", "224.0.0.0/4", "ff00::/8"}; !slices.Equal(got, want) {
		t.Fatalf("added exclusions %v, want %v", got, want)
	}
	// Configured exclusions replace the rules once, and the sets with them.
	n := MasqNetwork{Network: "n1", Exclude: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	if ok, _ := m.RulesCurrent(n); ok {
		t.Fatal("rules current before the change")
	}
	if err := m.AddPod(n, o, []netip.Addr{netip.MustParseAddr("10.100.1.4")}); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.RulesCurrent(n); !ok || err != nil {
		t.Fatalf("rules not replaced: %v", err)
	}
	if got, want := excluded(t, m, "n1"), []string{"10.0.0.0/8", "224.0.0.0/4", "ff00::/8"}; !slices.Equal(got, want) {
		t.Fatalf("configured exclusions %v, want %v", got, want)
	}
}

var _ = unix.ENOENT

// Without the early notice (the watch cannot be set up), a deletion that
// fails is reported by DeleteLinkEarly itself, as for a failure with it:
// DEL must not go on to release the address while the link may remain.
func TestDeleteLinkEarlyWithoutWatchReportsFailure(t *testing.T) {
	host := newNS(t)
	hh := handleIn(t, host)
	linkWatch = func(int) (*unregisterWatch, error) { return nil, errors.New("no watch (test)") }
	t.Cleanup(func() { linkWatch = watchUnregister })
	// lo cannot be deleted: the kernel refuses.
	var done <-chan error
	err := netns.Do(host, func() (err error) { done, err = DeleteLinkEarly(hh, "lo"); return err })
	if err == nil {
		t.Fatalf("a failed deletion returned no error (done says %v)", <-done)
	}
	// And a deletion that works still reports through done.
	name := HostVethName("nowatch", "eth0")
	if err := hh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "pntestpeer0"}); err != nil {
		t.Fatal(err)
	}
	err = netns.Do(host, func() (err error) { done, err = DeleteLinkEarly(hh, name); return err })
	if err != nil || <-done != nil {
		t.Fatalf("deletion without the watch: %v", err)
	}
	if l, _ := LinkByName(hh, name); l != nil {
		t.Fatal("link still there")
	}
}

func TestDeleteLinkEarly(t *testing.T) {
	host, ctr := newNS(t), newNS(t)
	hh := handleIn(t, host)
	name := HostVethName("early", "eth0")
	if _, err := CreateVeth(hh, Veth{HostName: name, PeerName: "eth0", PeerNSFd: nsFd(t, ctr)}); err != nil {
		t.Fatal(err)
	}
	var done <-chan error
	err := netns.Do(host, func() (err error) { done, err = DeleteLinkEarly(hh, name); return err })
	if err != nil {
		t.Fatal(err)
	}
	// Unregistered already, whether or not the deletion has finished.
	other := handleIn(t, host)
	if l, err := LinkByName(other, name); l != nil || err != nil {
		t.Fatalf("link still listed: %v %v", l, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l, _ := LinkByName(handleIn(t, ctr), "eth0"); l != nil {
		t.Fatal("peer survived")
	}
	err = netns.Do(host, func() (err error) { done, err = DeleteLinkEarly(hh, name); return err })
	if err != nil || <-done != nil {
		t.Fatalf("deleting a missing link: %v", err)
	}
}

// TestDefaultRouteMTU reads the default routes' path MTU in a namespace
// of its own per case: links of their own MTUs, routes with and without
// an mtu metric, and both families.
func TestDefaultRouteMTU(t *testing.T) {
	type link struct {
		name string
		mtu  int
	}
	type route struct {
		dst    string // 0.0.0.0/0 or ::/0
		link   string
		metric int
		mtu    int
	}
	tests := []struct {
		name    string
		links   []link
		routes  []route
		wantMTU int
		wantDev string
	}{
		{"no default route", []link{{"up0", 9000}}, nil, 0, ""},
		{"jumbo", []link{{"up0", 9000}}, []route{{dst: "0.0.0.0/0", link: "up0"}}, 9000, "up0"},
		{"route mtu", []link{{"up0", 9000}}, []route{{dst: "0.0.0.0/0", link: "up0", mtu: 1400}}, 1400, "up0"},
		{"lowest metric", []link{{"slow0", 1500}, {"up0", 9000}},
			[]route{{dst: "0.0.0.0/0", link: "slow0", metric: 600}, {dst: "0.0.0.0/0", link: "up0", metric: 100}}, 9000, "up0"},
		{"IPv6 alone", []link{{"up6", 1480}}, []route{{dst: "::/0", link: "up6"}}, 1480, "up6"},
		{"the smaller family", []link{{"up0", 9000}, {"up6", 1500}},
			[]route{{dst: "0.0.0.0/0", link: "up0"}, {dst: "::/0", link: "up6"}}, 1500, "up6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := handleIn(t, newNS(t))
			for _, l := range tt.links {
				// A veth pair, both ends here: this kernel may have no dummy.
				if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.name, MTU: l.mtu}, PeerName: l.name + "p"}); err != nil {
					t.Fatalf("veth %s: %v", l.name, err)
				}
				for _, name := range []string{l.name, l.name + "p"} {
					vl, err := h.LinkByName(name)
					if err != nil {
						t.Fatal(err)
					}
					if err := h.LinkSetUp(vl); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, r := range tt.routes {
				l, err := h.LinkByName(r.link)
				if err != nil {
					t.Fatal(err)
				}
				_, dst, _ := net.ParseCIDR(r.dst)
				nr := &netlink.Route{Dst: dst, LinkIndex: l.Attrs().Index, Scope: netlink.SCOPE_LINK, Priority: r.metric, MTU: r.mtu}
				if err := h.RouteAdd(nr); err != nil {
					t.Fatalf("route %s dev %s metric %d mtu %d: %v", r.dst, r.link, r.metric, r.mtu, err)
				}
			}
			mtu, dev, err := DefaultRouteMTU(h)
			if err != nil || mtu != tt.wantMTU || dev != tt.wantDev {
				t.Fatalf("DefaultRouteMTU: %d on %q, %v; want %d on %q", mtu, dev, err, tt.wantMTU, tt.wantDev)
			}
		})
	}
}
