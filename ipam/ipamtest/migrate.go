package ipamtest

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/podnet/podnet/ipam"
)

// plantV1 writes a layout v1 under prefix: a pool, n1's block (h1 with
// its endpoint, and h3 of n2 borrowed) with its affinity and handle
// records, and h1's workload endpoint.
func (e env) plantV1(prefix string) (h1, h3 netip.Addr, created time.Time) {
	t := e.t
	t.Helper()
	put := func(key string, v any) {
		t.Helper()
		if _, err := e.store.Write(ctxT(t), ipam.Write{Key: prefix + key, ModRevision: ipam.AnyRevision, Value: mustJSON(v)}); err != nil {
			t.Fatal(err)
		}
	}
	cidr := netip.MustParsePrefix("10.19.0.0/26")
	created = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	b := ipam.NewBlock(cidr, ipam.HostAffinity("n1"))
	id := endpointID("n1", "web")
	h1 = b.AutoAllocate(1, ipam.Attributes{Handle: "net.c1", Node: "n1", Extra: map[string]string{ipam.AttrEndpoint: id.String()}}, nil)[0]
	h3 = b.AutoAllocate(1, ipam.Attributes{Handle: "net.c3", Node: "n2"}, nil)[0]
	put("ipam/pools/p", ipam.Pool{Name: "p", CIDR: netip.MustParsePrefix("10.19.0.0/16"), BlockSize: 26})
	put("ipam/blocks/10.19.0.0-26", b)
	put("ipam/affinities/n1/10.19.0.0-26", map[string]any{"state": "confirmed", "since": created})
	put("ipam/handles/net.c1", map[string]any{"id": "net.c1", "blocks": map[string]int{cidr.String(): 1}})
	put("workloads/n1/ns/web/eth0", map[string]any{"node": "n1", "namespace": "ns", "pod": "web", "ifName": "eth0",
		"containerID": "c1", "network": "net", "handle": "net.c1", "created": created})
	return h1, h3, created
}

// testMigrateV1: an allocator meeting layout v1 data of its node refuses
// to run, naming the prefix and the command; with MigrateV1 it migrates
// in place and goes on, and the v1 pods' addresses, endpoint and borrowed
// address are found; MigrateV1 to another prefix carries the same over,
// once.
func testMigrateV1(e env) {
	t := e.t
	h1, h3, created := e.plantV1(e.keys.Prefix)
	a := e.alloc(ipam.Config{})
	_, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c2", Node: "n1", Num4: 1})
	if ipam.KindOf(err) != ipam.KindInvalid || !strings.Contains(err.Error(), e.keys.Prefix) || !strings.Contains(err.Error(), "podnet ipam migrate") {
		t.Fatalf("allocation over a v1 layout: %v; want a refusal naming %s and the migrate command", err, e.keys.Prefix)
	}
	m := e.alloc(ipam.Config{MigrateV1: true})
	got, err := m.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c2", Node: "n1", Num4: 1})
	if err != nil || got.IPv4[0].Addr() == h1 || got.IPv4[0].Addr() == h3 {
		t.Fatalf("allocation with MigrateV1: %+v, %v", got, err)
	}
	checkMigrated(e, a, h1, h3, created)

	// To another prefix, with MigrateV1 itself.
	to := ipam.Keys{Prefix: e.keys.Prefix + "v2/"}
	from := ipam.Keys{Prefix: e.keys.Prefix + "v1/"}
	e.plantV1(from.Prefix)
	res, err := ipam.MigrateV1(ctxT(t), e.store, from, to)
	if err != nil || res.Pools != 1 || res.Blocks != 1 || res.Nodes != 2 {
		t.Fatalf("MigrateV1 = %+v, %v", res, err)
	}
	if res, err := ipam.MigrateV1(ctxT(t), e.store, from, to); err != nil || !res.Done {
		t.Fatalf("MigrateV1 again = %+v, %v; want done", res, err)
	}
	checkMigrated(env{t: t, store: e.store, keys: to}, ipam.New(e.store, ipam.Config{Keys: to}), h1, h3, created)
}

func checkMigrated(e env, a *ipam.Allocator, h1, h3 netip.Addr, created time.Time) {
	t := e.t
	t.Helper()
	if held, err := a.IPsByHandle(ctxT(t), "n1", "net.c1"); err != nil || len(held) != 1 || held[0].Addr() != h1 {
		t.Fatalf("v1 pod's address after the migration: %v, %v; want %s", held, err, h1)
	}
	if held, err := a.IPsByHandle(ctxT(t), "n2", "net.c3"); err != nil || len(held) != 1 || held[0].Addr() != h3 {
		t.Fatalf("v1 borrowed address after the migration: %v, %v; want %s", held, err, h3)
	}
	if x := e.index("n2"); x == nil || len(x.Borrowed) != 1 || !slices.Equal(x.Borrowed[0].IPs, []netip.Addr{h3}) {
		t.Fatalf("n2's index after the migration: %+v", x)
	}
	ep, err := a.GetEndpoint(ctxT(t), endpointID("n1", "web"))
	if err != nil || ep.Handle != "net.c1" || !ep.Created.Equal(created) {
		t.Fatalf("v1 endpoint after the migration: %+v, %v", ep, err)
	}
	mustClean(t, a)
}
