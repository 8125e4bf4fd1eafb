package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/store/bolt"
)

// TestWorkloadEndpoints: with podnet-ipam in process, ADD records the
// pod's workload endpoint (container and addresses as the result has
// them; the MAC and host veth the result names follow from its ID); a second sandbox of the same pod takes the endpoint
// over; the first sandbox's DEL releases only its own address and leaves
// the new endpoint; the last DEL removes it.
func TestWorkloadEndpoints(t *testing.T) {
	e := newEnv(t, false)
	db := filepath.Join(t.TempDir(), "ipam.db")
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pnep","type":"podnet","mode":"routed",
		"ipam":{"type":"podnet-ipam","store":"bolt:%s","node":"node1","pools":[{"name":"p4","cidr":"10.108.0.0/16"}]}}`, db)
	const args = "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web"
	add := func(p *pod) {
		t.Helper()
		out, err := e.run("ADD", conf, p, args)
		if err != nil {
			t.Fatalf("ADD %s: %v", p.id, err)
		}
		if p.res, err = cni.ParseResult(out); err != nil {
			t.Fatal(err)
		}
	}
	del := func(p *pod) {
		t.Helper()
		if _, err := e.run("DEL", withPrev(conf, p.res), p, args); err != nil {
			t.Fatalf("DEL %s: %v", p.id, err)
		}
	}
	web := ipam.EndpointID{Node: "node1", Namespace: "ns", Pod: "web", IfName: "eth0"}
	inStore := func(fn func(a *ipam.Allocator)) {
		t.Helper()
		st, err := bolt.Open(context.Background(), bolt.Options{Path: db})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		fn(ipam.New(st, ipam.Config{}))
	}
	endpointIs := func(p *pod) {
		t.Helper()
		inStore(func(a *ipam.Allocator) {
			ep, err := a.GetEndpoint(context.Background(), web)
			if p == nil {
				if err == nil {
					t.Fatalf("endpoint left: %+v", ep)
				}
				return
			}
			// MAC and host link are not stored: they follow from the
			// container ID and the interface name.
			host, ctr := p.res.Interfaces[0], p.res.Interfaces[1]
			_, mac := dataplane.AttachmentMACs(ep.ContainerID, ep.IfName)
			if err != nil || ep.ContainerID != p.id || dataplane.HostVethName(ep.ContainerID, ep.IfName) != host.Name || mac.String() != ctr.Mac ||
				len(ep.IPs) != 1 || ep.IPs[0] != p.res.IPs[0].Address {
				t.Fatalf("endpoint %+v (%v), want the one of %s: %s", ep, err, p.id, p.res.Bytes())
			}
			rep, err := a.CheckWithEndpoints(context.Background())
			if err != nil || !rep.Clean() {
				t.Fatalf("CheckWithEndpoints: %+v %v", rep, err)
			}
		})
	}

	a, b := e.newPod("ep-a"), e.newPod("ep-b")
	add(a)
	endpointIs(a)
	add(b) // the pod's new sandbox, before the old one's DEL
	del(a)
	endpointIs(b)
	if _, err := e.run("CHECK", withPrev(conf, b.res), b, args); err != nil {
		t.Fatalf("CHECK of the new sandbox after the old one's DEL: %v", err)
	}
	del(b)
	endpointIs(nil)
	e.requireClean()
}
