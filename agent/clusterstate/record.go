package clusterstate

import (
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/netip"
)

// NodeRecord is the value under nodes/<name>.
type NodeRecord struct {
	Name string `json:"name"`
	// Address is the node's underlay address: host-gw routes go via it
	// and VXLAN packets are sent to it.
	Address netip.Addr `json:"address"`
	// VTEPIP is the next hop of VXLAN routes to the node (see the VTEP
	// scheme in doc.go).
	VTEPIP netip.Addr `json:"vtepIP"`
	// VTEPMAC is the MAC address of the node's podnet.vxlan device.
	VTEPMAC string `json:"vtepMAC"`
	// LinkLocal6 is the IPv6 link-local address of the node's underlay
	// interface: host-gw routes to the node's IPv6 blocks go via it, so
	// an IPv4 underlay carries IPv6 pods. Absent when the underlay has no
	// IPv6 (or the record is from an older agent): then the node's IPv6
	// blocks are not routed in host-gw.
	LinkLocal6 netip.Addr `json:"linkLocal6,omitzero"`
	// Mode is the routing mode the node's agent runs (host-gw, vxlan or
	// auto). A node in host-gw has no VXLAN device to receive on, so a
	// peer on its segment reaches it host-gw whatever its own mode; a
	// node in vxlan may send encapsulated, so a host-gw peer keeps its
	// device to receive. That is what lets a rolling change of
	// routing_mode pass without a gap. Empty in a record of an older
	// agent: then the sender's own mode decides.
	Mode string `json:"mode,omitempty"`
	// WireGuardKey is the base64 public key of the node's podnet.wg
	// device; empty when the node does not encrypt (or runs an older
	// agent). Kept as written: a malformed key is the peer's to skip
	// (WireGuardPublicKey), never a reason to drop the node's record.
	WireGuardKey string `json:"wireguardKey,omitempty"`
}

// WireGuardPublicKey is the record's WireGuard public key; ok is false
// when there is none or it is not 32 bytes of standard base64.
func (r NodeRecord) WireGuardPublicKey() (key [32]byte, ok bool) {
	b, err := base64.StdEncoding.DecodeString(r.WireGuardKey)
	if err != nil || len(b) != len(key) {
		return key, false
	}
	copy(key[:], b)
	return key, true
}

// VTEPMAC is the MAC address of node's VXLAN device: a hash of the name,
// with the locally administered bit set and the multicast bit clear, so
// every node can compute it and it survives restarts.
func VTEPMAC(node string) net.HardwareAddr {
	h := sha256.Sum256([]byte("podnet-vtep:" + node))
	mac := net.HardwareAddr(h[:6])
	mac[0] = mac[0]&^0x01 | 0x02
	return mac
}

// NodesPrefix is the prefix of every node record under the store prefix.
func NodesPrefix(prefix string) string { return prefix + "nodes/" }

// NodeKey is the key of node's record.
func NodeKey(prefix, node string) string { return NodesPrefix(prefix) + node }

// Snapshot is what the agent knows of the cluster: the store's contents
// that matter for routing, already decoded.
type Snapshot struct {
	// Nodes are the registered nodes by name.
	Nodes map[string]NodeRecord
	// Blocks maps each prefix routed to a node as a whole to that node:
	// the blocks confirmed to it, or in the node-CIDR model its podCIDRs.
	Blocks map[netip.Prefix]string
	// Borrowed maps each allocated address whose node is not its block's
	// affine node (or whose block has none) to the node that holds it.
	Borrowed map[netip.Addr]string
}
