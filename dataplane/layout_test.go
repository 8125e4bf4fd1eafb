package dataplane

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/google/nftables"

	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/netns"
)

// futureTable makes t as a newer podnet would: its marker one version
// ahead of known, the marker of known (if any) gone, and a set "future"
// with an element, which must survive every older writer.
func futureTable(t *testing.T, c *nftables.Conn, tab *nftables.Table, known uint32) {
	t.Helper()
	found, err := nftlayout.Check(c, tab, known+1)
	if err != nil {
		t.Fatal(err)
	}
	c.AddTable(tab)
	if err := nftlayout.Declare(c, tab, known+1, found); err != nil {
		t.Fatal(err)
	}
	future := &nftables.Set{Table: tab, ID: 99, Name: "future", KeyType: nftables.TypeIPAddr}
	if err := c.AddSet(future, []nftables.SetElement{{Key: []byte{192, 0, 2, 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("future table %s: %v", tab.Name, err)
	}
}

// untouched fails t unless tab still has the newer marker and the
// future set with its element.
func untouched(t *testing.T, c *nftables.Conn, tab *nftables.Table, known uint32) {
	t.Helper()
	if _, err := c.GetSetByName(tab, nftlayout.MarkerName(known+1)); err != nil {
		t.Errorf("table %s lost its marker: %v", tab.Name, err)
	}
	s, err := c.GetSetByName(tab, "future")
	if err != nil {
		t.Fatalf("table %s lost the future set: %v", tab.Name, err)
	}
	if el, err := c.GetSetElements(s); err != nil || len(el) != 1 {
		t.Errorf("future set of %s: %v, %v", tab.Name, el, err)
	}
	if _, err := c.GetSetByName(tab, nftlayout.MarkerName(known)); err == nil {
		t.Errorf("table %s got this version's marker", tab.Name)
	}
}

// TestOlderWriterLeavesNewerTables: on tables a newer podnet wrote, the
// masquerade, the source guards (both families) and the closed pods
// refuse with the table and both versions named, and change nothing;
// on tables of this version they work as before, marked.
func TestOlderWriterLeavesNewerTables(t *testing.T) {
	host := newNS(t)
	owner := tag.Owner{Network: "n1", ContainerID: "c1", IfName: "eth0"}
	pod := []netip.Addr{netip.MustParseAddr("10.1.0.5")}
	err := netns.Do(host, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		masq := newMasqObjects("n1").table
		guard4, guardBr := newGuardObjects(false).table, newGuardObjects(true).table
		closed := newClosedObjects().table
		futureTable(t, c, masq, MasqLayout)
		futureTable(t, c, guard4, GuardLayout)
		futureTable(t, c, guardBr, GuardLayout)
		futureTable(t, c, closed, ClosedLayout)

		m := MasqOn(c, nil)
		if err := m.AddPod(MasqNetwork{Network: "n1"}, owner, pod); !nftlayout.IsNewer(err) {
			t.Errorf("masquerade: %v, want a NewerError", err)
		}
		gs := GuardsOn(c)
		for _, bridged := range []bool{false, true} {
			g := Guard{Owner: owner, HostIf: "pn1", PodMAC: mustMAC("02:00:00:00:00:01"), Addrs: pod, Bridged: bridged}
			if err := gs.Install(g); !nftlayout.IsNewer(err) {
				t.Errorf("guard (bridged %v): %v, want a NewerError", bridged, err)
			}
		}
		cl, err := NewClosed(filepath.Join(t.TempDir(), "closed.lock"), 0)
		if err != nil {
			return err
		}
		defer cl.Close()
		if err := cl.Add(context.Background(), ClosedPod{Pod: "x/a", Owner: owner, Addrs: pod}); !nftlayout.IsNewer(err) {
			t.Errorf("closed: %v, want a NewerError", err)
		}
		if err := cl.RemoveTable(); !nftlayout.IsNewer(err) {
			t.Errorf("closed, remove: %v, want a NewerError", err)
		}
		untouched(t, c, masq, MasqLayout)
		untouched(t, c, guard4, GuardLayout)
		untouched(t, c, guardBr, GuardLayout)
		untouched(t, c, closed, ClosedLayout)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMasqRulesOfNewerTable: a network's objects made by this version,
// then the table taken over by a newer podnet: an ADD still adds its
// element (the fast path reads no marker), but rules that are not
// current (here: other exclusions) are not replaced over the newer
// layout.
func TestMasqRulesOfNewerTable(t *testing.T) {
	host := newNS(t)
	owner := tag.Owner{Network: "n1", ContainerID: "c1", IfName: "eth0"}
	n := MasqNetwork{Network: "n1", Exclude: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	err := netns.Do(host, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		m := MasqOn(c, nil)
		if err := m.AddPod(n, owner, []netip.Addr{netip.MustParseAddr("10.1.0.5")}); err != nil {
			t.Fatal(err)
		}
		futureTable(t, c, newMasqObjects("n1").table, MasqLayout)
		other := n
		other.Exclude = []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}
		owner.ContainerID = "c2"
		if err := m.AddPod(other, owner, []netip.Addr{netip.MustParseAddr("10.1.0.6")}); !nftlayout.IsNewer(err) {
			t.Errorf("rules over a newer table: %v, want a NewerError", err)
		}
		if ok, err := m.RulesCurrent(n); !ok || err != nil {
			t.Errorf("the rules were replaced: %v %v", ok, err)
		}
		untouched(t, c, newMasqObjects("n1").table, MasqLayout)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWriterMarksTables: tables this version makes carry its marker, and
// an unmarked table (a podnet before markers) is adopted and marked when
// objects are declared in it.
func TestWriterMarksTables(t *testing.T) {
	host := newNS(t)
	owner := tag.Owner{Network: "n1", ContainerID: "c1", IfName: "eth0"}
	pod := []netip.Addr{netip.MustParseAddr("10.1.0.5")}
	err := netns.Do(host, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		masq := newMasqObjects("n1").table
		c.AddTable(masq) // unmarked, as before markers
		if err := c.Flush(); err != nil {
			return err
		}
		if err := MasqOn(c, nil).AddPod(MasqNetwork{Network: "n1"}, owner, pod); err != nil {
			t.Fatalf("masquerade: %v", err)
		}
		g := Guard{Owner: owner, HostIf: "pn1", PodMAC: mustMAC("02:00:00:00:00:01"), Addrs: pod}
		if err := GuardsOn(c).Install(g); err != nil {
			t.Fatalf("guard: %v", err)
		}
		for tab, v := range map[*nftables.Table]uint32{masq: MasqLayout, newGuardObjects(false).table: GuardLayout} {
			if found, err := nftlayout.Check(c, tab, v); err != nil || found != v {
				t.Errorf("table %s: layout v%d, %v; want v%d", tab.Name, found, err, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
