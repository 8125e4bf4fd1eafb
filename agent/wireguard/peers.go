package wireguard

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane"
)

// DefaultPort is the UDP port podnet.wg listens on, on the underlay.
const DefaultPort = 51871

// Peer is one other node as the device should know it.
type Peer struct {
	Node     string
	Key      wgtypes.Key
	Endpoint netip.AddrPort
	// AllowedIPs are the prefixes routed through podnet.wg to the node,
	// and the node's underlay address, sorted.
	AllowedIPs []netip.Prefix
}

// Skipped is a node left without a peer, and why.
type Skipped struct {
	Node, Reason string
}

// DesiredPeers are the peers for the routes d (route.Compute with
// WireGuard on): one per node that a WireGuard route goes to, with its
// key and underlay endpoint from its record. A node that has a record
// but no usable key is Skipped (Compute gave it unreachable routes).
func DesiredPeers(d route.Desired, nodes map[string]clusterstate.NodeRecord, self string, port int) ([]Peer, []Skipped) {
	allowed := map[string][]netip.Prefix{}
	for _, r := range d.SortedRoutes() {
		if r.Kind == route.RouteWireGuard {
			allowed[r.Node] = append(allowed[r.Node], r.Dst)
		}
	}
	var peers []Peer
	var skipped []Skipped
	for name, rec := range nodes {
		if name == self {
			continue
		}
		key, ok := rec.WireGuardPublicKey()
		switch {
		case !ok && rec.WireGuardKey == "":
			skipped = append(skipped, Skipped{Node: name, Reason: "no wireguard public key yet"})
			continue
		case !ok:
			skipped = append(skipped, Skipped{Node: name, Reason: "wireguard public key is not 32 bytes of base64"})
			continue
		case !rec.Address.IsValid():
			skipped = append(skipped, Skipped{Node: name, Reason: "no underlay address"})
			continue
		}
		// A node with a key but no pod prefixes yet is a peer all the
		// same: its first block then needs only an allowed IP.
		// The node's own address too: a packet the node sends itself
		// to a pod here (the API server's proxy, a NodePort's SNAT, a
		// host-network client) goes through its podnet.wg with that
		// address as its source, and WireGuard drops what arrives from
		// a peer with a source outside its allowed IPs. Nothing is
		// routed to the address through podnet.wg: the device's own
		// UDP goes to it on the underlay.
		ips := append(slices.Clone(allowed[name]), netip.PrefixFrom(rec.Address, rec.Address.BitLen()))
		slices.SortFunc(ips, comparePrefix)
		peers = append(peers, Peer{Node: name, Key: key, Endpoint: netip.AddrPortFrom(rec.Address, uint16(port)), AllowedIPs: ips})
	}
	slices.SortFunc(peers, func(a, b Peer) int { return strings.Compare(a.Node, b.Node) })
	slices.SortFunc(skipped, func(a, b Skipped) int { return strings.Compare(a.Node, b.Node) })
	return peers, skipped
}

// PeerChanges are the changes that make a device whose peers are have
// match want: a peer added or replaced (its allowed IPs replaced) only
// where it differs, and removed where no node wants it. Nothing else on
// the device is touched, so an unchanged peer keeps its session.
func PeerChanges(have []wgtypes.Peer, want []Peer) []wgtypes.PeerConfig {
	cur := make(map[wgtypes.Key]wgtypes.Peer, len(have))
	for _, p := range have {
		cur[p.PublicKey] = p
	}
	var out []wgtypes.PeerConfig
	seen := map[wgtypes.Key]bool{}
	for _, w := range want {
		if seen[w.Key] {
			continue // two nodes claiming one key: the first (by name) wins
		}
		seen[w.Key] = true
		if h, ok := cur[w.Key]; ok && samePeer(h, w) {
			continue
		}
		ips := make([]net.IPNet, 0, len(w.AllowedIPs))
		for _, p := range w.AllowedIPs {
			ips = append(ips, *dataplane.IPNet(p))
		}
		out = append(out, wgtypes.PeerConfig{PublicKey: w.Key, Endpoint: net.UDPAddrFromAddrPort(w.Endpoint),
			ReplaceAllowedIPs: true, AllowedIPs: ips})
	}
	for _, h := range have {
		if !seen[h.PublicKey] {
			out = append(out, wgtypes.PeerConfig{PublicKey: h.PublicKey, Remove: true})
		}
	}
	return out
}

// RestartHandshakes are the changes that make a device start a new
// handshake now with each of its peers that has had none since t: the
// peer removed and added again as it was (its handshake state, and the
// 5 s a refused handshake waits before its retry, gone with it), with
// a persistent keepalive, whose first keepalive starts the handshake;
// the caller turns the keepalive off again (KeepaliveOff). Only peers
// whose key only accepts are touched. A peer without an endpoint is
// left alone: it cannot be reached first. The peer's routes stay, so a
// packet sent meanwhile is dropped by the device, never in the clear.
func RestartHandshakes(have []wgtypes.Peer, t time.Time, keepalive time.Duration, only func(wgtypes.Key) bool) []wgtypes.PeerConfig {
	var out []wgtypes.PeerConfig
	for _, p := range have {
		if p.Endpoint == nil || p.LastHandshakeTime.After(t) || !only(p.PublicKey) {
			continue
		}
		out = append(out, wgtypes.PeerConfig{PublicKey: p.PublicKey, Remove: true},
			wgtypes.PeerConfig{PublicKey: p.PublicKey, Endpoint: p.Endpoint, ReplaceAllowedIPs: true, AllowedIPs: p.AllowedIPs,
				PersistentKeepaliveInterval: &keepalive})
	}
	return out
}

// KeepaliveOff turns off the persistent keepalive that changes turned
// on (podnet keeps none).
func KeepaliveOff(changes []wgtypes.PeerConfig) []wgtypes.PeerConfig {
	var out []wgtypes.PeerConfig
	off := time.Duration(0)
	for _, c := range changes {
		if !c.Remove && c.PersistentKeepaliveInterval != nil && *c.PersistentKeepaliveInterval != 0 {
			out = append(out, wgtypes.PeerConfig{PublicKey: c.PublicKey, UpdateOnly: true, PersistentKeepaliveInterval: &off})
		}
	}
	return out
}

// samePeer reports whether the device's peer h is w already.
func samePeer(h wgtypes.Peer, w Peer) bool {
	if h.Endpoint == nil {
		return false
	}
	if ep := h.Endpoint.AddrPort(); netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port()) != w.Endpoint {
		return false
	}
	if len(h.AllowedIPs) != len(w.AllowedIPs) {
		return false
	}
	got := make([]netip.Prefix, 0, len(h.AllowedIPs))
	for _, n := range h.AllowedIPs {
		p, ok := dataplane.PrefixOf(&n)
		if !ok {
			return false
		}
		got = append(got, p)
	}
	slices.SortFunc(got, comparePrefix)
	want := slices.Clone(w.AllowedIPs)
	slices.SortFunc(want, comparePrefix)
	return slices.Equal(got, want)
}

func comparePrefix(x, y netip.Prefix) int {
	if c := x.Addr().Compare(y.Addr()); c != 0 {
		return c
	}
	return x.Bits() - y.Bits()
}
