package ipamtest

import (
	"encoding/json"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/podnet/podnet/ipam"
)

// index reads node's index, nil if it has none.
func (e env) index(node string) *ipam.NodeIndex {
	e.t.Helper()
	kv, err := e.store.Get(ctxT(e.t), e.keys.Node(node))
	if errors.Is(err, ipam.ErrNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	x := new(ipam.NodeIndex)
	if err := json.Unmarshal(kv.Value, x); err != nil {
		e.t.Fatal(err)
	}
	return x
}

// editIndex changes node's index behind the allocator's back.
func (e env) editIndex(node string, fn func(x *ipam.NodeIndex)) {
	e.t.Helper()
	kv, err := e.store.Get(ctxT(e.t), e.keys.Node(node))
	x := &ipam.NodeIndex{Node: node}
	switch {
	case errors.Is(err, ipam.ErrNotFound):
	case err != nil:
		e.t.Fatal(err)
	default:
		if err := json.Unmarshal(kv.Value, x); err != nil {
			e.t.Fatal(err)
		}
	}
	fn(x)
	if _, err := e.store.Write(ctxT(e.t), ipam.Write{Key: e.keys.Node(node), ModRevision: kv.ModRevision, Value: mustJSON(x)}); err != nil {
		e.t.Fatal(err)
	}
}

// editBlock changes block cidr behind the allocator's back.
func (e env) editBlock(cidr netip.Prefix, fn func(b *ipam.Block)) {
	e.t.Helper()
	kv, err := e.store.Get(ctxT(e.t), e.keys.Block(cidr))
	if err != nil {
		e.t.Fatal(err)
	}
	b := new(ipam.Block)
	if err := json.Unmarshal(kv.Value, b); err != nil {
		e.t.Fatal(err)
	}
	fn(b)
	if _, err := e.store.Write(ctxT(e.t), ipam.Write{Key: e.keys.Block(cidr), ModRevision: kv.ModRevision, Value: mustJSON(b)}); err != nil {
		e.t.Fatal(err)
	}
}

// count is how many keys are under prefix.
func (e env) count(prefix string) int {
	e.t.Helper()
	kvs, err := e.store.List(ctxT(e.t), prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(kvs)
}

// putBlock creates block b behind the allocator's back.
func (e env) putBlock(b *ipam.Block) {
	e.t.Helper()
	if _, err := e.store.Write(ctxT(e.t), ipam.Write{Key: e.keys.Block(b.CIDR), Value: mustJSON(b)}); err != nil {
		e.t.Fatal(err)
	}
}

// clock is a settable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_000_000, 0)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
