package noderemoval

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

// TestAnyAgentRemovesDepartedNode: every live agent's sweep removes a
// node departed for longer than the grace, not only the one agent after
// it by name; when two sweep the same node at once, each step being a
// compare-and-swap, both end without error and the node's blocks,
// addresses and index are gone exactly once.
func TestAnyAgentRemovesDepartedNode(t *testing.T) {
	ctx := context.Background()
	store, err := bolt.Open(ctx, bolt.Options{Path: filepath.Join(t.TempDir(), "ipam.db"), HoldOpen: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	alloc := ipam.New(store, ipam.Config{})
	if err := alloc.PutPool(ctx, ipam.Pool{Name: "default", CIDR: netip.MustParsePrefix("10.103.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	// b held addresses in two blocks of its own; a and c hold one each.
	for _, h := range []struct{ node, handle string }{{"a", "net.a1"}, {"b", "net.b1"}, {"b", "net.b2"}, {"c", "net.c1"}} {
		if _, err := alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: h.handle, Node: h.node, Num4: 1}); err != nil {
			t.Fatal(err)
		}
	}
	indexed := func() []string {
		kvs, err := store.List(ctx, ipam.Keys{}.Nodes())
		if err != nil {
			t.Error(err)
		}
		var out []string
		for _, kv := range kvs {
			out = append(out, kv.Key[len(ipam.Keys{}.Nodes()):])
		}
		return out
	}
	live := func() []string { return []string{"a", "c"} } // b's Node is gone
	sweeper := func(self string) *pass {
		s := New(Config{Node: self, Store: store, Synced: nil, Live: live, Indexed: indexed, Logger: slog.New(slog.DiscardHandler)})
		s.grace = time.Minute
		return s.newPass()
	}
	// c follows b by name, a does not: under a rule of one owner, a's
	// sweep would leave b alone.
	pa, pc := sweeper("a"), sweeper("c")
	t0 := time.Unix(1000, 0)
	if pa.run(ctx, t0)+pc.run(ctx, t0) != 0 {
		t.Fatal("removed at first sighting")
	}
	var wg sync.WaitGroup
	var na, nc int
	start := make(chan struct{})
	wg.Go(func() { <-start; na = pa.run(ctx, t0.Add(time.Minute)) })
	wg.Go(func() { <-start; nc = pc.run(ctx, t0.Add(time.Minute)) })
	close(start)
	wg.Wait()
	if na != 1 || nc != 1 {
		t.Fatalf("b departed past the grace: a's sweep removed %d nodes, c's %d; want each to remove it (or find it removed) without error", na, nc)
	}
	if _, err := store.Get(ctx, ipam.Keys{}.Node("b")); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("b's index after the sweeps: %v, want gone", err)
	}
	for _, h := range []string{"net.b1", "net.b2"} {
		if ips, err := alloc.IPsByHandle(ctx, "b", h); err != nil || len(ips) != 0 {
			t.Fatalf("%s after the sweeps: %v, %v; want released", h, ips, err)
		}
	}
	for _, h := range []struct{ node, handle string }{{"a", "net.a1"}, {"c", "net.c1"}} {
		if ips, err := alloc.IPsByHandle(ctx, h.node, h.handle); err != nil || len(ips) != 1 {
			t.Fatalf("%s of live node %s after the sweeps: %v, %v; want kept", h.handle, h.node, ips, err)
		}
	}
	rep, err := alloc.Check(ctx, ipam.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leaked) != 0 {
		t.Fatalf("check after the sweeps: leaked %v", rep.Leaked)
	}
	// Only a's sweep, as if c's agent were down: it removes a departed node
	// all the same.
	// bb sorts between b and c: c follows it too.
	if _, err := alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: "net.bb1", Node: "bb", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	pa.run(ctx, t0.Add(2*time.Minute))
	if n := pa.run(ctx, t0.Add(3*time.Minute)); n != 1 {
		t.Fatalf("a's sweep alone removed %d departed nodes, want bb", n)
	}
}
