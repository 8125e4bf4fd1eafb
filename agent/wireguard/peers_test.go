package wireguard

import (
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/route"
)

func mustKey(t *testing.T) wgtypes.Key {
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey()
}

// TestDesiredPeers: one peer per node with a usable key, AllowedIPs the
// prefixes the routes send through podnet.wg to it (IPv4 and IPv6) and
// its underlay address (what its host's own packets to pods here come
// from), the
// endpoint its underlay address and the port; a node with a malformed
// key or none is skipped by name and the other peers are unaffected.
func TestDesiredPeers(t *testing.T) {
	kb, kc := mustKey(t), mustKey(t)
	rec := func(name, addr, key string) clusterstate.NodeRecord {
		return clusterstate.NodeRecord{Name: name, Address: netip.MustParseAddr(addr), WireGuardKey: key}
	}
	nodes := map[string]clusterstate.NodeRecord{
		"a": rec("a", "198.18.0.11", mustKey(t).String()),
		"b": rec("b", "198.18.0.12", kb.String()),
		"c": rec("c", "198.18.0.13", kc.String()),
		"d": rec("d", "198.18.0.14", "bm90LWEta2V5"),
		"e": rec("e", "198.18.0.15", ""),
	}
	blocks := map[netip.Prefix]string{
		netip.MustParsePrefix("10.244.0.0/26"):  "a",
		netip.MustParsePrefix("10.244.0.64/26"): "b",
		netip.MustParsePrefix("fd00::/122"):     "b",
		netip.MustParsePrefix("10.244.1.0/26"):  "d",
	}
	d := route.Compute(route.Params{Self: "a", Mode: route.ModeHostGW, WireGuard: true}, &clusterstate.Snapshot{Nodes: nodes, Blocks: blocks})
	peers, skipped := DesiredPeers(d, nodes, "a", 51871)
	want := []Peer{
		{Node: "b", Key: kb, Endpoint: netip.MustParseAddrPort("198.18.0.12:51871"),
			AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.244.0.64/26"), netip.MustParsePrefix("198.18.0.12/32"), netip.MustParsePrefix("fd00::/122")}},
		{Node: "c", Key: kc, Endpoint: netip.MustParseAddrPort("198.18.0.13:51871"), AllowedIPs: []netip.Prefix{netip.MustParsePrefix("198.18.0.13/32")}},
	}
	if !reflect.DeepEqual(peers, want) {
		t.Errorf("peers\n%+v\nwant\n%+v", peers, want)
	}
	wantSkipped := []Skipped{{"d", "wireguard public key is not 32 bytes of base64"}, {"e", "no wireguard public key yet"}}
	if !reflect.DeepEqual(skipped, wantSkipped) {
		t.Errorf("skipped %+v, want %+v", skipped, wantSkipped)
	}
}

// TestPeerChanges: an unchanged device needs no change (a restart
// flushes nothing); a peer whose allowed IPs or endpoint differ is
// replaced alone; a peer no node wants is removed; a new one added.
func TestPeerChanges(t *testing.T) {
	kb, kc, kold := mustKey(t), mustKey(t), mustKey(t)
	ipn := func(s string) net.IPNet {
		_, n, _ := net.ParseCIDR(s)
		return *n
	}
	want := []Peer{
		{Node: "b", Key: kb, Endpoint: netip.MustParseAddrPort("198.18.0.12:51871"), AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.244.0.64/26")}},
		{Node: "c", Key: kc, Endpoint: netip.MustParseAddrPort("198.18.0.13:51871")},
	}
	same := []wgtypes.Peer{
		{PublicKey: kb, Endpoint: &net.UDPAddr{IP: net.ParseIP("198.18.0.12"), Port: 51871}, AllowedIPs: []net.IPNet{ipn("10.244.0.64/26")}},
		{PublicKey: kc, Endpoint: &net.UDPAddr{IP: net.ParseIP("198.18.0.13").To4(), Port: 51871}},
	}
	if ch := PeerChanges(same, want); len(ch) != 0 {
		t.Errorf("unchanged device: changes %+v, want none", ch)
	}
	have := []wgtypes.Peer{
		{PublicKey: kb, Endpoint: &net.UDPAddr{IP: net.ParseIP("198.18.0.12"), Port: 51871}, AllowedIPs: []net.IPNet{ipn("10.244.0.64/26"), ipn("10.244.9.0/26")}},
		{PublicKey: kold, Endpoint: &net.UDPAddr{IP: net.ParseIP("198.18.0.19"), Port: 51871}},
	}
	ch := PeerChanges(have, want)
	if len(ch) != 3 {
		t.Fatalf("changes %+v; want b replaced, c added, the old one removed", ch)
	}
	if ch[0].PublicKey != kb || !ch[0].ReplaceAllowedIPs || len(ch[0].AllowedIPs) != 1 || ch[0].Remove {
		t.Errorf("b: %+v", ch[0])
	}
	if ch[1].PublicKey != kc || ch[1].Endpoint.String() != "198.18.0.13:51871" || ch[1].Remove {
		t.Errorf("c: %+v", ch[1])
	}
	if ch[2].PublicKey != kold || !ch[2].Remove {
		t.Errorf("old: %+v", ch[2])
	}
}

// TestPeerChangesNewKey: a node whose key changed gets its new key added
// with every allowed IP of the node (moved from the old key's peer as
// the device takes them) before the old key's peer is removed, in one
// change list: no prefix is without a peer in between.
func TestPeerChangesNewKey(t *testing.T) {
	kold, knew := mustKey(t), mustKey(t)
	_, n1, _ := net.ParseCIDR("10.244.0.64/26")
	_, n2, _ := net.ParseCIDR("fd00::/122")
	have := []wgtypes.Peer{{PublicKey: kold, Endpoint: &net.UDPAddr{IP: net.ParseIP("198.18.0.12"), Port: 51871}, AllowedIPs: []net.IPNet{*n1, *n2}}}
	want := []Peer{{Node: "b", Key: knew, Endpoint: netip.MustParseAddrPort("198.18.0.12:51871"),
		AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.244.0.64/26"), netip.MustParsePrefix("fd00::/122")}}}
	ch := PeerChanges(have, want)
	if len(ch) != 2 || ch[0].PublicKey != knew || ch[0].Remove || !ch[0].ReplaceAllowedIPs || len(ch[0].AllowedIPs) != 2 ||
		ch[1].PublicKey != kold || !ch[1].Remove {
		t.Fatalf("changes %+v; want the new key with both prefixes, then the old one removed", ch)
	}
}

// TestRestartHandshakes: each peer without a handshake since t (and
// with an endpoint) is removed and added again as it was, with a
// keepalive that KeepaliveOff turns off; a peer with a newer handshake,
// or one the filter leaves out, is left alone.
func TestRestartHandshakes(t *testing.T) {
	kdone, kwait, knoep, kother := mustKey(t), mustKey(t), mustKey(t), mustKey(t)
	_, n1, _ := net.ParseCIDR("10.244.0.64/26")
	since := time.Now()
	ep := &net.UDPAddr{IP: net.ParseIP("198.18.0.12"), Port: 51871}
	have := []wgtypes.Peer{
		{PublicKey: kdone, Endpoint: ep, LastHandshakeTime: since.Add(time.Millisecond)},
		{PublicKey: kwait, Endpoint: ep, AllowedIPs: []net.IPNet{*n1}, LastHandshakeTime: since.Add(-time.Minute)},
		{PublicKey: knoep},
		{PublicKey: kother, Endpoint: ep, LastHandshakeTime: since.Add(-time.Minute)},
	}
	ch := RestartHandshakes(have, since, 25*time.Second, func(k wgtypes.Key) bool { return k != kother })
	if len(ch) != 2 || ch[0].PublicKey != kwait || !ch[0].Remove || ch[1].PublicKey != kwait || ch[1].Remove ||
		ch[1].Endpoint != ep || !ch[1].ReplaceAllowedIPs || len(ch[1].AllowedIPs) != 1 ||
		ch[1].PersistentKeepaliveInterval == nil || *ch[1].PersistentKeepaliveInterval != 25*time.Second {
		t.Fatalf("changes %+v; want the waiting peer removed and added again with a keepalive", ch)
	}
	off := KeepaliveOff(ch)
	if len(off) != 1 || off[0].PublicKey != kwait || !off[0].UpdateOnly || *off[0].PersistentKeepaliveInterval != 0 {
		t.Errorf("keepalive off: %+v", off)
	}
}
