package ipamtest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
)

// pausingStore runs a function once, at the first Write that matches,
// before or after passing it on: an operation is stopped between its
// reads and a write, and another runs in that gap, in one goroutine, so
// the interleaving is the same on every run and every store.
type pausingStore struct {
	ipam.Store
	mu    sync.Mutex
	match func(w ipam.Write) bool
	after bool // run after the write applied, not before
	run   func()
}

// pauseAt arms s: run is called at the next Write that match accepts.
func (s *pausingStore) pauseAt(match func(ipam.Write) bool, after bool, run func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.match, s.after, s.run = match, after, run
}

// take disarms s and returns what to run at w, if anything.
func (s *pausingStore) take(w ipam.Write) (run func(), after bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.match == nil || !s.match(w) {
		return nil, false
	}
	run, after = s.run, s.after
	s.match, s.run = nil, nil
	return run, after
}

func (s *pausingStore) Write(ctx context.Context, w ipam.Write) (int64, error) {
	run, after := s.take(w)
	if run != nil && !after {
		run()
	}
	rev, err := s.Store.Write(ctx, w)
	if run != nil && after {
		run()
	}
	return rev, err
}

// testReclaimRace: a reclaim of an empty block and an allocation into
// it, interleaved at each write of the reclaim and of the allocation.
// Whatever the order, the allocation's address stays findable from its
// node (in a block the node's index names as a confirmed claim, so it is
// routed) and Check is clean: either the reclaim backs off, or the
// allocation goes to another block.
func testReclaimRace(e env) {
	for _, tt := range []reclaimRaceCase{
		{name: "AllocationBeforeReclaimsFirstWrite", pauseAt: 1, keep: true},
		{name: "AllocationAfterReclaimsFirstWrite", pauseAt: 1, after: true},
		{name: "AllocationAfterReclaimsSecondWrite", pauseAt: 2, after: true},
		{name: "ReclaimBetweenAllocationsReadAndWrite", reclaimFirst: true},
	} {
		// One store and prefix for all (a Kubernetes store serves one):
		// a node for each case.
		e.t.Run(tt.name, func(t *testing.T) { tt.run(t, e, strings.ToLower(tt.name)) })
	}
}

// reclaimRaceCase is one interleaving of testReclaimRace.
type reclaimRaceCase struct {
	name string
	// reclaimFirst: the allocation is paused at its first write and the
	// whole reclaim runs there; otherwise the reclaim is paused at its
	// write number pauseAt (before it, or after it applied) and the
	// allocation runs there.
	reclaimFirst bool
	pauseAt      int
	after        bool
	// keep: the reclaim must back off, and the allocation be in the
	// block; else the block goes, and the allocation elsewhere.
	keep bool
}

func (tt reclaimRaceCase) run(t *testing.T, e env, node string) {
	ps := &pausingStore{Store: e.store}
	clk := newClock()
	a := ipam.New(ps, ipam.Config{Keys: e.keys, Now: clk.now})
	x := env{t: t, store: ps, keys: e.keys}
	mustPool(t, a, "p", "10.40.0.0/16", 0)
	first, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "first", Node: node, Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseByHandle(ctxT(t), node, "first"); err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * time.Hour)
	block := first.IPv4[0].Masked()

	var got ipam.Assignment
	var allocErr error
	alloc := func() {
		got, allocErr = a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "late", Node: node, Num4: 1})
	}
	var released int
	var reclaimErr error
	reclaim := func() {
		released, reclaimErr = reclaimIdle(a, node, 0, time.Hour)
	}
	if tt.reclaimFirst {
		ps.pauseAt(func(ipam.Write) bool { return true }, false, reclaim)
		alloc()
	} else {
		n := 0
		ps.pauseAt(func(ipam.Write) bool { n++; return n == tt.pauseAt }, tt.after, alloc)
		reclaim()
	}
	if allocErr != nil || reclaimErr != nil {
		t.Fatalf("allocation: %+v, %v; reclaim: %d, %v", got, allocErr, released, reclaimErr)
	}
	tt.check(t, x, a, node, got, block, released)
}

// check: the allocation survived the reclaim, in the block or not as
// the case says, its node's index confirms its block, and nothing was
// left half done.
func (tt reclaimRaceCase) check(t *testing.T, x env, a *ipam.Allocator, node string, got ipam.Assignment, block netip.Prefix, released int) {
	t.Helper()
	held, err := a.IPsByHandle(ctxT(t), node, "late")
	if err != nil || !slices.Equal(held, got.IPv4) || len(held) != 1 {
		t.Fatalf("the allocation got %v, but its node finds %v (%v): lost to the reclaim of %s (released %d)", got.IPv4, held, err, block, released)
	}
	// (A block let go may be claimed again at once: the node's
	// candidates come in a fixed order.)
	if in := held[0].Masked() == block; tt.keep && (!in || released != 0) || !tt.keep && released != 1 {
		t.Errorf("released %d blocks, allocation in the emptied block %s: %v; want the block kept: %v", released, block, in, tt.keep)
	}
	ix := x.index(node)
	if ix == nil || !slices.ContainsFunc(ix.Blocks, func(b ipam.NodeBlock) bool {
		return b.CIDR == held[0].Masked() && b.State == ipam.AffinityConfirmed
	}) {
		t.Fatalf("%s holds the allocation, but %s's index is %+v: not a confirmed claim", held[0].Masked(), node, ix)
	}
	mustClean(t, a)
	// Nothing was left half done: a later pass finds nothing more to let
	// go than the block the allocation did not use.
	more, err := reclaimIdle(a, node, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if released+more > 1 {
		t.Fatalf("released %d blocks and %d more, with one empty block to let go at most", released, more)
	}
	mustClean(t, a)
	if err := a.ReleaseByHandle(ctxT(t), node, "late"); err != nil {
		t.Fatal(err)
	}
}

// reclaimIdle lets go of node's blocks empty for at least grace, but
// spare per pool.
func reclaimIdle(a *ipam.Allocator, node string, spare int, grace time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return a.ReclaimIdleBlocks(ctx, node, spare, grace)
}

// testReclaimScaleDown: a node scaled to 500 pods and back to 5 keeps,
// once its emptied blocks have been empty for the grace, the blocks of
// its 5 pods and one spare; another node's blocks are not touched.
func testReclaimScaleDown(e env) {
	t := e.t
	clk := newClock()
	a := e.alloc(ipam.Config{Now: clk.now})
	mustPool(t, a, "p", "10.41.0.0/16", 0) // 64 addresses a block: 500 pods fill 8
	kept := scaleUpAndDown(e, a)
	clk.advance(time.Minute)
	if n, err := reclaimIdle(a, "n1", 1, 10*time.Minute); err != nil || n != 0 {
		t.Fatalf("reclaim within the grace: %d, %v; want none", n, err)
	}
	clk.advance(10 * time.Minute)
	n, err := reclaimIdle(a, "n1", 1, 10*time.Minute)
	if err != nil || n != 2 {
		t.Fatalf("reclaim after the grace: %d, %v; want the 2 empty blocks beyond the spare", n, err)
	}
	checkScaledDown(e, a, kept)
	mustClean(t, a)
	// Nothing more goes on later passes, nor from n2 within its grace.
	if n, err := reclaimIdle(a, "n1", 1, 10*time.Minute); err != nil || n != 0 {
		t.Fatalf("second reclaim: %d, %v; want none", n, err)
	}
	if n, err := reclaimIdle(a, "n2", 0, time.Hour); err != nil || n != 0 {
		t.Fatalf("reclaim of n2 within its grace: %d, %v; want none", n, err)
	}
	// The spare serves the next pods before any new block is claimed.
	for i := range 60 {
		if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: fmt.Sprint("net.d", i), Node: "n1", Num4: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if x := e.index("n1"); len(x.Blocks) != 6 {
		t.Errorf("n1 claimed %d blocks for 60 pods with 5 partly used blocks and a spare, want none", len(x.Blocks)-6)
	}
	mustClean(t, a)
}

// scaleUpAndDown gives n1 500 pods (8 blocks) and n2 one, then lets all
// go but 5 of n1's, in 5 of its blocks; it returns their handles.
func scaleUpAndDown(e env, a *ipam.Allocator) map[string]bool {
	t := e.t
	t.Helper()
	const pods = 500
	kept := map[string]bool{}
	for i := range pods {
		h := fmt.Sprint("net.c", i)
		if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: h, Node: "n1", Num4: 1}); err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
		if i%100 == 0 {
			kept[h] = true // 5 pods, in 5 of the 8 blocks
		}
	}
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "other", Node: "n2", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseByHandle(ctxT(t), "n2", "other"); err != nil {
		t.Fatal(err)
	}
	if x := e.index("n1"); x == nil || len(x.Blocks) != 8 {
		t.Fatalf("n1's index after %d pods: %+v, want 8 blocks", pods, x)
	}
	for i := range pods {
		if h := fmt.Sprint("net.c", i); !kept[h] {
			if err := a.ReleaseByHandle(ctxT(t), "n1", h); err != nil {
				t.Fatal(err)
			}
		}
	}
	return kept
}

// checkScaledDown: after the reclaim, the kept pods hold their
// addresses, and n1 has their 5 blocks and 1 spare, all confirmed.
func checkScaledDown(e env, a *ipam.Allocator, kept map[string]bool) {
	t := e.t
	t.Helper()
	used := map[netip.Prefix]bool{}
	for h := range kept {
		held, err := a.IPsByHandle(ctxT(t), "n1", h)
		if err != nil || len(held) != 1 {
			t.Fatalf("%s holds %v, %v after the reclaim", h, held, err)
		}
		used[held[0].Masked()] = true
	}
	x := e.index("n1")
	spares := 0
	for _, b := range x.Blocks {
		if b.State != ipam.AffinityConfirmed {
			t.Errorf("n1's claim %+v left in flight", b)
		}
		if !used[b.CIDR] {
			spares++
		}
	}
	if len(used) != 5 || spares != 1 || len(x.Blocks) != 6 || len(x.Borrowed) != 0 {
		t.Fatalf("n1's index after the reclaim: %+v; want the 5 blocks in use and 1 spare", x)
	}
	if n := e.count(e.keys.Blocks()); n != 7 {
		t.Errorf("%d blocks left, want n1's 6 and n2's", n)
	}
}
