package flowcap

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/ti-mo/conntrack"

	"github.com/podnet/podnet/flows"
)

// RuleIndex names the policy rules behind a rule id, the value an
// accepting rule writes into half of a connection's conntrack label, or
// the id of a dropping rule's NFLOG prefix (policyrules.FlowIndex).
// FlowRules must not block on the policy service's apply, and the slice
// it returns is read, never written.
type RuleIndex interface {
	FlowRules(id uint64) []flows.Rule
}

// Resolver names the pod that holds an address: its namespace and name
// ("" when no pod holds it: a node's address, or one outside the
// cluster), and whether the pod runs on this node. It is asked for every
// flow, so it must not block on the policy service's apply.
type Resolver interface {
	ResolveAddr(netip.Addr) (namespace, pod string, local bool)
}

// Labels is a connection's conntrack label read as the two rule ids the
// policy rules write into it: the egress rule's in the low 64 label bits
// (bits 0-63), the ingress rule's in the high ones (64-127). 0 in a half
// is no rule of that side: no policy selects that side's pod (or the
// node's own traffic).
type Labels struct {
	Egress, Ingress uint64
}

// LabelBytes is the label's 16 bytes in the layout ctnetlink reports
// them and an nft "ct label set" immediate writes them: the kernel's
// array of native-endian longs, label bit n being bit n%8 of byte n/8 on
// a little-endian machine.
func (l Labels) LabelBytes() [16]byte {
	var b [16]byte
	binary.NativeEndian.PutUint64(b[0:8], l.Egress)
	binary.NativeEndian.PutUint64(b[8:16], l.Ingress)
	return b
}

// ParseLabels reads ctnetlink's CTA_LABELS; anything but 16 bytes (no
// label at all, or a kernel with a label of another size) is no rule.
func ParseLabels(b []byte) Labels {
	if len(b) != 16 {
		return Labels{}
	}
	return Labels{Egress: binary.NativeEndian.Uint64(b[0:8]), Ingress: binary.NativeEndian.Uint64(b[8:16])}
}

// joiner makes flow records of conntrack events. It is pure: what it
// knows of pods and rules comes through its resolver and index.
type joiner struct {
	node  string
	res   Resolver
	index RuleIndex
}

// join makes the record of conntrack flow f at event ev (Start for
// conntrack's new, End for its destroy), naming rules (j.rules of its
// labels). It reports
// false for a flow without a pod of this node at either end: the agent
// of a node records its own pods' flows (a flow between two nodes' pods
// is recorded by both nodes).
//
// The destination is the reply tuple's source: when kube-proxy (or any
// DNAT) rewrote the original destination, a Service's address, the
// reply comes from the pod that served it, and that pod is the flow's
// destination. The Service address is not recorded. Likewise the
// destination port is the reply's source port: the pod's, not the
// Service's.
func (j joiner) join(now time.Time, ev flows.Event, f *conntrack.Flow, rules []flows.Rule) (flows.Record, bool) {
	orig, reply := f.TupleOrig, f.TupleReply
	proto := orig.Proto.Protocol
	src := flows.Endpoint{IP: orig.IP.SourceAddress.Unmap()}
	dst := flows.Endpoint{IP: reply.IP.SourceAddress.Unmap()}
	if !dst.IP.IsValid() {
		dst.IP = orig.IP.DestinationAddress.Unmap()
	}
	if hasPorts(proto) {
		src.Port = orig.Proto.SourcePort
		dst.Port = reply.Proto.SourcePort
		if dst.Port == 0 {
			dst.Port = orig.Proto.DestinationPort
		}
	}
	srcLocal := j.resolve(&src)
	dstLocal := j.resolve(&dst)
	if !srcLocal && !dstLocal {
		return flows.Record{}, false
	}
	r := flows.Record{Time: now, Node: j.node, Event: ev, Protocol: ProtocolName(proto),
		Src: src, Dst: dst, Verdict: flows.Forwarded, Rules: rules}
	if ev == flows.End {
		r.Packets = f.CountersOrig.Packets + f.CountersReply.Packets
		r.Bytes = f.CountersOrig.Bytes + f.CountersReply.Bytes
	}
	return r, true
}

// resolve names e's pod and reports whether it is on this node.
func (j joiner) resolve(e *flows.Endpoint) bool {
	if j.res == nil || !e.IP.IsValid() {
		return false
	}
	ns, pod, local := j.res.ResolveAddr(e.IP)
	e.Namespace, e.Pod = ns, pod
	return local && pod != ""
}

// rules are the rules of a label's ids: the egress side's, then the
// ingress side's.
func (j joiner) rules(l Labels) []flows.Rule {
	if j.index == nil {
		return nil
	}
	var eg, in []flows.Rule
	if l.Egress != 0 {
		eg = j.index.FlowRules(l.Egress)
	}
	if l.Ingress != 0 {
		in = j.index.FlowRules(l.Ingress)
	}
	switch {
	case len(in) == 0:
		return eg
	case len(eg) == 0:
		return in
	}
	return slices.Concat(eg, in)
}

// IP protocol numbers.
const (
	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
	protoSCTP   = 132
)

func hasPorts(p uint8) bool { return p == protoTCP || p == protoUDP || p == protoSCTP }

// ProtocolName is a record's name of IP protocol p: TCP, UDP, SCTP,
// ICMP, ICMPv6, else the number.
func ProtocolName(p uint8) string {
	switch p {
	case protoICMP:
		return "ICMP"
	case protoTCP:
		return "TCP"
	case protoUDP:
		return "UDP"
	case protoICMPv6:
		return "ICMPv6"
	case protoSCTP:
		return "SCTP"
	}
	return strconv.Itoa(int(p))
}
