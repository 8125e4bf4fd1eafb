package clusterstate

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/podnet/podnet/ipam"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func rec(name, a string) NodeRecord {
	ip := netip.MustParseAddr(a)
	return NodeRecord{Name: name, Address: ip, VTEPIP: ip, VTEPMAC: VTEPMAC(name).String()}
}

func TestVTEPMAC(t *testing.T) {
	a, b := VTEPMAC("node-1"), VTEPMAC("node-2")
	if a.String() == b.String() || a.String() != VTEPMAC("node-1").String() {
		t.Fatalf("MACs not deterministic and distinct: %s %s", a, b)
	}
	if a[0]&1 != 0 || a[0]&2 == 0 {
		t.Fatalf("%s: want unicast, locally administered", a)
	}
}

// idx is node's index with one claim of 10.103.0.64/26 in state.
func idx(node string, state ipam.AffinityState) ipam.NodeIndex {
	return ipam.NodeIndex{Node: node, Blocks: []ipam.NodeBlock{{CIDR: pfx("10.103.0.64/26"), State: state}}}
}

func TestStateApply(t *testing.T) {
	keys := ipam.Keys{}
	s := NewState(ipam.DefaultPrefix)
	mustJSON := func(v any) []byte { b, _ := json.Marshal(v); return b }
	steps := []struct {
		key     string
		value   []byte
		deleted bool
		changed bool
	}{
		{NodeKey(ipam.DefaultPrefix, "b"), mustJSON(rec("b", "198.18.0.12")), false, true},
		{NodeKey(ipam.DefaultPrefix, "b"), mustJSON(rec("b", "198.18.0.12")), false, false},
		{keys.Node("b"), mustJSON(idx("b", ipam.AffinityPending)), false, false},
		{keys.Node("b"), mustJSON(idx("b", ipam.AffinityConfirmed)), false, true},
		{keys.Node("b"), mustJSON(idx("b", ipam.AffinityPendingDeletion)), false, true},
		{keys.Node("b"), nil, true, false},
		{keys.Block(pfx("10.103.0.64/26")), []byte("{}"), false, false},
	}
	for i, st := range steps {
		changed, err := s.Apply(st.key, st.value, st.deleted)
		if err != nil || changed != st.changed {
			t.Fatalf("step %d (%s): changed %v, err %v; want changed %v", i, st.key, changed, err, st.changed)
		}
	}
	// c borrows 10.103.0.1 from a's block, and publishes it.
	a := idx("a", ipam.AffinityConfirmed)
	a.Blocks[0].CIDR = pfx("10.103.0.0/26")
	if changed, err := s.Apply(keys.Node("a"), mustJSON(a), false); err != nil || !changed {
		t.Fatalf("a's index: changed %v, err %v", changed, err)
	}
	c := ipam.NodeIndex{Node: "c", Borrowed: []ipam.BorrowedBlock{{CIDR: pfx("10.103.0.0/26")}}}
	if changed, _ := s.Apply(keys.Node("c"), mustJSON(c), false); changed {
		t.Fatal("a borrow's intent changed routes")
	}
	c.Borrowed[0].IPs = []netip.Addr{netip.MustParseAddr("10.103.0.1")}
	if changed, _ := s.Apply(keys.Node("c"), mustJSON(c), false); !changed {
		t.Fatal("a published address did not change routes")
	}
	snap := s.Snapshot()
	if len(snap.Borrowed) != 1 || snap.Borrowed[netip.MustParseAddr("10.103.0.1")] != "c" || snap.Blocks[pfx("10.103.0.0/26")] != "a" {
		t.Fatalf("snapshot %+v, want a's block and 10.103.0.1 held by c", snap)
	}
	if changed, _ := s.Apply(keys.Node("c"), nil, true); !changed || len(s.Snapshot().Borrowed) != 0 {
		t.Fatal("deleting c's index did not drop its borrowed address")
	}
	if _, err := s.Apply(NodeKey(ipam.DefaultPrefix, "bad"), []byte("{"), false); err == nil {
		t.Fatal("undecodable node record: no error")
	}
}
