package ipamtest

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
)

// BenchAutoAssign measures steady-state allocations per second: nodes
// simulated nodes, each with a claimed block already, and workers
// goroutines allocating concurrently (allocation i goes to node i%nodes).
// It reports store writes per allocation.
func BenchAutoAssign(b *testing.B, store ipam.Store, nodes, workers int) {
	ctx := context.Background()
	keys := ipam.Keys{Prefix: fmt.Sprintf("/bench/%s/%d/", b.Name(), b.N)}
	a := ipam.New(store, ipam.Config{Keys: keys})
	if err := a.PutPool(ctx, ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.0.0.0/8")}); err != nil {
		b.Fatal(err)
	}
	for n := range nodes { // claim each node's first block outside the timing
		if _, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: fmt.Sprint("warm", n), Node: fmt.Sprint("node", n), Num4: 1}); err != nil {
			b.Fatal(err)
		}
	}
	writes0 := a.Writes()
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				node := fmt.Sprint("node", i%int64(nodes))
				if _, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: fmt.Sprint("h", i), Node: node, Num4: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "allocs/s")
	b.ReportMetric(float64(a.Writes()-writes0)/float64(b.N), "writes/alloc")
}

// BenchClaim measures the time to claim a block (a new node's first
// allocation) when the pool already holds existing blocks.
func BenchClaim(b *testing.B, store ipam.Store, existing int) {
	ctx := context.Background()
	keys := ipam.Keys{Prefix: fmt.Sprintf("/bench/%s/%d/", b.Name(), b.N)}
	a := ipam.New(store, ipam.Config{Keys: keys})
	pool := ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.0.0.0/8")}
	if err := a.PutPool(ctx, pool); err != nil {
		b.Fatal(err)
	}
	pool, _ = pool.Normalize()
	// Existing blocks at the start of the pool.
	for i := range existing {
		blk := ipam.NewBlock(pool.BlockAt(uint64(i)), ipam.HostAffinity("old"))
		if _, err := store.Write(ctx, ipam.Write{Key: keys.Block(blk.CIDR), Value: mustJSON(blk)}); err != nil {
			b.Fatal(err)
		}
	}
	cs := &countingStore{Store: store}
	a = ipam.New(cs, ipam.Config{Keys: keys})
	b.ResetTimer()
	for i := range b.N {
		if _, err := a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: fmt.Sprint("h", i), Node: fmt.Sprint("new", i), Num4: 1}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cs.reads.Load())/float64(b.N), "reads/claim")
}

// countingStore counts reads, to show that a claim's reads do not grow
// with the number of existing blocks.
type countingStore struct {
	ipam.Store
	reads atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) (ipam.KV, error) {
	c.reads.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *countingStore) List(ctx context.Context, prefix string) ([]ipam.KV, error) {
	c.reads.Add(1)
	return c.Store.List(ctx, prefix)
}
