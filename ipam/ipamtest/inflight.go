package ipamtest

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/podnet/podnet/ipam"
)

// The states a killed operation leaves between its single-key writes:
// each is valid (its addresses are findable from their node, I1), Check
// reports it once it is older than ClaimTimeout (or, for an unpublished
// borrowed address, at once), and the node's next allocation or its GC
// finishes it.

func pending(cidr netip.Prefix, since time.Time) func(x *ipam.NodeIndex) {
	return func(x *ipam.NodeIndex) {
		x.Blocks = append(x.Blocks, ipam.NodeBlock{CIDR: cidr, State: ipam.AffinityPending, Since: since})
		slices.SortFunc(x.Blocks, func(a, b ipam.NodeBlock) int { return a.CIDR.Addr().Compare(b.CIDR.Addr()) })
	}
}

// testClaimKilled: a claimer killed after its intent (a pending index
// entry, no block) or after the block's create (entry still pending)
// leaves a state Check reports once it is old; the node's next
// allocation finishes the claim (or withdraws it when the block went to
// another node meanwhile), and Check is clean again.
func testClaimKilled(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.16.0.0/16", 0)
	old := time.Now().Add(-time.Hour)
	// n1 died after the intent of its first claim.
	b7 := netip.MustParsePrefix("10.16.7.0/26")
	e.editIndex("n1", pending(b7, old))
	rep, err := a.Check(ctxT(t), ipam.CheckOptions{})
	if err != nil || len(rep.AffinityMismatches) != 1 {
		t.Fatalf("Check after a killed claim: %+v, %v", rep, err)
	}
	got, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h1", Node: "n1", Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.IPv4[0].Masked() != b7 {
		t.Fatalf("allocation after the repair came from %s, want the claimed block %s", got.IPv4[0], b7)
	}
	mustClean(t, a)

	// n1 died again, this time after creating the block with the
	// allocation in it: the address is found from the node meanwhile,
	// and the claim is finished even though the next allocation needs no
	// block.
	b9 := netip.MustParsePrefix("10.16.9.0/26")
	e.editIndex("n1", pending(b9, old))
	blk := ipam.NewBlock(b9, ipam.HostAffinity("n1"))
	blk.AffinitySince = old
	if err := blk.AllocateAddr(netip.MustParseAddr("10.16.9.0"), ipam.Attributes{Handle: "hk", Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	e.putBlock(blk)
	if held, err := a.IPsByHandle(ctxT(t), "n1", "hk"); err != nil || len(held) != 1 {
		t.Fatalf("address of a claim killed before its confirmation: %v, %v", held, err)
	}
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h2", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	if x := e.index("n1"); x == nil || len(x.Blocks) != 2 || x.Blocks[1].State != ipam.AffinityConfirmed {
		t.Fatalf("n1's index after the repair: %+v", x)
	}
	mustClean(t, a)

	// n2 died after the intent for a block that n3 then took: n2's next
	// allocation withdraws the claim and takes another block.
	b20 := netip.MustParsePrefix("10.16.20.0/26")
	e.editIndex("n2", pending(b20, old))
	if _, err := a.AssignIP(ctxT(t), ipam.AssignIPArgs{Addr: netip.MustParseAddr("10.16.20.5"), Handle: "h3", Node: "n3"}); err != nil {
		t.Fatal(err)
	}
	got, err = a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h4", Node: "n2", Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.IPv4[0].Masked() == b20 {
		t.Fatalf("n2 allocated %s from n3's block", got.IPv4[0])
	}
	if x := e.index("n2"); x == nil || x.Blocks[0].CIDR == b20 || len(x.Blocks) != 1 {
		t.Fatalf("n2's dead claim on n3's block: %+v", x)
	}
	mustClean(t, a)
}

// testClaimBudget: racers on one node with MaxBlocksPerHost 1 claim
// exactly one block between them: the budget (I4) is enforced in the
// index's compare-and-swap.
func testClaimBudget(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.18.0.0/16", 0)
	const n = 20
	got := make([]netip.Prefix, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			b := e.alloc(ipam.Config{MaxBlocksPerHost: 1, StrictAffinity: true})
			as, err := b.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: fmt.Sprint("h", i), Node: "n1", Num4: 1})
			errs[i] = err
			if err == nil {
				got[i] = as.IPv4[0]
			}
		})
	}
	wg.Wait()
	seen := map[netip.Prefix]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if seen[got[i]] {
			t.Fatalf("address %s given twice", got[i])
		}
		seen[got[i]] = true
	}
	if c := e.count(e.keys.Blocks()); c != 1 {
		t.Fatalf("%d blocks, want exactly 1", c)
	}
	if x := e.index("n1"); x == nil || len(x.Blocks) != 1 || x.Blocks[0].State != ipam.AffinityConfirmed {
		t.Fatalf("index %+v, want one confirmed claim", x)
	}
	mustClean(t, a)
}

// testInFlight plants each crash point of a claim, a borrow and a
// block's release: young, they are not findings; once older than
// ClaimTimeout (or at once, for an unpublished borrowed address) Check
// reports each, and GC of the node finishes it.
func testInFlight(e env) {
	t := e.t
	clk := newClock()
	a := e.alloc(ipam.Config{Now: clk.now})
	mustPool(t, a, "p", "10.17.0.0/16", 0)
	assign := func(h, node string) netip.Prefix {
		t.Helper()
		got, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: h, Node: node, Num4: 1})
		if err != nil {
			t.Fatal(err)
		}
		return got.IPv4[0]
	}
	assign("h1", "n1")
	theirs := assign("o1", "n2").Masked()
	empty := assign("gone", "n3").Masked()
	if err := a.ReleaseByHandle(ctxT(t), "n3", "gone"); err != nil {
		t.Fatal(err)
	}
	// A claim killed after its intent, and one after its block's create.
	bA, bB := netip.MustParsePrefix("10.17.100.0/26"), netip.MustParsePrefix("10.17.101.0/26")
	e.editIndex("n1", pending(bA, clk.now()))
	e.editIndex("n1", pending(bB, clk.now()))
	blk := ipam.NewBlock(bB, ipam.HostAffinity("n1"))
	blk.AffinitySince = clk.now()
	must(t, blk.AllocateAddr(netip.MustParseAddr("10.17.101.1"), ipam.Attributes{Handle: "h2", Node: "n1"}))
	e.putBlock(blk)
	mustClean(t, a)
	// A borrow killed before its publication.
	e.editIndex("n1", func(x *ipam.NodeIndex) { x.Borrowed = append(x.Borrowed, ipam.BorrowedBlock{CIDR: theirs}) })
	e.editBlock(theirs, func(b *ipam.Block) {
		must(t, b.AllocateAddr(theirs.Addr().Next().Next(), ipam.Attributes{Handle: "h3", Node: "n1"}))
	})
	if rep, _ := a.Check(ctxT(t), ipam.CheckOptions{}); len(rep.Unpublished) != 1 || rep.Unpublished[0].Handle != "h3" {
		t.Fatalf("Check with an unpublished borrowed address: %+v", rep)
	}
	// A block's release killed after its first step.
	e.editIndex("n3", func(x *ipam.NodeIndex) {
		x.Blocks[0].State, x.Blocks[0].Since = ipam.AffinityPendingDeletion, clk.now()
	})
	clk.advance(2 * time.Minute)
	rep, err := a.Check(ctxT(t), ipam.CheckOptions{})
	if err != nil || len(rep.AffinityMismatches) != 3 || len(rep.Unpublished) != 1 {
		t.Fatalf("Check with old in-flight states: %+v, %v; want 3 mismatches and 1 unpublished", rep, err)
	}
	for node, valid := range map[string][]string{"n1": {"h1", "h2", "h3"}, "n3": nil} {
		if rel, err := a.GC(ctxT(t), node, valid); err != nil || len(rel) != 0 {
			t.Fatalf("GC of %s: %v, %v", node, rel, err)
		}
	}
	mustClean(t, a)
	x := e.index("n1")
	if x == nil || len(x.Blocks) != 3 || x.Blocks[1].State != ipam.AffinityConfirmed || x.Blocks[2].State != ipam.AffinityConfirmed ||
		len(x.Borrowed) != 1 || len(x.Borrowed[0].IPs) != 1 {
		t.Fatalf("n1's index after GC: %+v", x)
	}
	if x := e.index("n3"); x == nil || len(x.Blocks) != 0 {
		t.Fatalf("n3's index after GC: %+v", x)
	}
	if _, err := e.store.Get(ctxT(t), e.keys.Block(empty)); err == nil {
		t.Fatalf("n3's released block %s is still there", empty)
	}
}

func must(t interface{ Fatal(...any) }, err error) {
	if err != nil {
		t.Fatal(err)
	}
}
