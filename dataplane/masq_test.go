package dataplane

import (
	"net/netip"
	"testing"

	"github.com/podnet/podnet/dataplane/tag"
)

// TestMasqQueueRemoveOwned: DEL's removal of a pod's masquerade entries
// takes the owner's elements among the candidate addresses (got by key)
// and nothing else: not an address from a stale prevResult that another
// pod now has, nor one that is not there; without candidates it finds
// the owner's by listing; a network without sets has nothing to remove.
func TestMasqQueueRemoveOwned(t *testing.T) {
	host := newNS(t)
	m := masqIn(t, host)
	n := MasqNetwork{Network: "n1", Exclude: []netip.Prefix{netip.MustParsePrefix("10.100.0.0/16")}}
	a := tag.Owner{Network: "n1", ContainerID: "ca", IfName: "eth0"}
	b := tag.Owner{Network: "n1", ContainerID: "cb", IfName: "eth0"}
	addr := netip.MustParseAddr
	if err := m.AddPod(n, a, []netip.Addr{addr("10.100.0.1"), addr("fd00:100::1")}); err != nil {
		t.Fatal(err)
	}
	if err := m.AddPod(n, b, []netip.Addr{addr("10.100.0.2")}); err != nil {
		t.Fatal(err)
	}
	if m.elems == nil {
		t.Fatal("NewMasq gives no way to get elements by key")
	}
	candidates := []netip.Addr{addr("::ffff:10.100.0.1"), addr("10.100.0.2"), addr("fd00:100::1"), addr("10.100.0.9"), addr("10.100.0.1")}
	if err := m.QueueRemoveOwned("n1", a, candidates); err != nil {
		t.Fatal(err)
	}
	if err := m.conn.Flush(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	members, err := m.Members("n1")
	if err != nil || len(members) != 1 || members[addr("10.100.0.2")] != b {
		t.Fatalf("after A's removal: %v, %v; want only B's", members, err)
	}

	if err := m.QueueRemoveOwned("n1", b, nil); err != nil { // no prevResult: by listing
		t.Fatal(err)
	}
	if err := m.conn.Flush(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if members, err := m.Members("n1"); err != nil || len(members) != 0 {
		t.Fatalf("after B's removal: %v, %v", members, err)
	}
	if err := m.QueueRemoveOwned("never-added", a, []netip.Addr{addr("10.100.0.1")}); err != nil {
		t.Fatalf("a network without sets: %v", err)
	}
	if err := m.conn.Flush(); err != nil {
		t.Fatalf("commit of nothing: %v", err)
	}
}
