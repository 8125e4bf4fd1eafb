package ipamtest

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/podnet/podnet/ipam"
)

// The concurrency tests: many allocators, as many plugin processes on
// many nodes would be, racing on one store.

func testSameHandleConcurrent(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.2.0.0/16", 0)
	const n = 20
	results := make([]ipam.Assignment, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Separate allocators: as separate plugin processes would be.
			b := e.alloc(ipam.Config{})
			results[i], errs[i] = b.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "same", Node: "n1", Num4: 1})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("ADD %d: %v", i, errs[i])
		}
		if !slices.Equal(results[i].IPv4, results[0].IPv4) {
			t.Fatalf("ADD %d got %v, ADD 0 got %v", i, results[i].IPv4, results[0].IPv4)
		}
	}
	held, _ := a.IPsByHandle(ctxT(t), "n1", "same")
	if len(held) != 1 {
		t.Fatalf("handle holds %v, want one address", held)
	}
	// One node, so one block, however the ADDs raced.
	if n := e.count(e.keys.Blocks()); n != 1 {
		t.Fatalf("%d blocks claimed, want 1", n)
	}
	mustClean(t, a)
}

// testConcurrentNodes has nodes allocate at once, each with two workers so
// that siblings on a node conflict too, then checks that no address was
// given twice, every handle resolves, and Check is clean after release.
func testConcurrentNodes(e env, nodes, perNode int) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.128.0.0/9", 0)
	all := allocateOnNodes(e, nodes, perNode)
	seen := map[netip.Addr]string{}
	for _, r := range all {
		if prev, dup := seen[r.addr.Addr()]; dup {
			t.Fatalf("duplicate address %s: %s and %s", r.addr, prev, r.handle)
		}
		seen[r.addr.Addr()] = r.handle
	}
	if len(seen) != nodes*perNode {
		t.Fatalf("%d addresses, want %d", len(seen), nodes*perNode)
	}
	// Resolve and release per node, with two workers each, as kubelets
	// would: not every pod of the cluster at the same instant.
	byNode := make([][]nodeAlloc, nodes)
	for _, r := range all {
		byNode[r.node] = append(byNode[r.node], r)
	}
	eachNode(t, byNode, func(r nodeAlloc) error {
		held, err := a.IPsByHandle(ctxT(t), fmt.Sprint("node", r.node), r.handle)
		if err != nil || len(held) != 1 || held[0] != r.addr {
			return fmt.Errorf("handle %s resolves to %v, %v; want %s", r.handle, held, err, r.addr)
		}
		return nil
	})
	mustClean(t, a)
	eachNode(t, byNode, func(r nodeAlloc) error { return a.ReleaseByHandle(ctxT(t), fmt.Sprint("node", r.node), r.handle) })
	if t.Failed() {
		t.FailNow()
	}
	mustClean(t, a)
	if bs, err := a.Blocks(ctxT(t)); err != nil {
		t.Fatal(err)
	} else {
		for _, b := range bs {
			if b.Allocated != 0 {
				t.Fatalf("block %s holds %d addresses after release", b.CIDR, b.Allocated)
			}
		}
	}
}

// nodeAlloc is one address a node's worker was given.
type nodeAlloc struct {
	node   int
	handle string
	addr   netip.Prefix
}

// allocateOnNodes runs two workers per node at once, each with its own
// allocator, which share the node's perNode allocations between them.
func allocateOnNodes(e env, nodes, perNode int) []nodeAlloc {
	t := e.t
	var mu sync.Mutex
	var all []nodeAlloc
	errc := make(chan error, nodes*2)
	var wg sync.WaitGroup
	for n := range nodes {
		for w := range 2 {
			wg.Go(func() {
				got, err := allocateAsWorker(e, n, w, perNode)
				mu.Lock()
				all = append(all, got...)
				mu.Unlock()
				if err != nil {
					errc <- err
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	return all
}

// allocateAsWorker makes worker w's share (every other one) of node n's
// allocations.
func allocateAsWorker(e env, n, w, perNode int) ([]nodeAlloc, error) {
	al := e.alloc(ipam.Config{})
	var out []nodeAlloc
	for i := w; i < perNode; i += 2 {
		h := fmt.Sprintf("net.n%d-c%d", n, i)
		got, err := al.AutoAssign(ctxT(e.t), ipam.AutoAssignArgs{Handle: h, Node: fmt.Sprint("node", n), Num4: 1})
		if err != nil {
			return out, err
		}
		out = append(out, nodeAlloc{n, h, got.IPv4[0]})
	}
	return out, nil
}

// eachNode runs fn on every allocation, two workers per node, all nodes
// at once.
func eachNode(t *testing.T, byNode [][]nodeAlloc, fn func(r nodeAlloc) error) {
	var wg sync.WaitGroup
	for _, rs := range byNode {
		for w := range 2 {
			wg.Go(func() {
				if err := everyOther(rs, w, fn); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
}

// everyOther runs fn on rs[from], rs[from+2]..., stopping at an error.
func everyOther(rs []nodeAlloc, from int, fn func(r nodeAlloc) error) error {
	for i := from; i < len(rs); i += 2 {
		if err := fn(rs[i]); err != nil {
			return err
		}
	}
	return nil
}
