package ipamtest

import (
	"context"
	"net/netip"
	"slices"
	"sync"

	"github.com/podnet/podnet/ipam"
)

// cachingStore answers a Get from what it last read or wrote of the key,
// unless ctx carries ipam.FreshRead: a cache that misses the writes made
// behind its back, as the agent's socket misses another node's or the
// CLI's until a conflict or a fresh read.
type cachingStore struct {
	ipam.Store
	mu  sync.Mutex
	kvs map[string]ipam.KV
}

func newCachingStore(s ipam.Store) *cachingStore {
	return &cachingStore{Store: s, kvs: map[string]ipam.KV{}}
}

func (c *cachingStore) Get(ctx context.Context, key string) (ipam.KV, error) {
	if !ipam.IsFreshRead(ctx) {
		c.mu.Lock()
		kv, ok := c.kvs[key]
		c.mu.Unlock()
		if ok {
			return kv, nil
		}
	}
	kv, err := c.Store.Get(ctx, key)
	if err == nil {
		c.mu.Lock()
		c.kvs[key] = kv
		c.mu.Unlock()
	}
	return kv, err
}

func (c *cachingStore) Write(ctx context.Context, w ipam.Write) (int64, error) {
	rev, err := c.Store.Write(ctx, w)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil || w.Delete {
		delete(c.kvs, w.Key)
	} else {
		c.kvs[w.Key] = ipam.KV{Key: w.Key, Value: w.Value, ModRevision: rev}
	}
	return rev, err
}

// testFreshDecisions: an operation that would write nothing decides on
// fresh reads, not on a cache that missed writes made behind its back: a
// repeated ADD does not hand back an address its handle no longer holds,
// and a DEL does not leave an address it did not see.
func testFreshDecisions(e env) {
	t := e.t
	cached := ipam.New(newCachingStore(e.store), ipam.Config{Keys: e.keys})
	direct := e.alloc(ipam.Config{})
	mustPool(t, direct, "p", "10.42.0.0/16", 0)

	// ADD through the cache, DEL behind its back, the ADD repeated.
	args := ipam.AutoAssignArgs{Handle: "net.c1", Node: "n1", Num4: 1}
	first, err := cached.AutoAssign(ctxT(t), args)
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.ReleaseByHandle(ctxT(t), "n1", "net.c1"); err != nil {
		t.Fatal(err)
	}
	again, err := cached.AutoAssign(ctxT(t), args)
	if err != nil {
		t.Fatal(err)
	}
	held, err := direct.IPsByHandle(ctxT(t), "n1", "net.c1")
	if err != nil || len(held) != 1 || !slices.Equal(held, again.IPv4) {
		t.Fatalf("repeated ADD through a stale cache answered %v (first %v), but the handle holds %v (%v)", again.IPv4, first.IPv4, held, err)
	}

	// ADD behind the cache's back, DEL through it.
	if _, err := direct.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c2", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	if err := cached.ReleaseByHandle(ctxT(t), "n1", "net.c2"); err != nil {
		t.Fatal(err)
	}
	if held, err := direct.IPsByHandle(ctxT(t), "n1", "net.c2"); err != nil || len(held) != 0 {
		t.Fatalf("DEL through a stale cache left %v (%v)", held, err)
	}
	if _, err := direct.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c3", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	c3, _ := direct.IPsByHandle(ctxT(t), "n1", "net.c3")
	if rel, err := cached.ReleaseIPs(ctxT(t), []netip.Addr{c3[0].Addr()}); err != nil || len(rel) != 1 {
		t.Fatalf("ReleaseIPs(%v) through a stale cache released %v (%v)", c3, rel, err)
	}
	mustClean(t, direct)
}
