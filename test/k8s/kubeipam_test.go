package k8s

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/ipamtest"
)

// TestKubeIPAM: the allocator suite, the one every store passes, against
// ipam/store/kube on a real kube-apiserver with the shipped CRDs. Each
// subtest has a key prefix of its own, so a set of objects of its own.
// The IPPool CRD refuses the invalid pools the suite would write behind
// the allocator's back.
func TestKubeIPAM(t *testing.T) {
	c, kc := kubeStoreCluster(t)
	ipamtest.Run(t, func(t *testing.T) ipam.Store {
		return openKubeStore(t, c, kc, "/ipamtest/"+t.Name()+"/")
	}, ipamtest.Options{NoV1: true, RefusesInvalidPools: true})
}

// countingStore counts a store's writes and the conflicts among them.
type countingStore struct {
	ipam.Store
	writes, conflicts *atomic.Int64
}

func (s countingStore) Write(ctx context.Context, w ipam.Write) (int64, error) {
	s.writes.Add(1)
	rev, err := s.Store.Write(ctx, w)
	if errors.Is(err, ipam.ErrConflict) {
		s.conflicts.Add(1)
	}
	return rev, err
}

// TestKubeIPAMConflict is the conflict-heavy case against a real
// kube-apiserver: 10 nodes x 40 allocations all at once, each with an
// allocator and a store connection of its own (as 400 plugin processes
// would have), from a pool of 8 blocks of 64 for 400 addresses: the nodes
// race for blocks, and two of them cannot get one and borrow. It runs
// without the node lock (the worst case: a node's 40 allocations race for
// the same block) and with it (a mutex per node standing in for the
// plugins' flock, ipamcni's nodeLocked), and then with the lock from a
// pool with room, where each node claims a block and nobody borrows. No address may be handed
// out twice; every handle finds its address from its node; Check is
// clean before and after all are released, concurrently, and nothing is
// left allocated.
func TestKubeIPAMConflict(t *testing.T) {
	c, kc := kubeStoreCluster(t)
	for _, tt := range []struct {
		name   string
		locked bool
		pool   string
	}{
		{"NoNodeLock", false, "10.30.0.0/23"},
		{"NodeLock", true, "10.30.0.0/23"},
		// A pool with room: each node claims one block, nobody borrows,
		// the steady state of a cluster.
		{"NodeLockRoomyPool", true, "10.31.0.0/16"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &conflictRun{t: t, open: func(prefix string) ipam.Store { return openKubeStore(t, c, kc, prefix) },
				prefix: "/ipamtest/conflict-" + tt.name + "/", locked: tt.locked, pool: netip.MustParsePrefix(tt.pool)}
			r.run(10, 40)
		})
	}
}

// conflictRun is one run of TestKubeIPAMConflict.
type conflictRun struct {
	t                 *testing.T
	open              func(prefix string) ipam.Store
	prefix            string
	locked            bool
	pool              netip.Prefix
	nodeLocks         sync.Map // node -> *sync.Mutex
	writes, conflicts atomic.Int64
}

type conflictGot struct {
	node, handle string
	addr         netip.Prefix
}

func (r *conflictRun) alloc() *ipam.Allocator {
	s := countingStore{Store: r.open(r.prefix), writes: &r.writes, conflicts: &r.conflicts}
	return ipam.New(s, ipam.Config{Keys: ipam.Keys{Prefix: r.prefix}, Timeout: 4 * time.Minute})
}

// onNode runs fn as a plugin on node would: holding the node's lock if
// the run has one.
func (r *conflictRun) onNode(node string, fn func()) {
	if r.locked {
		mu, _ := r.nodeLocks.LoadOrStore(node, &sync.Mutex{})
		mu.(*sync.Mutex).Lock()
		defer mu.(*sync.Mutex).Unlock()
	}
	fn()
}

func (r *conflictRun) run(nodes, perNode int) {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := r.alloc()
	if err := admin.PutPool(ctx, ipam.Pool{Name: "p", CIDR: r.pool, BlockSize: 26}); err != nil {
		t.Fatal(err)
	}
	all := r.allocate(ctx, nodes, perNode)
	r.checkAllocations(ctx, admin, all)
	r.writes.Store(0)
	r.conflicts.Store(0)
	start := time.Now()
	var wg sync.WaitGroup
	for _, g := range all {
		wg.Go(func() {
			r.onNode(g.node, func() {
				if err := r.alloc().ReleaseByHandle(ctx, g.node, g.handle); err != nil {
					t.Errorf("release %s: %v", g.handle, err)
				}
			})
		})
	}
	wg.Wait()
	t.Logf("%d releases at once in %s: %d writes, %d conflicts", len(all), time.Since(start).Round(time.Millisecond), r.writes.Load(), r.conflicts.Load())
	checkIPAMClean(ctx, t, admin, "after the releases")
	blocks, err := admin.Blocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Allocated != 0 {
			t.Errorf("block %s keeps %d addresses", b.CIDR, b.Allocated)
		}
	}
}

// allocate makes perNode allocations on each of nodes, all at once.
func (r *conflictRun) allocate(ctx context.Context, nodes, perNode int) []conflictGot {
	t := r.t
	results := make(chan conflictGot, nodes*perNode)
	var wg sync.WaitGroup
	r.writes.Store(0)
	r.conflicts.Store(0)
	start := time.Now()
	for n := range nodes {
		for i := range perNode {
			wg.Go(func() {
				node, h := fmt.Sprintf("node%d", n), fmt.Sprintf("net.n%d-c%d", n, i)
				r.onNode(node, func() {
					as, err := r.alloc().AutoAssign(ctx, ipam.AutoAssignArgs{Handle: h, Node: node, Num4: 1})
					if err != nil {
						t.Errorf("%s on %s: %v", h, node, err)
						return
					}
					results <- conflictGot{node, h, as.IPv4[0]}
				})
			})
		}
	}
	wg.Wait()
	took := time.Since(start)
	close(results)
	if t.Failed() {
		t.FailNow()
	}
	var all []conflictGot
	for g := range results {
		all = append(all, g)
	}
	t.Logf("%d allocations on %d nodes at once in %s (%.0f/s): %d writes, %d conflicts",
		len(all), nodes, took.Round(time.Millisecond), float64(len(all))/took.Seconds(), r.writes.Load(), r.conflicts.Load())
	return all
}

// checkAllocations: no address twice, each found from its node, Check
// clean.
func (r *conflictRun) checkAllocations(ctx context.Context, admin *ipam.Allocator, all []conflictGot) {
	t := r.t
	byAddr := map[netip.Addr]string{}
	for _, g := range all {
		if other, dup := byAddr[g.addr.Addr()]; dup {
			t.Fatalf("%v handed to %s and %s", g.addr, other, g.handle)
		}
		byAddr[g.addr.Addr()] = g.handle
	}
	blocks, err := admin.Blocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	borrowed := 0
	for _, g := range all {
		ips, err := admin.IPsByHandle(ctx, g.node, g.handle)
		if err != nil || len(ips) != 1 || ips[0] != g.addr {
			t.Fatalf("IPsByHandle(%s, %s) = %v, %v; want %v", g.node, g.handle, ips, err, g.addr)
		}
		for _, b := range blocks {
			if b.CIDR.Contains(g.addr.Addr()) && b.Node != g.node {
				borrowed++
			}
		}
	}
	t.Logf("%d blocks claimed, %d addresses borrowed from other nodes' blocks", len(blocks), borrowed)
	checkIPAMClean(ctx, t, admin, "after the allocations")
}

func checkIPAMClean(ctx context.Context, t *testing.T, a *ipam.Allocator, when string) {
	t.Helper()
	rep, err := a.Check(ctx, ipam.CheckOptions{})
	if err != nil || !rep.Clean() {
		t.Fatalf("Check %s: %+v, %v", when, rep, err)
	}
}
