package agentsock

import (
	"sync"

	"github.com/podnet/podnet/ipam"
)

// DefaultCacheEntries bounds the cache: far more than a node's blocks,
// pools and index, which is what the allocator reads on a node.
const DefaultCacheEntries = 4096

// cache holds Get results by key. Calls to the backend run outside the
// lock, so two of them on one key may answer in either order; a token
// (the mutation count when the call began) tells whether anything
// changed the key meanwhile, in which case the answer is not kept: a
// read never overwrites a newer write, nor a write a newer one.
type cache struct {
	mu  sync.Mutex
	max int
	// seq counts mutations (write-through, eviction, purge); an entry's
	// mut is the seq that last mutated it.
	seq uint64
	// floor: answers to calls that began before the last purge are not
	// kept, since the purge forgot which keys changed.
	floor uint64
	m     map[string]*entry
}

// entry is a key's cached KV, or (valid false) the mark that the key was
// evicted at mut.
type entry struct {
	kv    ipam.KV
	valid bool
	mut   uint64
}

func newCache(max int) *cache {
	return &cache{max: max, m: map[string]*entry{}}
}

// get returns the key's cached KV.
func (c *cache) get(key string) (ipam.KV, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[key]; e != nil && e.valid {
		return e.kv, true
	}
	return ipam.KV{}, false
}

// begin returns the token of a backend call about to start.
func (c *cache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// changedSince reports whether key may have changed since token;
// c.mu is held.
func (c *cache) changedSince(key string, token uint64) bool {
	e := c.m[key]
	return token < c.floor || (e != nil && e.mut > token)
}

// fill keeps what the backend read at token, unless the key changed since.
func (c *cache) fill(kv ipam.KV, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changedSince(kv.Key, token) {
		return
	}
	c.set(kv.Key, entry{kv: kv, valid: true})
}

// wrote records w, begun at token, which the backend applied at rev:
// the key's new KV is kept, unless w deleted it or another call changed
// the key meanwhile (their order is unknown), which evict it.
func (c *cache) wrote(w ipam.Write, rev int64, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.Delete || c.changedSince(w.Key, token) {
		c.set(w.Key, entry{})
		return
	}
	c.set(w.Key, entry{kv: ipam.KV{Key: w.Key, Value: w.Value, ModRevision: rev}, valid: true})
}

// evict forgets key: the next Get reads the backend.
func (c *cache) evict(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(key, entry{})
}

// set stores e as key's entry, purging everything first when the cache
// is full; c.mu is held.
func (c *cache) set(key string, e entry) {
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		clear(c.m)
		c.seq++
		c.floor = c.seq
	}
	c.seq++
	e.mut = c.seq
	c.m[key] = &e
}
