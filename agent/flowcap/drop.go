package flowcap

import (
	"strconv"
	"strings"
	"time"

	"github.com/podnet/podnet/dataplane/nflog"
	"github.com/podnet/podnet/flows"
)

// The NFLOG prefixes of the drops flows are made of: a pod chain's drop
// ("podnet-flow " and the rule id in 16 lowercase hex digits), and the
// source guard's ("podnet-guard").
const (
	PolicyPrefix = "podnet-flow "
	GuardPrefix  = "podnet-guard"
)

// DefaultGroup is the NFLOG group the drops are logged to.
const DefaultGroup = 7371

// parsePrefix reads a drop's prefix: its verdict and, for a policy drop,
// the rule id. ok is false for a prefix of another writer.
func parsePrefix(p string) (v flows.Verdict, id uint64, ok bool) {
	if p == GuardPrefix {
		return flows.DroppedGuard, 0, true
	}
	hex, found := strings.CutPrefix(p, PolicyPrefix)
	if !found || len(hex) != 16 {
		return "", 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return "", 0, false
	}
	return flows.DroppedPolicy, id, true
}

// drop makes the Start record of one dropped packet and the key of its
// burst; ok is false for another writer's record. A drop is recorded
// whatever its addresses: the pod chains and the guard that log it are
// this node's pods' (a packet the guard drops has a forged source that
// names no pod, or a pod that is not the sender).
func (j joiner) drop(now time.Time, r nflog.Record) (flows.Record, foldKey, bool) {
	v, id, ok := parsePrefix(r.Prefix)
	if !ok {
		return flows.Record{}, foldKey{}, false
	}
	src := flows.Endpoint{IP: r.Src.Unmap()}
	dst := flows.Endpoint{IP: r.Dst.Unmap()}
	if hasPorts(r.Protocol) {
		src.Port, dst.Port = r.SrcPort, r.DstPort
	}
	j.resolve(&src)
	j.resolve(&dst)
	rec := flows.Record{Time: now, Node: j.node, Event: flows.Start, Protocol: ProtocolName(r.Protocol),
		Src: src, Dst: dst, Verdict: v}
	if id != 0 && j.index != nil {
		rec.Rules = j.index.FlowRules(id)
	}
	k := foldKey{verdict: v, rule: id, proto: r.Protocol, src: src.IP, dst: dst.IP, srcPort: src.Port, dstPort: dst.Port}
	return rec, k, true
}
