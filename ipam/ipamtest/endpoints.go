package ipamtest

import (
	"net/netip"
	"slices"
	"time"

	"github.com/podnet/podnet/ipam"
)

func endpointID(node, pod string) ipam.EndpointID {
	return ipam.EndpointID{Node: node, Namespace: "ns", Pod: pod, IfName: "eth0"}
}

// testEndpoints: the endpoint is derived from the allocation's attributes,
// so an ADD with its endpoint is still one write, a repeated ADD writes
// nothing, a new sandbox of the pod replaces the endpoint, and the old
// sandbox's DEL (before or after the new ADD) releases only its own
// addresses. Check with endpoints reports exactly the replaced sandbox's
// addresses as leaked.
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
	x.takenOverBehindTheBack()
	x.badArguments()
}

// endpointRun is testEndpoints' allocator with its ADD, DEL and checks,
// all for the pod n1/ns/web/eth0.
type endpointRun struct {
	env
	a *ipam.Allocator
}

// add is an ADD of container cid: one write, address and endpoint.
func (x *endpointRun) add(cid string) netip.Prefix {
	t := x.t
	t.Helper()
	id := endpointID("n1", "web")
	before := x.a.Writes()
	got, err := x.a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net." + cid, Node: "n1", Num4: 1, Endpoint: &id})
	if err != nil {
		t.Fatal(err)
	}
	if n := x.a.Writes() - before; n != 1 {
		t.Fatalf("ADD of %s with its endpoint took %d writes, want 1", cid, n)
	}
	return got.IPv4[0]
}

// del is a DEL of container cid: at most one write.
func (x *endpointRun) del(cid string) {
	t := x.t
	t.Helper()
	before := x.a.Writes()
	if err := x.a.ReleaseByHandle(ctxT(t), "n1", "net."+cid); err != nil {
		t.Fatal(err)
	}
	if n := x.a.Writes() - before; n > 1 {
		t.Fatalf("DEL of %s took %d writes, want at most 1", cid, n)
	}
}

// endpointIs checks that the endpoint names container cid, or that
// there is none when cid is empty.
func (x *endpointRun) endpointIs(cid string) ipam.Endpoint {
	t := x.t
	t.Helper()
	ep, err := x.a.GetEndpoint(ctxT(t), endpointID("n1", "web"))
	if cid == "" {
		if ipam.KindOf(err) != ipam.KindNotFound {
			t.Fatalf("endpoint after the last DEL: %+v, %v", ep, err)
		}
		return ep
	}
	if err != nil || ep.ContainerID != cid || ep.Handle != "net."+cid || ep.Network != "net" || ep.Created.IsZero() {
		t.Fatalf("endpoint = %+v, %v; want container %s", ep, err, cid)
	}
	return ep
}

// leaked checks that Check and CheckNode with endpoints find exactly the
// handles want leaked, and nothing else.
func (x *endpointRun) leaked(want ...string) {
	t := x.t
	t.Helper()
	for _, node := range []string{"", "n1"} {
		rep, err := x.a.CheckWithEndpoints(ctxT(t))
		if node != "" {
			rep, err = x.a.CheckNode(ctxT(t), node, ipam.CheckOptions{Endpoints: true})
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range rep.Leaked {
			got = append(got, l.Handle)
		}
		rep.Leaked = nil
		if !slices.Equal(got, want) || !rep.Clean() {
			t.Fatalf("check of node %q with endpoints: leaked %v, want %v; report %+v", node, got, want, rep)
		}
	}
}

// firstAdd: the endpoint holds the address; a repeated ADD gives the
// same address and writes nothing.
func (x *endpointRun) firstAdd() netip.Prefix {
	t, a := x.t, x.a
	c1 := x.add("c1")
	ep := x.endpointIs("c1")
	if !slices.Equal(ep.IPs, []netip.Prefix{netip.PrefixFrom(c1.Addr(), 32)}) {
		t.Fatalf("endpoint = %+v; want %s", ep, c1.Addr())
	}
	x.leaked()
	id := endpointID("n1", "web")
	before := a.Writes()
	again, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c1", Node: "n1", Num4: 1, Endpoint: &id})
	if err != nil || again.IPv4[0] != c1 || a.Writes() != before {
		t.Fatalf("repeated ADD: %+v, %v, %d writes", again, err, a.Writes()-before)
	}
	if ep2 := x.endpointIs("c1"); !ep2.Created.Equal(ep.Created) {
		t.Fatalf("repeated ADD changed the endpoint: %v -> %v", ep.Created, ep2.Created)
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
	if held, _ := x.a.IPsByHandle(ctxT(t), "n1", "net.c2"); !slices.Equal(held, []netip.Prefix{c2}) {
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
	if eps, err := x.a.Endpoints(ctxT(x.t), "n1"); err != nil || len(eps) != 0 {
		x.t.Fatalf("endpoints after the last DEL: %+v, %v", eps, err)
	}
}

// takenOverBehindTheBack: an allocation's attributes rewritten behind the
// allocator's back so that another handle is the endpoint's newest leaves
// a leak that Check reports and GC releases.
func (x *endpointRun) takenOverBehindTheBack() {
	t := x.t
	c4 := x.add("c4")
	x.editBlock(c4.Masked(), func(b *ipam.Block) {
		for i, at := range b.Attributes {
			if at.Handle == "plain" {
				b.Attributes[i].Extra = map[string]string{ipam.AttrEndpoint: endpointID("n1", "web").String(),
					ipam.AttrCreated: time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)}
			}
		}
	})
	if ep, err := x.a.GetEndpoint(ctxT(t), endpointID("n1", "web")); err != nil || ep.Handle != "plain" {
		t.Fatalf("endpoint after the takeover: %+v, %v", ep, err)
	}
	x.leaked("net.c4")
	if rel, err := x.a.GC(ctxT(t), "n1", []string{"plain"}); err != nil || len(rel) != 1 || rel[0] != c4.Addr() {
		t.Fatalf("GC = %v, %v; want %s", rel, err, c4.Addr())
	}
	x.leaked()
}

// badArguments: endpoint arguments are checked.
func (x *endpointRun) badArguments() {
	t, a := x.t, x.a
	bad := endpointID("n2", "web")
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c5", Node: "n1", Num4: 1, Endpoint: &bad}); ipam.KindOf(err) != ipam.KindInvalid {
		t.Fatalf("endpoint of another node: %v", err)
	}
	bad = endpointID("n1", "we/b")
	if _, err := a.AutoAssign(ctxT(t), ipam.AutoAssignArgs{Handle: "net.c5", Node: "n1", Num4: 1, Endpoint: &bad}); ipam.KindOf(err) != ipam.KindInvalid {
		t.Fatalf("pod name with '/': %v", err)
	}
}
