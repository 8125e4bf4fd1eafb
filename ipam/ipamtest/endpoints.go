package ipamtest

import (
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/podnet/podnet/ipam"
)

func podEndpoint(node, pod, containerID string) *ipam.Endpoint {
	return &ipam.Endpoint{Node: node, Namespace: "ns", Pod: pod, IfName: "eth0", ContainerID: containerID,
		Network: "net", MAC: "02:00:00:00:00:01", HostInterface: "pn" + containerID}
}

func endpointID(node, pod string) ipam.EndpointID {
	return ipam.EndpointID{Node: node, Namespace: "ns", Pod: pod, IfName: "eth0"}
}

// testEndpoints: the endpoint is written in the allocation's one
// transaction, a repeated ADD writes nothing, a new sandbox of the pod
// replaces the endpoint, and the old sandbox's DEL (before or after the
// new ADD) releases only its own addresses. Check with endpoints reports
// exactly the replaced sandbox's addresses as leaked.
func testEndpoints(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.15.0.0/16", 0)
	// Warm-up without an endpoint: the block is claimed, and an
	// allocation made for no endpoint is never judged by endpoints.
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "plain", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	x := &endpointRun{env: e, a: a}
	c1 := x.firstAdd()
	x.newSandboxFirst(c1)
	x.oldDelFirst()
	x.deletedBehindTheBack()
	x.badArguments()
}

// endpointRun is testEndpoints' allocator with its ADD, DEL and checks,
// all for the pod n1/ns/web/eth0.
type endpointRun struct {
	env
	a *ipam.Allocator
}

// add is an ADD of container cid: one transaction, address and endpoint.
func (x *endpointRun) add(cid string) netip.Prefix {
	t := x.t
	t.Helper()
	before := x.a.Txns()
	got, err := x.a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net." + cid, Node: "n1", Num4: 1, Endpoint: podEndpoint("n1", "web", cid)})
	if err != nil {
		t.Fatal(err)
	}
	if n := x.a.Txns() - before; n != 1 {
		t.Fatalf("ADD of %s with its endpoint took %d transactions, want 1", cid, n)
	}
	return got.IPv4[0]
}

// del is a DEL of container cid: at most one transaction.
func (x *endpointRun) del(cid string) {
	t := x.t
	t.Helper()
	before := x.a.Txns()
	if err := x.a.ReleaseAttachment(ctxT(t), "net."+cid, endpointID("n1", "web"), cid); err != nil {
		t.Fatal(err)
	}
	if n := x.a.Txns() - before; n > 1 {
		t.Fatalf("DEL of %s took %d transactions, want at most 1", cid, n)
	}
}

// endpointIs checks that the endpoint names container cid, or that
// there is none when cid is empty.
func (x *endpointRun) endpointIs(cid string) {
	t := x.t
	t.Helper()
	ep, err := x.a.GetEndpoint(ctxT(t), endpointID("n1", "web"))
	if cid == "" {
		if ipam.KindOf(err) != ipam.KindNotFound {
			t.Fatalf("endpoint after the last DEL: %+v, %v", ep, err)
		}
		return
	}
	if err != nil || ep.ContainerID != cid || ep.Handle != "net."+cid || ep.HostInterface != "pn"+cid || ep.Created.IsZero() {
		t.Fatalf("endpoint = %+v, %v; want container %s", ep, err, cid)
	}
}

// leaked checks that Check with endpoints finds exactly the handles
// want leaked, and nothing else.
func (x *endpointRun) leaked(want ...string) {
	t := x.t
	t.Helper()
	rep, err := x.a.CheckWithEndpoints(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range rep.Leaked {
		got = append(got, l.Handle)
	}
	rep.Leaked = nil
	if !slices.Equal(got, want) || !rep.Clean() {
		t.Fatalf("CheckWithEndpoints: leaked %v, want %v; report %+v", got, want, rep)
	}
}

// firstAdd: the endpoint holds the address; a repeated ADD gives the
// same address and writes nothing.
func (x *endpointRun) firstAdd() netip.Prefix {
	t, a := x.t, x.a
	c1 := x.add("c1")
	ep, err := a.GetEndpoint(ctxT(t), endpointID("n1", "web"))
	if err != nil || !slices.Equal(ep.IPs, []netip.Prefix{netip.PrefixFrom(c1.Addr(), 32)}) || ep.Network != "net" || ep.MAC == "" {
		t.Fatalf("endpoint = %+v, %v; want %s", ep, err, c1.Addr())
	}
	x.leaked()
	before := a.Txns()
	again, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c1", Node: "n1", Num4: 1, Endpoint: podEndpoint("n1", "web", "c1")})
	if err != nil || again.IPv4[0] != c1 || a.Txns() != before {
		t.Fatalf("repeated ADD: %+v, %v, %d transactions", again, err, a.Txns()-before)
	}
	if ep2, _ := a.GetEndpoint(ctxT(t), endpointID("n1", "web")); !ep2.Created.Equal(ep.Created) {
		t.Fatalf("repeated ADD rewrote the endpoint: %v -> %v", ep.Created, ep2.Created)
	}
	return c1
}

// newSandboxFirst: the new sandbox's ADD comes before the old one's DEL
// (c1, at address c1).
func (x *endpointRun) newSandboxFirst(c1 netip.Prefix) {
	t := x.t
	c2 := x.add("c2")
	if c2 == c1 {
		t.Fatalf("new sandbox got the old one's address %s", c1)
	}
	x.endpointIs("c2")
	x.leaked("net.c1")
	x.del("c1")
	x.endpointIs("c2")
	if held, _ := x.a.IPsByHandle(ctxT(t), "net.c2"); !slices.Equal(held, []netip.Prefix{c2}) {
		t.Fatalf("old sandbox's DEL touched the new one: %v", held)
	}
	x.leaked()
}

// oldDelFirst: the old sandbox's DEL comes first; DEL is idempotent.
func (x *endpointRun) oldDelFirst() {
	x.del("c2")
	x.endpointIs("")
	x.add("c3")
	x.endpointIs("c3")
	x.del("c3")
	x.endpointIs("")
	x.del("c3")
	x.leaked()
}

// deletedBehindTheBack: an endpoint deleted behind the allocator's back
// leaves a leak that Check reports and GC releases.
func (x *endpointRun) deletedBehindTheBack() {
	t := x.t
	x.add("c4")
	if _, err := x.store.Txn(ctxT(t), nil, []ipam.Op{ipam.Del(x.keys.Workload(endpointID("n1", "web")))}); err != nil {
		t.Fatal(err)
	}
	x.leaked("net.c4")
	if rel, err := x.a.GC(ctxT(t), "n1", []string{"plain"}); err != nil || len(rel) != 1 {
		t.Fatalf("GC = %v, %v", rel, err)
	}
	x.leaked()
}

// badArguments: endpoint arguments are checked.
func (x *endpointRun) badArguments() {
	t, a := x.t, x.a
	bad := podEndpoint("n2", "web", "c5")
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c5", Node: "n1", Num4: 1, Endpoint: bad}); ipam.KindOf(err) != ipam.KindInvalid {
		t.Fatalf("endpoint of another node: %v", err)
	}
	bad = podEndpoint("n1", "we/b", "c5")
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c5", Node: "n1", Num4: 1, Endpoint: bad}); ipam.KindOf(err) != ipam.KindInvalid {
		t.Fatalf("pod name with '/': %v", err)
	}
}

// testClaimKilled: a claimer killed between the phases of a claim leaves
// a pending affinity and no block. Check reports it; the node's next
// allocation finishes the claim (or withdraws it when the block went to
// another node meanwhile), and Check is clean again.
func testClaimKilled(e env) {
	t := e.t
	a := e.alloc(ipam.Config{})
	mustPool(t, a, "p", "10.16.0.0/16", 0)
	pending := func(node, cidr string) {
		t.Helper()
		key := e.keys.Affinity(node, netip.MustParsePrefix(cidr))
		v := mustJSON(ipam.Affinity{State: ipam.AffinityPending, Since: time.Now()})
		if _, err := e.store.Txn(ctxT(t), []ipam.Compare{{Key: key}}, []ipam.Op{ipam.Put(key, v)}); err != nil {
			t.Fatal(err)
		}
	}
	// n1 died after phase one of its first claim.
	pending("n1", "10.16.7.0/26")
	rep, err := a.Check(ctxT(t), ipam.CheckOptions{})
	if err != nil || len(rep.AffinityMismatches) != 1 {
		t.Fatalf("Check after a killed claim: %+v, %v", rep, err)
	}
	got, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h1", Node: "n1", Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.IPv4[0].Masked() != netip.MustParsePrefix("10.16.7.0/26") {
		t.Fatalf("allocation after the repair came from %s, want the claimed block 10.16.7.0/26", got.IPv4[0])
	}
	mustClean(t, a)

	// n1 died again, this time with a block already in use: the pending
	// claim is finished even though the next allocation needs no block.
	pending("n1", "10.16.9.0/26")
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h2", Node: "n1", Num4: 1}); err != nil {
		t.Fatal(err)
	}
	mustClean(t, a)

	// n2 died after phase one for a block that n3 then took: n2's next
	// allocation withdraws the claim and takes another block.
	pending("n2", "10.16.20.0/26")
	if _, err := a.AssignIP(ctxT(t), ipam.AssignIPArgs{Addr: netip.MustParseAddr("10.16.20.5"), Handle: "h3", Node: "n3"}); err != nil {
		t.Fatal(err)
	}
	got, err = a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "h4", Node: "n2", Num4: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.IPv4[0].Masked() == netip.MustParsePrefix("10.16.20.0/26") {
		t.Fatalf("n2 allocated %s from n3's block", got.IPv4[0])
	}
	if _, err := e.store.Get(ctxT(t), e.keys.Affinity("n2", netip.MustParsePrefix("10.16.20.0/26"))); !errors.Is(err, ipam.ErrNotFound) {
		t.Fatalf("n2's dead claim on n3's block: %v", err)
	}
	mustClean(t, a)
}
