package ipamcni

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/ipam"
)

var webArgs = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", "web"}}

func sandbox(cid string) PodInterface {
	return PodInterface{ContainerID: cid, IfName: "eth0", Args: webArgs}
}

// TestEndpointLifecycle: ADD records the pod's endpoint in its one
// write (the block's); a second sandbox of the pod replaces it; the first
// sandbox's DEL, after or before the second ADD, releases only its own
// addresses; the last DEL removes the endpoint.
func TestEndpointLifecycle(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ctx := context.Background()
	p := open(t, conf(t, db, ""), webArgs)
	a := p.Allocator()
	web := ipam.EndpointID{Node: "n1", Namespace: "ns", Pod: "web", IfName: "eth0"}
	endpointIs := func(cid string, res *cni.Result) {
		t.Helper()
		ep, err := a.GetEndpoint(ctx, web)
		if cid == "" {
			if err == nil {
				t.Fatalf("endpoint %+v left", ep)
			}
			return
		}
		if err != nil || ep.ContainerID != cid || ep.Network != "net1" || ep.Handle != "net1."+cid || len(ep.IPs) != len(res.IPs) {
			t.Fatalf("endpoint %+v (%v), want container %s with %s", ep, err, cid, res.Bytes())
		}
		for i, ip := range res.IPs {
			if ep.IPs[i] != ip.Address {
				t.Fatalf("endpoint IPs %v, result %s", ep.IPs, res.Bytes())
			}
		}
	}
	clean := func(leaked int) {
		t.Helper()
		rep, err := a.CheckWithEndpoints(ctx)
		if err != nil || len(rep.Leaked) != leaked {
			t.Fatalf("CheckWithEndpoints: %+v %v; want %d leaked", rep, err, leaked)
		}
		rep.Leaked = nil
		if !rep.Clean() {
			t.Fatalf("CheckWithEndpoints: %+v", rep)
		}
	}

	r1, err := p.AddAttachment(ctx, sandbox("c1"))
	if err != nil {
		t.Fatal(err)
	}
	endpointIs("c1", r1)
	// Steady state: another pod's ADD, endpoint included, is one write
	// per family (v4 and v6 blocks).
	before := a.Writes()
	if _, err := p.AddAttachment(ctx, PodInterface{ContainerID: "other", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if n := a.Writes() - before; n != 2 {
		t.Errorf("dual-stack ADD with endpoint: %d writes, want 2", n)
	}
	// No K8S_POD_* args: the pod is "_/<container ID>".
	if ep, err := a.GetEndpoint(ctx, ipam.EndpointID{Node: "n1", Namespace: "_", Pod: "other", IfName: "eth0"}); err != nil || ep.ContainerID != "other" {
		t.Fatalf("endpoint without pod args: %+v %v", ep, err)
	}
	clean(0)

	// New sandbox first, then the old one's DEL.
	r2, err := p.AddAttachment(ctx, sandbox("c2"))
	if err != nil {
		t.Fatal(err)
	}
	endpointIs("c2", r2)
	clean(2) // c1's v4 and v6
	if err := p.DelAttachment(ctx, sandbox("c1")); err != nil {
		t.Fatal(err)
	}
	endpointIs("c2", r2)
	if err := p.Check(ctx, "c2", r2); err != nil {
		t.Fatalf("new sandbox after the old one's DEL: %v", err)
	}
	clean(0)

	// The old sandbox's DEL first, then the new ADD.
	if err := p.DelAttachment(ctx, sandbox("c2")); err != nil {
		t.Fatal(err)
	}
	endpointIs("", nil)
	r3, err := p.AddAttachment(ctx, sandbox("c3"))
	if err != nil {
		t.Fatal(err)
	}
	endpointIs("c3", r3)
	for range 2 {
		if err := p.DelAttachment(ctx, sandbox("c3")); err != nil {
			t.Fatal(err)
		}
	}
	endpointIs("", nil)
	if err := p.DelAttachment(ctx, PodInterface{ContainerID: "other", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	clean(0)
	if eps, err := a.Endpoints(ctx, ""); err != nil || len(eps) != 0 {
		t.Fatalf("endpoints left: %+v %v", eps, err)
	}
}

// TestRequestedIPEndpoint: addresses asked for by the runtime are assigned
// one by one, each recording the endpoint.
func TestRequestedIPEndpoint(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ctx := context.Background()
	args := append([][2]string{{"IP", "10.105.7.7"}}, webArgs...)
	p := open(t, conf(t, db, ""), args)
	at := sandbox("c1")
	at.Args = args
	res, err := p.AddAttachment(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := p.Allocator().GetEndpoint(ctx, ipam.EndpointID{Node: "n1", Namespace: "ns", Pod: "web", IfName: "eth0"})
	if err != nil || len(ep.IPs) != 1 || ep.IPs[0] != res.IPs[0].Address {
		t.Fatalf("endpoint %+v %v, result %s", ep, err, res.Bytes())
	}
	if rep, err := p.Allocator().CheckWithEndpoints(ctx); err != nil || !rep.Clean() {
		t.Fatalf("%+v %v", rep, err)
	}
}

// TestDelWithoutPodArgs: a DEL that lacks the K8S_POD_* arguments its ADD
// had still removes the endpoint ADD recorded (it is the addresses'
// attributes), in the release's one write per family, and leaves the
// store clean.
func TestDelWithoutPodArgs(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ipam.db")
	ctx := context.Background()
	p := open(t, conf(t, db, ""), webArgs)
	a := p.Allocator()
	if _, err := p.AddAttachment(ctx, sandbox("c7")); err != nil {
		t.Fatal(err)
	}
	web := ipam.EndpointID{Node: "n1", Namespace: "ns", Pod: "web", IfName: "eth0"}
	if _, err := a.GetEndpoint(ctx, web); err != nil {
		t.Fatal(err)
	}
	before := a.Writes()
	if err := p.DelAttachment(ctx, PodInterface{ContainerID: "c7", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if n := a.Writes() - before; n != 2 {
		t.Errorf("dual-stack DEL: %d writes, want 2", n)
	}
	if ep, err := a.GetEndpoint(ctx, web); err == nil {
		t.Fatalf("endpoint left by a DEL without pod arguments: %+v", ep)
	}
	rep, err := a.CheckWithEndpoints(ctx)
	if err != nil || !rep.Clean() {
		t.Fatalf("CheckWithEndpoints: %+v %v", rep, err)
	}
}
