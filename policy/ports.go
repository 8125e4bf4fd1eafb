package policy

import (
	"cmp"
	"fmt"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// portSpec is a rule's ports list compiled.
type portSpec struct {
	all    bool // the list is empty: every protocol and port
	ranges []PortRange
	named  []portName
}

// portName is a named port of a rule: it resolves on the destination pod
// to the container port with that name and protocol.
type portName struct {
	protocol Protocol
	name     string
}

func (n portName) String() string { return fmt.Sprintf("%s/%s", n.protocol, n.name) }

// compilePorts compiles a rule's ports (API reference, NetworkPolicyPort):
// the protocol defaults to TCP; no port means every port of the protocol;
// endPort makes port..endPort and needs a numeric port no greater than it.
// An entry the API server would refuse matches nothing and is reported
// through bad(index, why).
func compilePorts(ports []networkingv1.NetworkPolicyPort, bad func(int, string)) portSpec {
	if len(ports) == 0 {
		return portSpec{all: true}
	}
	var ps portSpec
	for i, p := range ports {
		proto := TCP
		if p.Protocol != nil {
			var ok bool
			if proto, ok = protocolFromAPI(*p.Protocol); !ok || *p.Protocol == "" {
				bad(i, fmt.Sprintf("protocol %q", *p.Protocol))
				continue
			}
		}
		switch {
		case p.Port == nil:
			if p.EndPort != nil {
				bad(i, "endPort without port")
				continue
			}
			ps.ranges = append(ps.ranges, PortRange{proto, 0, 65535})
		case p.Port.Type == intstr.Int:
			first, last := p.Port.IntVal, p.Port.IntVal
			if p.EndPort != nil {
				last = *p.EndPort
			}
			if first < 1 || last > 65535 || last < first {
				bad(i, fmt.Sprintf("port %d, endPort %d", first, last))
				continue
			}
			ps.ranges = append(ps.ranges, PortRange{proto, uint16(first), uint16(last)})
		default:
			if p.EndPort != nil {
				bad(i, "endPort with a named port")
				continue
			}
			ps.named = append(ps.named, portName{proto, p.Port.StrVal})
		}
	}
	ps.ranges = normalizeRanges(ps.ranges)
	slices.SortFunc(ps.named, comparePortNames)
	ps.named = slices.Compact(ps.named)
	return ps
}

func comparePortNames(a, b portName) int {
	return cmp.Or(cmp.Compare(a.protocol, b.protocol), cmp.Compare(a.name, b.name))
}

// normalizeRanges sorts ranges and merges the ones that overlap or touch.
func normalizeRanges(rs []PortRange) []PortRange {
	slices.SortFunc(rs, func(a, b PortRange) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.First, b.First), cmp.Compare(a.Last, b.Last))
	})
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].Protocol == r.Protocol && uint32(r.First) <= uint32(out[n-1].Last)+1 {
			out[n-1].Last = max(out[n-1].Last, r.Last)
			continue
		}
		out = append(out, r)
	}
	return out
}

// resolveOn returns the ports of ps's names on pod (ingress: the pod the
// rule protects is the destination), added to its numeric ranges.
func (ps *portSpec) resolveOn(pod *Pod) []PortRange {
	if len(ps.named) == 0 {
		return ps.ranges
	}
	out := slices.Clone(ps.ranges)
	for _, n := range ps.named {
		for _, cp := range pod.Ports {
			if cp.Name == n.name && cp.Protocol == n.protocol {
				out = append(out, PortRange{n.protocol, cp.Port, cp.Port})
			}
		}
	}
	return normalizeRanges(out)
}
