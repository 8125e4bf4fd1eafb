package flowcap

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/podnet/podnet/dataplane/nflog"
	"github.com/podnet/podnet/flows"
)

func TestParsePrefix(t *testing.T) {
	tests := []struct {
		prefix string
		v      flows.Verdict
		id     uint64
		ok     bool
	}{
		{"podnet-flow 00000000000000ab", flows.DroppedPolicy, 0xab, true},
		{"podnet-flow ffffffffffffffff", flows.DroppedPolicy, 1<<64 - 1, true},
		{"podnet-guard", flows.DroppedGuard, 0, true},
		{"podnet-flow ab", "", 0, false},
		{"podnet-flow 00000000000000zz", "", 0, false},
		{"podnet-deny in x/db", "", 0, false},
		{"", "", 0, false},
	}
	for _, tt := range tests {
		v, id, ok := parsePrefix(tt.prefix)
		if v != tt.v || id != tt.id || ok != tt.ok {
			t.Errorf("%q: %q %#x %v, want %q %#x %v", tt.prefix, v, id, ok, tt.v, tt.id, tt.ok)
		}
	}
}

func TestDrop(t *testing.T) {
	now := time.Unix(1000, 0)
	j := testJoiner()
	rec, k, ok := j.drop(now, nflog.Record{Prefix: "podnet-flow 0000000000000003", Src: webIP, Dst: dbIP, Protocol: 6, SrcPort: 4000, DstPort: 5432})
	want := flows.Record{Time: now, Node: "node-1", Event: flows.Start, Protocol: "TCP",
		Src: flows.Endpoint{IP: webIP, Port: 4000, Namespace: "shop", Pod: "web-1"}, Dst: flows.Endpoint{IP: dbIP, Port: 5432, Namespace: "shop", Pod: "db-0"},
		Verdict: flows.DroppedPolicy, Rules: []flows.Rule{cnpRule}}
	if !ok || !reflect.DeepEqual(rec, want) {
		t.Errorf("policy drop %v:\n got  %+v\n want %+v", ok, rec, want)
	}
	if k != (foldKey{verdict: flows.DroppedPolicy, rule: 3, proto: 6, src: webIP, dst: dbIP, srcPort: 4000, dstPort: 5432}) {
		t.Errorf("key %+v", k)
	}
	// A forged source names no pod; the guard's drop is recorded anyway.
	forged := netip.MustParseAddr("10.9.9.9")
	rec, _, ok = j.drop(now, nflog.Record{Prefix: "podnet-guard", Src: forged, Dst: outIP, Protocol: 1})
	if !ok || rec.Verdict != flows.DroppedGuard || rec.Src != (flows.Endpoint{IP: forged}) || rec.Protocol != "ICMP" || rec.Rules != nil {
		t.Errorf("guard drop %v %+v", ok, rec)
	}
	if _, _, ok := j.drop(now, nflog.Record{Prefix: "podnet-deny in shop/db", Src: webIP, Dst: dbIP}); ok {
		t.Error("another writer's record taken for a flow")
	}
}

func TestFolder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := newFolder(time.Second, 2)
	k1 := foldKey{verdict: flows.DroppedPolicy, rule: 1, proto: 6, src: webIP, dst: dbIP, srcPort: 1, dstPort: 2}
	k2, k3 := k1, k1
	k2.srcPort, k3.srcPort = 3, 4
	start := func(at time.Time, port uint16) flows.Record {
		return flows.Record{Time: at, Event: flows.Start, Verdict: flows.DroppedPolicy, Src: flows.Endpoint{IP: webIP, Port: port}}
	}
	// The first packet starts a burst at once; the retransmissions
	// within the window fold into it.
	rec, ok, ended := f.add(t0, k1, start(t0, 1))
	if !ok || rec.Packets != 1 || len(ended) != 0 {
		t.Fatalf("first packet: %v %+v %v", ok, rec, ended)
	}
	for i := 1; i <= 3; i++ {
		if _, ok, ended := f.add(t0.Add(time.Duration(i)*200*time.Millisecond), k1, start(t0, 1)); ok || len(ended) != 0 {
			t.Fatalf("retransmission %d not folded: %v %v", i, ok, ended)
		}
	}
	// Another 5-tuple is a burst of its own.
	if _, ok, _ := f.add(t0.Add(100*time.Millisecond), k2, start(t0.Add(100*time.Millisecond), 3)); !ok {
		t.Fatal("another 5-tuple folded")
	}
	// The window closes: k1's End counts its 4 packets; k2 had one, so
	// it ends without a record.
	ended = f.expire(t0.Add(1100 * time.Millisecond))
	if len(ended) != 1 || ended[0].Event != flows.End || ended[0].Packets != 4 || !ended[0].Time.Equal(t0.Add(time.Second)) {
		t.Fatalf("ended %+v", ended)
	}
	if f.len() != 0 {
		t.Fatalf("%d bursts open after their windows", f.len())
	}
	// The same 5-tuple after the window is a new burst.
	t1 := t0.Add(2 * time.Second)
	if _, ok, _ := f.add(t1, k1, start(t1, 1)); !ok {
		t.Fatal("a packet after the window folded into a closed burst")
	}
	f.add(t1, k1, start(t1, 1))
	f.add(t1, k2, start(t1, 3))
	// Full: the oldest burst closes early, its End at once.
	_, ok, ended = f.add(t1.Add(time.Millisecond), k3, start(t1, 4))
	if !ok || len(ended) != 1 || ended[0].Src.Port != 1 || ended[0].Packets != 2 || !ended[0].Time.Equal(t1.Add(time.Millisecond)) {
		t.Fatalf("eviction: %v %+v", ok, ended)
	}
	if f.len() != 2 {
		t.Fatalf("%d open, bound 2", f.len())
	}
}

// The queue of open bursts does not grow without bound under churn.
func TestFolderQueueBounded(t *testing.T) {
	f := newFolder(time.Millisecond, 8)
	now := time.Unix(0, 0)
	for i := range 100000 {
		now = now.Add(time.Millisecond)
		f.add(now, foldKey{srcPort: uint16(i)}, flows.Record{Time: now})
	}
	if f.len() > 8 || len(f.order)-f.head > 8 || cap(f.order) > 1024 {
		t.Errorf("open %d, queue %d (cap %d)", f.len(), len(f.order)-f.head, cap(f.order))
	}
}
