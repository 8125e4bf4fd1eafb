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
func TestKubeIPAM(t *testing.T) {
	c, kc := kubeStoreCluster(t)
	ipamtest.Run(t, func(t *testing.T) ipam.Store {
		return openKubeStore(t, c, kc, "/ipamtest/"+t.Name()+"/")
	}, ipamtest.Options{NoV1: true})
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
// would have), no node lock, from a pool of 8 blocks of 64 for 400
// addresses: the nodes race for blocks, two of them cannot get one and
// borrow. No address may be handed out twice; every handle finds its
// address from its node; Check is clean before and after all are
// released, concurrently, and nothing is left allocated.
func TestKubeIPAMConflict(t *testing.T) {
	const nodes, perNode = 10, 40
	c, kc := kubeStoreCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prefix := "/ipamtest/conflict/"
	var writes, conflicts atomic.Int64
	newAlloc := func() *ipam.Allocator {
		s := countingStore{Store: openKubeStore(t, c, kc, prefix), writes: &writes, conflicts: &conflicts}
		return ipam.New(s, ipam.Config{Keys: ipam.Keys{Prefix: prefix}, Timeout: 4 * time.Minute})
	}
	admin := newAlloc()
	if err := admin.PutPool(ctx, ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.30.0.0/23"), BlockSize: 26}); err != nil {
		t.Fatal(err)
	}
	type got struct {
		node, handle string
		addr         netip.Prefix
	}
	results := make(chan got, nodes*perNode)
	var wg sync.WaitGroup
	start := time.Now()
	writes.Store(0)
	conflicts.Store(0)
	for n := range nodes {
		for i := range perNode {
			wg.Go(func() {
				node, h := fmt.Sprintf("node%d", n), fmt.Sprintf("net.n%d-c%d", n, i)
				as, err := newAlloc().AutoAssign(ctx, ipam.AutoAssignArgs{Handle: h, Node: node, Num4: 1})
				if err != nil {
					t.Errorf("%s on %s: %v", h, node, err)
					return
				}
				results <- got{node, h, as.IPv4[0]}
			})
		}
	}
	wg.Wait()
	took := time.Since(start)
	close(results)
	if t.Failed() {
		t.FailNow()
	}
	byAddr := map[netip.Addr]string{}
	var all []got
	for r := range results {
		if other, dup := byAddr[r.addr.Addr()]; dup {
			t.Fatalf("%v handed to %s and %s", r.addr, other, r.handle)
		}
		byAddr[r.addr.Addr()] = r.handle
		all = append(all, r)
	}
	t.Logf("%d allocations on %d nodes at once in %s (%.0f/s): %d writes, %d conflicts",
		len(all), nodes, took.Round(time.Millisecond), float64(len(all))/took.Seconds(), writes.Load(), conflicts.Load())
	blocks, err := admin.Blocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	borrowed := 0
	for _, r := range all {
		ips, err := admin.IPsByHandle(ctx, r.node, r.handle)
		if err != nil || len(ips) != 1 || ips[0] != r.addr {
			t.Fatalf("IPsByHandle(%s, %s) = %v, %v; want %v", r.node, r.handle, ips, err, r.addr)
		}
		for _, b := range blocks {
			if b.CIDR.Contains(r.addr.Addr()) && b.Node != r.node {
				borrowed++
			}
		}
	}
	t.Logf("%d blocks claimed, %d addresses borrowed from other nodes' blocks", len(blocks), borrowed)
	checkClean := func(when string) {
		t.Helper()
		rep, err := admin.Check(ctx, ipam.CheckOptions{})
		if err != nil || !rep.Clean() {
			t.Fatalf("Check %s: %+v, %v", when, rep, err)
		}
	}
	checkClean("after the allocations")
	writes.Store(0)
	conflicts.Store(0)
	start = time.Now()
	for _, r := range all {
		wg.Go(func() {
			if err := newAlloc().ReleaseByHandle(ctx, r.node, r.handle); err != nil {
				t.Errorf("release %s: %v", r.handle, err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d releases at once in %s: %d writes, %d conflicts", len(all), time.Since(start).Round(time.Millisecond), writes.Load(), conflicts.Load())
	checkClean("after the releases")
	if blocks, err = admin.Blocks(ctx); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Allocated != 0 {
			t.Errorf("block %s keeps %d addresses", b.CIDR, b.Allocated)
		}
	}
}
