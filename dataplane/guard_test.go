package dataplane

import (
	"net"
	"net/netip"
	"testing"

	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/netns"
)

func TestGuardSources(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	g := Guard{PodMAC: mac, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")},
		Allowed: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.1.0.0/24")}}
	s := g.sources()
	if len(s.src4) != 1 || s.src4[0] != netip.MustParsePrefix("10.1.0.0/16") {
		t.Errorf("src4 = %v, want the allowed /16 alone (it holds the rest)", s.src4)
	}
	if len(s.arp4) != 2 || s.arp4[0] != netip.MustParsePrefix("0.0.0.0/32") {
		t.Errorf("arp4 = %v", s.arp4)
	}
	ll := netip.PrefixFrom(LinkLocalOf(mac), 128)
	if len(s.src6) != 2 || len(s.own6) != 2 || s.src6[0] != netip.MustParsePrefix("fd00::5/128") || s.src6[1] != ll {
		t.Errorf("src6 = %v, own6 = %v", s.src6, s.own6)
	}
	v4only := Guard{PodMAC: mac, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5")}}.sources()
	if len(v4only.src6) != 0 || len(v4only.own6) != 0 {
		t.Errorf("an IPv4-only pod may send IPv6 from %v", v4only.src6)
	}
}

func TestGuardTag(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	owner := tag.Owner{Network: "n", ContainerID: "c1", IfName: "eth0"}
	a := Guard{Owner: owner, HostIf: "pn1", PodMAC: mac, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")}}
	b := a
	b.Addrs = []netip.Addr{netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.1.0.5")}
	if a.digest() != b.digest() {
		t.Error("the digest depends on the order of the addresses")
	}
	c := a
	c.Addrs = []netip.Addr{netip.MustParseAddr("10.1.0.6")}
	if a.digest() == c.digest() {
		t.Error("the digest does not depend on the addresses")
	}
	o, d, ok := parseGuardTag(a.tag())
	if !ok || o != owner || d != a.digest() {
		t.Errorf("parseGuardTag(%q) = %v %q %v", a.tag(), o, d, ok)
	}
	if _, _, ok := parseGuardTag([]byte("podnet masq v2 ipv4 added")); ok {
		t.Error("parsed another rule's tag")
	}
}

func TestGuardLifecycle(t *testing.T) {
	host, ctr := newNS(t), newNS(t)
	hh := handleIn(t, host)
	name := HostVethName("ctr1", "eth0")
	hmac, cmac := AttachmentMACs("ctr1", "eth0")
	owner := tag.Owner{Network: "n1", ContainerID: "ctr1", IfName: "eth0"}
	if _, err := CreateVeth(hh, Veth{HostName: name, HostMAC: hmac, HostAlias: owner.Alias(), PeerName: "eth0", PeerMAC: cmac, PeerNSFd: nsFd(t, ctr)}); err != nil {
		t.Fatal(err)
	}
	g := Guard{Owner: owner, HostIf: name, PodMAC: cmac, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")}}
	err := netns.Do(host, func() error {
		gs, err := NewGuards()
		if err != nil {
			return err
		}
		defer gs.Close()
		for range 2 { // a second Install replaces the first
			if err := gs.Install(g); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := gs.Current(g); !ok || err != nil {
			t.Errorf("Current after Install = %v, %v", ok, err)
		}
		other := g
		other.Addrs = other.Addrs[:1]
		if ok, _ := gs.Current(other); ok {
			t.Error("Current for other addresses")
		}
		owners, err := gs.Owners()
		if err != nil || len(owners) != 1 || owners[name] != owner {
			t.Errorf("Owners = %v, %v", owners, err)
		}
		for range 2 { // Remove is idempotent
			if err := gs.Remove(name); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := gs.Current(g); ok || err != nil {
			t.Errorf("Current after Remove = %v, %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
