package flowcap

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"

	"github.com/podnet/podnet/flows"
)

// fakePods resolves addresses from a table: "ns/name" and whether local.
type fakePods map[netip.Addr]struct {
	ns, pod string
	local   bool
}

func (f fakePods) ResolveAddr(a netip.Addr) (string, string, bool) {
	p := f[a]
	return p.ns, p.pod, p.local
}

type fakeIndex map[uint64][]flows.Rule

func (f fakeIndex) FlowRules(id uint64) []flows.Rule { return f[id] }

var (
	webIP   = netip.MustParseAddr("10.244.1.5")
	dbIP    = netip.MustParseAddr("10.244.2.7")
	svcIP   = netip.MustParseAddr("10.96.0.10")
	outIP   = netip.MustParseAddr("192.0.2.1")
	nodeIP  = netip.MustParseAddr("198.18.0.1")
	egRule  = flows.Rule{Kind: "NetworkPolicy", Namespace: "shop", Name: "web", Direction: "egress", Index: 0, Action: "Allow"}
	inRule  = flows.Rule{Kind: "NetworkPolicy", Namespace: "shop", Name: "db", Direction: "ingress", Index: 1, Action: "Allow"}
	cnpRule = flows.Rule{Kind: "ClusterNetworkPolicy", Tier: "Admin", Name: "deny-db", Direction: "ingress", Index: 0, Action: "Deny"}
)

func testJoiner() joiner {
	return joiner{node: "node-1",
		res: fakePods{
			webIP: {"shop", "web-1", true},
			dbIP:  {"shop", "db-0", false},
		},
		index: fakeIndex{1: {egRule}, 2: {inRule}, 3: {cnpRule}},
	}
}

func ctFlow(proto uint8, src, dst, replySrc, replyDst netip.Addr, sport, dport, rsport uint16) *conntrack.Flow {
	f := &conntrack.Flow{ID: 9}
	f.TupleOrig.IP = conntrack.IPTuple{SourceAddress: src, DestinationAddress: dst}
	f.TupleOrig.Proto = conntrack.ProtoTuple{Protocol: proto, SourcePort: sport, DestinationPort: dport}
	f.TupleReply.IP = conntrack.IPTuple{SourceAddress: replySrc, DestinationAddress: replyDst}
	f.TupleReply.Proto = conntrack.ProtoTuple{Protocol: proto, SourcePort: rsport, DestinationPort: sport}
	return f
}

func TestJoin(t *testing.T) {
	now := time.Date(2026, 11, 29, 5, 30, 0, 0, time.UTC)
	web := flows.Endpoint{IP: webIP, Port: 40112, Namespace: "shop", Pod: "web-1"}
	db := flows.Endpoint{IP: dbIP, Port: 5432, Namespace: "shop", Pod: "db-0"}
	counted := ctFlow(6, webIP, dbIP, dbIP, webIP, 40112, 5432, 5432)
	counted.CountersOrig = conntrack.Counter{Packets: 6, Bytes: 400}
	counted.CountersReply = conntrack.Counter{Direction: true, Packets: 4, Bytes: 1000}
	icmp := ctFlow(1, webIP, outIP, outIP, nodeIP, 0, 0, 0)
	icmp.TupleOrig.Proto.ICMPID = 77
	tests := []struct {
		name   string
		ev     flows.Event
		f      *conntrack.Flow
		l      Labels
		want   flows.Record
		wantOK bool
	}{{
		name: "new, both sides' rules, egress first",
		ev:   flows.Start, f: ctFlow(6, webIP, dbIP, dbIP, webIP, 40112, 5432, 5432), l: Labels{Egress: 1, Ingress: 2},
		want:   flows.Record{Event: flows.Start, Protocol: "TCP", Src: web, Dst: db, Rules: []flows.Rule{egRule, inRule}},
		wantOK: true,
	}, {
		name: "new, only the ingress side selected",
		ev:   flows.Start, f: ctFlow(17, webIP, dbIP, dbIP, webIP, 40112, 5432, 5432), l: Labels{Ingress: 3},
		want:   flows.Record{Event: flows.Start, Protocol: "UDP", Src: web, Dst: db, Rules: []flows.Rule{cnpRule}},
		wantOK: true,
	}, {
		name: "destroy: both directions counted",
		ev:   flows.End, f: counted, l: Labels{Egress: 1},
		want:   flows.Record{Event: flows.End, Protocol: "TCP", Src: web, Dst: db, Rules: []flows.Rule{egRule}, Packets: 10, Bytes: 1400},
		wantOK: true,
	}, {
		name: "kube-proxy DNAT: the reply's source is the destination, the Service address is not recorded",
		ev:   flows.Start, f: ctFlow(6, webIP, svcIP, dbIP, webIP, 40112, 80, 5432),
		want:   flows.Record{Event: flows.Start, Protocol: "TCP", Src: web, Dst: db},
		wantOK: true,
	}, {
		name: "SNAT to the outside: ICMP has no ports, the outside address no pod",
		ev:   flows.Start, f: icmp,
		want:   flows.Record{Event: flows.Start, Protocol: "ICMP", Src: flows.Endpoint{IP: webIP, Namespace: "shop", Pod: "web-1"}, Dst: flows.Endpoint{IP: outIP}},
		wantOK: true,
	}, {
		name: "no pod of this node at either end",
		ev:   flows.Start, f: ctFlow(6, nodeIP, dbIP, dbIP, nodeIP, 1, 2, 2),
	}, {
		name: "an unknown rule id names no rule",
		ev:   flows.Start, f: ctFlow(132, webIP, dbIP, dbIP, webIP, 1, 2, 2), l: Labels{Egress: 99},
		want: flows.Record{Event: flows.Start, Protocol: "SCTP", Src: flows.Endpoint{IP: webIP, Port: 1, Namespace: "shop", Pod: "web-1"},
			Dst: flows.Endpoint{IP: dbIP, Port: 2, Namespace: "shop", Pod: "db-0"}},
		wantOK: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := testJoiner()
			got, ok := j.join(now, tt.ev, tt.f, j.rules(tt.l))
			if ok != tt.wantOK {
				t.Fatalf("ok %v, want %v (%+v)", ok, tt.wantOK, got)
			}
			if !ok {
				return
			}
			tt.want.Time, tt.want.Node, tt.want.Verdict = now, "node-1", flows.Forwarded
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	l := Labels{Egress: 0x0102030405060708, Ingress: 0xa0b0c0d0e0f00001}
	b := l.LabelBytes()
	if got := ParseLabels(b[:]); got != l {
		t.Errorf("round trip %+v, want %+v", got, l)
	}
	if got := ParseLabels(b[:8]); got != (Labels{}) {
		t.Errorf("8 bytes: %+v, want no rules", got)
	}
	if got := ParseLabels(nil); got != (Labels{}) {
		t.Errorf("no label: %+v", got)
	}
}

func TestProtocolName(t *testing.T) {
	for p, want := range map[uint8]string{1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMPv6", 132: "SCTP", 47: "47"} {
		if got := ProtocolName(p); got != want {
			t.Errorf("%d: %q, want %q", p, got, want)
		}
	}
}

func TestRuleMemory(t *testing.T) {
	r := func(n int) []flows.Rule { return []flows.Rule{{Name: fmt.Sprint(n)}} }
	name := func(rs []flows.Rule) string {
		if len(rs) == 0 {
			return ""
		}
		return rs[0].Name
	}
	lm := newRuleMemory(3)
	lm.put(1, r(1))
	lm.put(2, nil) // no rules: nothing remembered
	lm.put(3, r(3))
	if got := name(lm.take(1)); got != "1" {
		t.Errorf("take 1: %q", got)
	}
	if got := lm.take(1); got != nil {
		t.Errorf("take 1 again: %+v", got)
	}
	// 1's slot is stale now; filling the ring drops the oldest live
	// entry (3) only when its slot comes round.
	lm.put(4, r(4))
	lm.put(5, r(5))
	if lm.len() != 3 {
		t.Errorf("len %d, want 3", lm.len())
	}
	lm.put(6, r(6)) // overwrites 3's slot
	if got := lm.take(3); got != nil {
		t.Errorf("3 survived its slot: %+v", got)
	}
	if lm.len() != 3 {
		t.Errorf("len %d, want 3 (bounded)", lm.len())
	}
	for i := range uint32(1000) {
		lm.put(i, r(1))
	}
	if lm.len() > 3 {
		t.Errorf("len %d beyond its bound", lm.len())
	}
}
