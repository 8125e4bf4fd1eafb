package dataplane

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/netns"
)

func mustMAC(s string) net.HardwareAddr {
	mac, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return mac
}

func TestGuardSources(t *testing.T) {
	mac := mustMAC("02:00:00:00:00:01")
	g := Guard{PodMAC: mac, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.1.0.5")},
		Allowed: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.1.0.0/24")}}
	s := g.sources()
	if len(s.own4) != 1 || len(s.wide4) != 1 || s.wide4[0] != netip.MustParsePrefix("10.1.0.0/16") {
		t.Errorf("own4 = %v, wide4 = %v: want the address once, and the allowed /16 alone (it holds the /24)", s.own4, s.wide4)
	}
	ll := LinkLocalOf(mac)
	if len(s.own6) != 2 || s.own6[0] != netip.MustParseAddr("fd00::5") || s.own6[1] != ll {
		t.Errorf("own6 = %v, want the pod's address and its link-local one", s.own6)
	}
	v4only := Guard{PodMAC: mac, Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5")}}.sources()
	if len(v4only.own6) != 0 {
		t.Errorf("an IPv4-only pod may send IPv6 from %v", v4only.own6)
	}
}

func TestGuardElements(t *testing.T) {
	g := Guard{Owner: tag.Owner{Network: "n", ContainerID: "c1", IfName: "eth0"}, HostIf: "pn1", PodMAC: mustMAC("02:00:00:00:00:01"),
		Addrs: []netip.Addr{netip.MustParseAddr("10.1.0.5")}, Allowed: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}
	e := g.elements()
	ifn := "pn1" + strings.Repeat("\x00", 13)
	if len(e[guardSetPods]) != 1 || string(e[guardSetPods][0].Key) != ifn || e[guardSetPods][0].Comment != "n c1 eth0" {
		t.Errorf("pods = %+v", e[guardSetPods])
	}
	if k := e[guardSetMACs][0].Key; len(k) != 24 || string(k[:16]) != ifn || !bytes.Equal(k[16:], []byte{2, 0, 0, 0, 0, 1, 0, 0}) {
		t.Errorf("macs key = %x: want the name, the MAC, and two bytes of padding", k)
	}
	if k := e[guardSetSrc4][0].Key; len(k) != 20 || !bytes.Equal(k[16:], []byte{10, 1, 0, 5}) {
		t.Errorf("src4 key = %x", k)
	}
	w := e[guardSetWide4][0]
	if !bytes.Equal(w.Key[16:], []byte{10, 9, 0, 0}) || !bytes.Equal(w.KeyEnd[16:], []byte{10, 9, 255, 255}) {
		t.Errorf("wide4 = %x - %x, want 10.9.0.0 to 10.9.255.255", w.Key, w.KeyEnd)
	}
	if len(e[guardSetSrc6])+len(e[guardSetWide6]) != 0 {
		t.Errorf("an IPv4-only pod has IPv6 elements: %v %v", e[guardSetSrc6], e[guardSetWide6])
	}
}

func TestGuardLifecycle(t *testing.T) {
	for _, bridged := range []bool{false, true} {
		t.Run(fmt.Sprintf("bridged=%v", bridged), func(t *testing.T) { testGuardLifecycle(t, bridged) })
	}
}

func testGuardLifecycle(t *testing.T, bridged bool) {
	host := newNS(t)
	name := HostVethName("ctr1", "eth0")
	_, cmac := AttachmentMACs("ctr1", "eth0")
	owner := tag.Owner{Network: "n1", ContainerID: "ctr1", IfName: "eth0"}
	g := Guard{Owner: owner, HostIf: name, PodMAC: cmac, Bridged: bridged,
		Addrs:   []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")},
		Allowed: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("fd09::/64")}}
	neighbour := g
	neighbour.Owner.ContainerID, neighbour.HostIf = "ctr2", HostVethName("ctr2", "eth0")
	err := netns.Do(host, func() error {
		gs, err := NewGuards()
		if err != nil {
			return err
		}
		defer gs.Close()
		for range 2 { // Install is idempotent
			if err := gs.Install(g); err != nil {
				t.Fatal(err)
			}
		}
		if err := gs.Install(neighbour); err != nil {
			t.Fatal(err)
		}
		if ok, err := gs.Current(g); !ok || err != nil {
			t.Errorf("Current after Install = %v, %v", ok, err)
		}
		other := g
		other.Addrs = other.Addrs[:1]
		if ok, _ := gs.Current(other); ok {
			t.Error("Current for other addresses")
		}
		if err := gs.Replace(other); err != nil {
			t.Fatal(err)
		}
		if ok, _ := gs.Current(other); !ok {
			t.Error("not Current after Replace")
		}
		owners, err := gs.Owners()
		if err != nil || len(owners) != 2 || owners[name] != owner {
			t.Errorf("Owners = %v, %v", owners, err)
		}
		if err := gs.QueueRemove(other); err != nil {
			t.Fatal(err)
		}
		if err := gs.conn.Flush(); err != nil {
			t.Fatalf("removal by known elements: %v", err)
		}
		if err := gs.QueueRemove(other); err != nil {
			t.Fatal(err)
		}
		if err := gs.conn.Flush(); err == nil {
			t.Error("a second removal by known elements succeeded: DEL would never fall back to Remove")
		}
		for range 2 { // Remove is idempotent
			if err := gs.Remove(name); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := gs.Current(g); ok || err != nil {
			t.Errorf("Current after Remove = %v, %v", ok, err)
		}
		if ok, _ := gs.Current(neighbour); !ok {
			t.Error("removing one interface's guard touched another's")
		}
		if err := gs.Remove(neighbour.HostIf); err != nil {
			t.Fatal(err)
		}
		left, err := gs.listed(newGuardObjects(bridged), "")
		if err != nil {
			t.Fatal(err)
		}
		for set, elems := range left {
			if len(elems) > 0 {
				t.Errorf("%s keeps %d elements after every guard was removed", set, len(elems))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
