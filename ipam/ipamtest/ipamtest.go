// Package ipamtest is the allocator suite, run against every ipam.Store
// implementation. Each subtest uses its own key prefix, so one store (one
// etcd cluster) may serve them all.
package ipamtest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
)

// Options size the concurrency test.
type Options struct {
	Nodes, PerNode int // default 10 x 10
	// NoV1 says the store cannot hold layout v1's keys nor the layout
	// marker (the Kubernetes store, whose layout is its CRDs' API
	// version): MigrateV1 and NewerLayout do not apply.
	NoV1 bool
	// RefusesInvalidPools says the store validates pools as the
	// allocator does (the Kubernetes store, by the IPPool CRD's schema):
	// the invalid-pool tests check that it refuses theirs.
	RefusesInvalidPools bool
	// DecodesPools says the store decodes pool values into a typed form
	// of its own (the Kubernetes store, against an API server without
	// the CRD's schema): it refuses a value that does not decode.
	DecodesPools bool
}

type env struct {
	t     *testing.T
	store ipam.Store
	keys  ipam.Keys
}

func (e env) alloc(cfg ipam.Config) *ipam.Allocator {
	cfg.Keys = e.keys
	return ipam.New(e.store, cfg)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustPool(t *testing.T, a *ipam.Allocator, name, cidr string, blockSize int) {
	t.Helper()
	if err := a.PutPool(ctxT(t), ipam.Pool{Name: name, CIDR: netip.MustParsePrefix(cidr), BlockSize: blockSize}); err != nil {
		t.Fatalf("PutPool(%s %s): %v", name, cidr, err)
	}
}

func mustClean(t *testing.T, a *ipam.Allocator) {
	t.Helper()
	rep, err := a.Check(ctxT(t), ipam.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("Check: %+v", rep)
	}
}

// Run runs the allocator suite.
func Run(t *testing.T, newStore func(t *testing.T) ipam.Store, opts Options) {
	if opts.Nodes == 0 {
		opts.Nodes, opts.PerNode = 10, 10
	}
	tests := []struct {
		name string
		fn   func(e env)
	}{
		{"AssignReleaseDualStack", testAssignRelease},
		{"Idempotent", testIdempotent},
		{"SameHandleConcurrent", testSameHandleConcurrent},
		{"FIFOReuse", testFIFO},
		{"BorrowAndStrictAffinity", testBorrow},
		{"MaxBlocksPerHost", testMaxBlocks},
		{"AssignIP", testAssignIP},
		{"ReleaseIPs", testReleaseIPs},
		{"Ranges", testRanges},
		{"PoolValidation", testPoolValidation},
		{"InvalidPoolSkipped", func(e env) { testInvalidPoolSkipped(e, opts) }},
		{"InvalidPoolReported", func(e env) { testInvalidPoolReported(e, opts) }},
		{"DeadlineIsTryAgain", testDeadline},
		{"CheckAndGC", testCheckGC},
		{"RemoveNodeAndReclaim", testRemoveNode},
		{"ReclaimRace", testReclaimRace},
		{"ReclaimScaleDown", testReclaimScaleDown},
		{"FreshDecisions", testFreshDecisions},
		{"OneWritePerAllocation", testWritesPerAlloc},
		{"Endpoints", testEndpoints},
		{"ClaimKilledBeforeConfirm", testClaimKilled},
		{"ClaimBudgetExact", testClaimBudget},
		{"ReleaseInFlightStates", testInFlight},
		{"MigrateV1", testMigrateV1},
		{"NewerLayout", testNewerLayout},
		{"ManyNodesConcurrent", func(e env) { testConcurrentNodes(e, opts.Nodes, opts.PerNode) }},
	}
	for _, tt := range tests {
		if opts.NoV1 && (tt.name == "MigrateV1" || tt.name == "NewerLayout") {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(env{t: t, store: newStore(t), keys: ipam.Keys{Prefix: "/ipamtest/" + t.Name() + "/"}})
		})
	}
}

func testAssignRelease(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "v4", "10.244.0.0/16", 0)
	mustPool(t, a, "v6", "fd00:10::/48", 0)
	got, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c1", Node: "n1", Num4: 1, Num6: 1, Attrs: map[string]string{"pod": "p1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.IPv4) != 1 || len(got.IPv6) != 1 || got.IPv4[0].Bits() != 26 || got.IPv6[0].Bits() != 122 ||
		!netip.MustParsePrefix("10.244.0.0/16").Contains(got.IPv4[0].Addr()) {
		t.Fatalf("AutoAssign = %+v", got)
	}
	held, err := a.IPsByHandle(ctxT(t), "n1", "net.c1")
	if err != nil || len(held) != 2 || held[0] != got.IPv4[0] && held[1] != got.IPv4[0] {
		t.Fatalf("IPsByHandle = %v, %v; want %+v", held, err, got)
	}
	mustClean(t, a)
	if err := a.ReleaseByHandle(ctxT(t), "n1", "net.c1"); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseByHandle(ctxT(t), "n1", "net.c1"); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if held, _ := a.IPsByHandle(ctxT(t), "n1", "net.c1"); len(held) != 0 {
		t.Fatalf("after release: %v", held)
	}
	mustClean(t, a)
	// The emptied block stays with its node: the next address comes from it.
	again, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c2", Node: "n1", Num4: 1})
	if err != nil || again.IPv4[0].Masked() != got.IPv4[0].Masked() {
		t.Fatalf("after release got %+v, %v; want block %s", again, err, got.IPv4[0].Masked())
	}
}

func testIdempotent(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.1.0.0/16", 0)
	args := ipam.AutoAssignArgs{Handle: "h", Node: "n1", Num4: 2}
	first, err := a.AutoAssign(ctxT(t), args)
	if err != nil {
		t.Fatal(err)
	}
	second, err := a.AutoAssign(ctxT(t), args)
	if err != nil || !slices.Equal(first.IPv4, second.IPv4) {
		t.Fatalf("repeat = %+v, %v; want %+v", second, err, first)
	}
	args.Num4 = 3 // top-up keeps the two and adds one
	third, err := a.AutoAssign(ctxT(t), args)
	if err != nil || len(third.IPv4) != 3 || !slices.Equal(third.IPv4[:2], first.IPv4) && !slices.Contains(third.IPv4, first.IPv4[0]) {
		t.Fatalf("top-up = %+v, %v", third, err)
	}
	mustClean(t, a)
}

func testFIFO(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.3.0.0/24", 29) // 8 addresses per block
	first, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h0", Node: "n1", Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseByHandle(ctxT(t), "n1", "h0"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 8; i++ {
		got, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: fmt.Sprintf("h%d", i), Node: "n1", Num4: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got.IPv4[0] == first.IPv4[0] {
			t.Fatalf("allocation %d reused the released %s while others were free", i, first.IPv4[0])
		}
	}
	last, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h8", Node: "n1", Num4: 1})
	if err != nil || last.IPv4[0] != first.IPv4[0] {
		t.Fatalf("8th allocation = %v, %v; want the released %s last", last, err, first.IPv4[0])
	}
}

func testBorrow(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.4.0.0/28", 29) // two blocks of 8
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "a", Node: "na", Num4: 8}); err != nil {
		t.Fatal(err)
	}
	b, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "b", Node: "nb", Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	strict := e.alloc(ipam.Config{StrictAffinity: true})
	_, err = strict.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "a2", Node: "na", Num4: 1})
	if ipam.KindOf(err) != ipam.KindExhausted {
		t.Fatalf("strict affinity with a full block: err = %v, want KindExhausted", err)
	}
	before := a.Writes()
	got, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "a2", Node: "na", Num4: 1})
	if err != nil || got.IPv4[0].Masked() != b.IPv4[0].Masked() {
		t.Fatalf("borrow = %+v, %v; want an address of nb's block %s", got, err, b.IPv4[0].Masked())
	}
	// Intent, block, publication.
	if n := a.Writes() - before; n != 3 {
		t.Errorf("first borrow from a block: %d writes, want 3", n)
	}
	x := e.index("na")
	if x == nil || len(x.Borrowed) != 1 || x.Borrowed[0].CIDR != got.IPv4[0].Masked() ||
		!slices.Equal(x.Borrowed[0].IPs, []netip.Addr{got.IPv4[0].Addr()}) {
		t.Fatalf("na's index after the borrow: %+v", x)
	}
	mustClean(t, a)
	if held, _ := a.IPsByHandle(ctxT(t), "na", "a2"); !slices.Equal(held, got.IPv4) {
		t.Fatalf("borrowed address not found from na: %v", held)
	}
	// The release withdraws the publication, then frees the address.
	before = a.Writes()
	if err := a.ReleaseByHandle(ctxT(t), "na", "a2"); err != nil {
		t.Fatal(err)
	}
	if n := a.Writes() - before; n != 2 {
		t.Errorf("release of a borrowed address: %d writes, want 2", n)
	}
	if x := e.index("na"); len(x.Borrowed) != 1 || len(x.Borrowed[0].IPs) != 0 {
		t.Fatalf("na's index after the release: %+v", x)
	}
	mustClean(t, a)
}

func testMaxBlocks(e env) {
	t := e.t
	a := e.alloc(ipam.Config{MaxBlocksPerHost: 1, StrictAffinity: true})
	mustPool(t, a, "p", "10.5.0.0/24", 29)
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "a", Node: "n1", Num4: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "b", Node: "n1", Num4: 1}); err == nil {
		t.Fatal("claimed a second block past maxBlocksPerHost 1")
	}
	if x := e.index("n1"); x == nil || len(x.Blocks) != 1 {
		t.Fatalf("index %+v, want one claim", x)
	}
}

func testAssignIP(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.6.0.0/16", 0)
	ip := netip.MustParseAddr("10.6.7.8")
	got, err := a.AssignIP(ctxT(t), ipam.AssignIPArgs{Addr: ip, Handle: "h1", Node: "n1"})
	if err != nil || got != netip.MustParsePrefix("10.6.7.8/26") {
		t.Fatalf("AssignIP = %v, %v", got, err)
	}
	if _, err := a.AssignIP(ctxT(t), ipam.AssignIPArgs{Addr: ip, Handle: "h1", Node: "n1"}); err != nil {
		t.Fatalf("same handle again: %v", err)
	}
	if _, err := a.AssignIP(ctxT(t), ipam.AssignIPArgs{Addr: ip, Handle: "h2", Node: "n1"}); ipam.KindOf(err) != ipam.KindInUse {
		t.Fatalf("taken address: err = %v, want KindInUse", err)
	}
	if _, err := a.AssignIP(ctxT(t), ipam.AssignIPArgs{Addr: netip.MustParseAddr("192.0.2.1"), Handle: "h3", Node: "n1"}); ipam.KindOf(err) != ipam.KindInvalid {
		t.Fatalf("address in no pool: err = %v, want KindInvalid", err)
	}
	// An auto allocation on the same node uses the block AssignIP claimed
	// and never hands out the assigned address.
	auto, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h4", Node: "n1", Num4: 63})
	if err != nil || slices.Contains(auto.IPv4, got) || auto.IPv4[0].Masked() != got.Masked() {
		t.Fatalf("AutoAssign after AssignIP = %v, %v", auto, err)
	}
	mustClean(t, a)
}

func testReleaseIPs(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.7.0.0/16", 0)
	got, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h", Node: "n1", Num4: 3})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := a.ReleaseIPs(ctxT(t), []netip.Addr{got.IPv4[0].Addr(), netip.MustParseAddr("10.7.200.1"), netip.MustParseAddr("192.0.2.1")})
	if err != nil || len(rel) != 1 || rel[0] != got.IPv4[0].Addr() {
		t.Fatalf("ReleaseIPs = %v, %v", rel, err)
	}
	held, _ := a.IPsByHandle(ctxT(t), "n1", "h")
	if !slices.Equal(held, got.IPv4[1:]) {
		t.Fatalf("handle holds %v, want %v", held, got.IPv4[1:])
	}
	mustClean(t, a)
}

func testRanges(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.8.0.0/16", 0)
	r := ipam.Range{Subnet: netip.MustParsePrefix("10.8.0.0/16"), Start: netip.MustParseAddr("10.8.3.250"), End: netip.MustParseAddr("10.8.4.1")}
	got, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h", Node: "n1", Num4: 8, Ranges: []ipam.Range{r}})
	if err != nil || len(got.IPv4) != 8 {
		t.Fatalf("AutoAssign in range = %v, %v", got, err)
	}
	for _, p := range got.IPv4 {
		if !r.Contains(p.Addr()) {
			t.Fatalf("%s is outside %+v", p, r)
		}
	}
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h2", Node: "n1", Num4: 1, Ranges: []ipam.Range{r}}); err == nil {
		t.Fatal("allocated a 9th address from an 8-address range")
	}
	mustClean(t, a)
}

func testPoolValidation(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.9.0.0/16", 0)
	for _, p := range []ipam.Pool{
		{Name: "q", CIDR: netip.MustParsePrefix("10.9.128.0/17")},
		{Name: "p", CIDR: netip.MustParsePrefix("10.9.0.0/16"), BlockSize: 28},
		{Name: "r", CIDR: netip.MustParsePrefix("10.10.0.0/16"), BlockSize: 33},
	} {
		if err := a.PutPool(ctxT(t), p); ipam.KindOf(err) != ipam.KindInvalid {
			t.Errorf("PutPool(%+v): err = %v, want KindInvalid", p, err)
		}
	}
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h", Node: "n1", Num4: 1, Pools4: []string{"nope"}}); ipam.KindOf(err) != ipam.KindInvalid {
		t.Errorf("unknown pool: err = %v, want KindInvalid", err)
	}
	if err := a.PutPool(ctxT(t), ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.9.0.0/16"), Disabled: true}); err != nil {
		t.Fatal(err)
	}
	// Allocation may read pools from a cache a moment old (the kube
	// store's watch cache); the disable is promised to hold for a read
	// that asks for the store's present state.
	if _, err := a.AutoAssign(ipam.FreshRead(ctxT(t)), ipam.AutoAssignArgs{Handle: "h", Node: "n1", Num4: 1}); err == nil {
		t.Error("allocated from a disabled pool")
	}
}

func testDeadline(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.11.0.0/16", 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "h", Node: "n1", Num4: 1})
	if ipam.KindOf(err) != ipam.KindUnavailable {
		t.Fatalf("expired deadline: err = %v, want KindUnavailable", err)
	}
	var ie *ipam.Error
	if !errors.As(err, &ie) {
		t.Fatalf("not an *ipam.Error: %T", err)
	}
}

func testCheckGC(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.12.0.0/16", 0)
	for _, h := range []string{"live", "dead1", "dead2"} {
		if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: h, Node: "n1", Num4: 1}); err != nil {
			t.Fatal(err)
		}
	}
	other, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "elsewhere", Node: "n2", Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := a.Check(ctxT(t), ipam.CheckOptions{Live: func(node, h string) bool { return h == "live" || h == "elsewhere" }})
	if err != nil || len(rep.Leaked) != 2 {
		t.Fatalf("Check leaks = %+v, %v; want dead1 and dead2", rep.Leaked, err)
	}
	rel, err := a.GC(ctxT(t), "n1", []string{"live"})
	if err != nil || len(rel) != 2 {
		t.Fatalf("GC = %v, %v", rel, err)
	}
	if held, _ := a.IPsByHandle(ctxT(t), "n2", "elsewhere"); !slices.Equal(held, other.IPv4) {
		t.Fatalf("GC of n1 touched n2's handle: %v", held)
	}
	mustClean(t, a)
	// A confirmed index entry whose block does not exist is reported, by
	// Check and by CheckNode.
	ghost := netip.MustParsePrefix("10.12.99.0/26")
	e.editIndex("n1", func(x *ipam.NodeIndex) {
		x.Blocks = append(x.Blocks, ipam.NodeBlock{CIDR: ghost, State: ipam.AffinityConfirmed, Since: time.Now()})
	})
	rep, _ = a.Check(ctxT(t), ipam.CheckOptions{})
	if len(rep.AffinityMismatches) != 1 || rep.AffinityMismatches[0].Block != ghost {
		t.Fatalf("Check with a ghost index entry = %+v", rep)
	}
	rep, _ = a.CheckNode(ctxT(t), "n1", ipam.CheckOptions{})
	if len(rep.AffinityMismatches) != 1 || rep.AffinityMismatches[0].Block != ghost {
		t.Fatalf("CheckNode with a ghost index entry = %+v", rep)
	}
}

func testRemoveNode(e env) {
	t := e.t
	now := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a := e.alloc(ipam.Config{Now: clock})
	mustPool(t, a, "p", "10.13.0.0/16", 0)
	kept, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "keep", Node: "n1", Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "gone", Node: "n2", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseByHandle(ctxT(t), "n2", "gone"); err != nil {
		t.Fatal(err)
	}
	if n, err := a.ReclaimIdleBlocks(ctxT(t), "n2", 0, time.Hour); err != nil || n != 0 {
		t.Fatalf("reclaim before grace: %d, %v", n, err)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if n, err := a.ReclaimIdleBlocks(ctxT(t), "n2", 0, time.Hour); err != nil || n != 1 {
		t.Fatalf("reclaim after grace: %d, %v", n, err)
	}
	if x := e.index("n2"); x == nil || len(x.Blocks)+len(x.Borrowed) != 0 {
		t.Fatalf("n2's index after the reclaim: %+v", x)
	}
	if err := a.RemoveNode(ctxT(t), "n1", ipam.RemoveNodeOptions{}); err != nil {
		t.Fatal(err)
	}
	// n1's block still holds "keep", now with no affinity, and n1's
	// index names it as borrowed with the address published.
	x := e.index("n1")
	if x == nil || len(x.Blocks) != 0 || len(x.Borrowed) != 1 || !slices.Equal(x.Borrowed[0].IPs, []netip.Addr{kept.IPv4[0].Addr()}) {
		t.Fatalf("n1's index after RemoveNode: %+v", x)
	}
	if held, _ := a.IPsByHandle(ctxT(t), "n1", "keep"); !slices.Equal(held, kept.IPv4) {
		t.Fatalf("keep holds %v", held)
	}
	if n := e.count(e.keys.Blocks()); n != 1 {
		t.Fatalf("%d blocks left, want n1's non-empty one", n)
	}
	mustClean(t, a)
	// Removing it again with its addresses frees them, deletes the
	// emptied block and the index.
	if err := a.RemoveNode(ctxT(t), "n1", ipam.RemoveNodeOptions{ReleaseAddresses: true}); err != nil {
		t.Fatal(err)
	}
	if n := e.count(e.keys.Blocks()); n != 0 || e.index("n1") != nil {
		t.Fatalf("%d blocks and n1's index %+v left after RemoveNode with ReleaseAddresses", n, e.index("n1"))
	}
	mustClean(t, a)
}

// testWritesPerAlloc: a steady-state allocation is one store write (the
// block's), and so is its release.
func testWritesPerAlloc(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.14.0.0/16", 0)
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "warm", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	before := a.Writes()
	for i := range 20 {
		if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: fmt.Sprint("h", i), Node: "n1", Num4: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Writes() - before; got != 20 {
		t.Fatalf("%d writes for 20 steady-state allocations, want 20", got)
	}
	before = a.Writes()
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h0", Node: "n1", Num4: 1}); err != nil || a.Writes() != before {
		t.Fatalf("repeated allocation: %v, %d writes, want 0", err, a.Writes()-before)
	}
	for i := range 20 {
		if err := a.ReleaseByHandle(ctxT(t), "n1", fmt.Sprint("h", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Writes() - before; got != 20 {
		t.Fatalf("%d writes for 20 releases, want 20", got)
	}
	mustClean(t, a)
}
