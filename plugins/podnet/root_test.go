package main

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/netns"
)

// TestConnectivity proves traffic, not configuration: in each mode,
// two pods reach each other over IPv4 and IPv6, the host reaches them
// and they reach the host, and traffic to the uplink leaves
// masqueraded as the node's address. Then a repeated ADD changes
// nothing, CHECK passes and notices damage, and DEL leaves nothing.
func TestConnectivity(t *testing.T) {
	for _, mode := range []string{
		`"mode":"routed","mtu":1400,"ipMasq":true`,
		`"mode":"bridge","bridge":"pnbr0","hairpinMode":true,"promiscMode":true,"mtu":1400,"ipMasq":true`,
	} {
		name := strings.Split(mode, `"`)[3]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, false)
			conf := e.conf(mode)
			a, b := e.newPod("pod-a"), e.newPod("pod-b")
			e.add(conf, a)
			e.add(conf, b)
			t.Logf("pod a: %s", a.res.Bytes())

			for _, v4 := range []bool{true, false} {
				if src, err := echo(t, a.ns, b.ns, b.addr(v4)); err != nil || src != a.addr(v4) {
					t.Errorf("pod a -> pod b %s: seen from %s, %v", b.addr(v4), src, err)
				}
				if _, err := echo(t, e.host, a.ns, a.addr(v4)); err != nil {
					t.Errorf("host -> pod a %s: %v", a.addr(v4), err)
				}
			}
			if _, err := echo(t, a.ns, e.host, netip.MustParseAddr(nodeAddr)); err != nil {
				t.Errorf("pod a -> host %s: %v", nodeAddr, err)
			}
			for up, node := range map[string]string{uplinkAddr: nodeAddr, uplinkAddr6: nodeAddr6} {
				if src, err := echo(t, b.ns, e.uplink, netip.MustParseAddr(up)); err != nil || src.String() != node {
					t.Errorf("pod b -> uplink %s: seen from %s (want the node's %s), %v", up, src, node, err)
				}
			}

			// A repeated ADD returns the same result and changes nothing.
			before := e.leftovers()
			again, err := e.run("ADD", conf, a)
			if err != nil {
				t.Fatalf("repeated ADD: %v", err)
			}
			if got, want := strings.TrimSpace(string(again)), string(a.res.Bytes()); got != want {
				t.Errorf("repeated ADD result\n got %s\nwant %s", got, want)
			}
			if after := e.leftovers(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("repeated ADD changed the host: %+v -> %+v", before, after)
			}
			if n := e.ipamCalls("ADD", a.id); n != 1 {
				t.Errorf("IPAM ADD called %d times for pod a", n)
			}

			// CHECK passes, then reports what was broken.
			if _, err := e.run("CHECK", withPrev(conf, a.res), a); err != nil {
				t.Fatalf("CHECK: %v", err)
			}
			err = onLink(a.ns, "eth0", func(h *netlink.Handle, l netlink.Link) error {
				return h.AddrDel(l, &netlink.Addr{IPNet: dataplane.IPNet(a.res.IPs[0].Address)})
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.run("CHECK", withPrev(conf, a.res), a)
			if err == nil || !strings.Contains(err.Error(), "lacks address "+a.res.IPs[0].Address.String()) {
				t.Fatalf("CHECK after removing an address: %v", err)
			}

			for _, p := range []*pod{a, b} {
				e.del(conf, p)
				if n := e.ipamCalls("DEL", p.id); n != 1 {
					t.Errorf("IPAM DEL called %d times for %s", n, p.id)
				}
			}
			e.requireClean()
			// DEL again: nothing to do, and still no error.
			e.del(conf, a)
		})
	}
}

// TestDelWithoutNamespaceOrPrevResult: the runtime lost everything but
// the container ID.
func TestDelWithoutNamespaceOrPrevResult(t *testing.T) {
	for _, mode := range []string{`"ipMasq":true`, `"mode":"bridge","bridge":"pnbr0","ipMasq":true`} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, false)
			conf := e.conf(mode)
			p := e.newPod("gone")
			e.add(conf, p)
			if err := netns.DeleteNamed(strings.TrimPrefix(p.ns, netns.RunDir+"/")); err != nil {
				t.Fatal(err)
			}
			p.res = nil
			e.del(conf, p) // CNI_NETNS points at nothing
			p.ns = ""
			e.del(conf, p) // no CNI_NETNS at all
			e.requireClean()
			if n := e.ipamCalls("DEL", p.id); n != 2 {
				t.Errorf("IPAM DEL called %d times for two DELs", n)
			}
		})
	}
}

func TestIPAMFailure(t *testing.T) {
	e := newEnv(t, false)
	conf := strings.Replace(e.conf(`"ipMasq":true`), `"ranges"`, `"fail":{"ADD":{"code":11,"msg":"pool exhausted"}},"ranges"`, 1)
	p := e.newPod("p")
	_, err := e.run("ADD", conf, p)
	if !cni.IsCode(err, cni.CodeTryAgainLater) || !strings.Contains(err.Error(), "pool exhausted") {
		t.Fatalf("ADD with a failing IPAM: %v", err)
	}
	e.requireClean()
}

// TestDuplicateIP: the pod's address is already routed elsewhere on the
// host. ADD fails with a conflict naming the interface, and releases
// the address and removes what it created.
func TestDuplicateIP(t *testing.T) {
	e := newEnv(t, false)
	conf := e.conf(`"ipMasq":true`)
	err := onLink(e.host, "up0", func(h *netlink.Handle, l netlink.Link) error {
		// The test IPAM hands out .2 first.
		return dataplane.AddRoute(h, l.Attrs().Index, dataplane.LinkRoute{Dst: netip.MustParsePrefix("10.100.0.2/32"), LinkScope: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	p := e.newPod("dup")
	_, err = e.run("ADD", conf, p)
	if !cni.IsCode(err, cni.CodeAddressConflict) || !strings.Contains(err.Error(), "10.100.0.2 is already routed to up0") {
		t.Fatalf("ADD of a duplicate IP: %v", err)
	}
	s := e.leftovers()
	if len(s.links) != 0 || s.elems != 0 || len(s.routes) != 1 || e.allocations() != 0 {
		t.Fatalf("after the failed ADD: %+v, %d allocations", s, e.allocations())
	}
	if n := e.ipamCalls("DEL", p.id); n != 1 {
		t.Errorf("IPAM DEL called %d times by the rollback", n)
	}
}

// TestBridgeNameTaken: the configured bridge's name belongs to a link
// that is not a bridge. ADD fails with code 7 naming the field, leaves the
// link alone, and releases the address.
func TestBridgeNameTaken(t *testing.T) {
	e := newEnv(t, false)
	err := netns.Do(e.host, func() error {
		h, err := dataplane.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		return h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "brtaken"}, PeerName: "brtaken1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	conf := e.conf(`"mode":"bridge","bridge":"brtaken"`)
	p := e.newPod("taken")
	_, err = e.run("ADD", conf, p)
	if !cni.IsCode(err, cni.CodeInvalidNetworkConfig) || !strings.Contains(err.Error(), "config: bridge: brtaken exists and is a veth, not a bridge") {
		t.Fatalf("ADD onto a veth named as the bridge: %v", err)
	}
	if err := onLink(e.host, "brtaken", func(*netlink.Handle, netlink.Link) error { return nil }); err != nil {
		t.Fatalf("the veth: %v", err)
	}
	e.requireClean()
}

// TestKilledDuringAdd kills the plugin at each step of ADD (no rollback
// can run), then runs the runtime's DEL: nothing may remain.
func TestKilledDuringAdd(t *testing.T) {
	for _, mode := range []string{`"ipMasq":true`, `"mode":"bridge","bridge":"pnbr0","ipMasq":true`} {
		for _, step := range addSteps {
			t.Run(strings.Split(mode+`"routed"`, `"`)[3]+"/"+step, func(t *testing.T) {
				e := newEnv(t, true)
				conf := e.conf(mode)
				p := e.newPod("killed")
				if _, err := e.run("ADD", conf, p, "PODNET_FAULT_AT="+step); err == nil {
					t.Fatal("ADD survived its kill")
				}
				// A retried ADD cleans up after the dead one and succeeds.
				e.add(conf, p)
				e.del(conf, p)
				e.requireClean()

				q := e.newPod("killed-2")
				if _, err := e.run("ADD", conf, q, "PODNET_FAULT_AT="+step); err == nil {
					t.Fatal("ADD survived its kill")
				}
				e.del(conf, q)
				e.requireClean()
			})
		}
	}
}

// TestNetnsVanishesDuringAdd removes the pod's namespace at each step
// of ADD, as a runtime tearing down the sandbox would. Whatever ADD
// reports, DEL afterwards leaves nothing.
func TestNetnsVanishesDuringAdd(t *testing.T) {
	for _, step := range addSteps {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t, true)
			conf := e.conf(`"ipMasq":true`)
			p := e.newPod("vanishing")
			_, err := e.run("ADD", conf, p, "PODNET_FAULT_UNMOUNT_AT="+step)
			t.Logf("ADD: %v", err)
			e.del(conf, p)
			e.requireClean()
		})
	}
}

func TestGCAndStatus(t *testing.T) {
	e := newEnv(t, false)
	conf := e.conf(`"ipMasq":true`)
	keep, drop := e.newPod("keep"), e.newPod("drop")
	e.add(conf, keep)
	e.add(conf, drop)
	gcConf := strings.Replace(conf, `"type":"podnet"`, `"type":"podnet","cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]`, 1)
	if _, err := e.run("GC", gcConf, nil); err != nil {
		t.Fatalf("GC: %v", err)
	}
	s := e.leftovers()
	if len(s.links) != 1 || s.links[0] != dataplane.HostVethName("keep", "eth0") || s.elems != 2 || len(s.routes) != 2 || e.allocations() != 1 {
		t.Fatalf("after GC: %+v, %d allocations", s, e.allocations())
	}
	if _, err := e.run("CHECK", withPrev(conf, keep.res), keep); err != nil {
		t.Fatalf("CHECK of the kept pod: %v", err)
	}
	if _, err := e.run("STATUS", conf, nil); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	bad := strings.Replace(conf, `"ranges"`, `"fail":{"STATUS":{"code":50,"msg":"store unreachable"}},"ranges"`, 1)
	if _, err := e.run("STATUS", bad, nil); !cni.IsCode(err, cni.CodePluginNotAvailable) {
		t.Fatalf("STATUS with a failing IPAM: %v", err)
	}
	e.del(conf, keep)
	e.requireClean()
}

// TestConcurrentPods runs ADDs and then DELs of several pods at once, as
// a node starting many pods does: they race to create the bridge, the
// nftables table, chain and sets. Every ADD succeeds, the pods reach
// each other, and the DELs leave nothing.
func TestConcurrentPods(t *testing.T) {
	for _, mode := range []string{`"ipMasq":true`, `"mode":"bridge","bridge":"pnbr0","ipMasq":true`} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, false)
			conf := e.conf(mode)
			pods := make([]*pod, 6)
			for i := range pods {
				pods[i] = e.newPod(fmt.Sprint("conc-", i))
			}
			parallel(t, pods, func(p *pod) error {
				out, err := e.run("ADD", conf, p)
				if err == nil {
					p.res, err = cni.ParseResult(out)
				}
				return err
			})
			for _, v4 := range []bool{true, false} {
				if _, err := echo(t, pods[0].ns, pods[5].ns, pods[5].addr(v4)); err != nil {
					t.Errorf("pod 0 -> pod 5: %v", err)
				}
			}
			parallel(t, pods, func(p *pod) error {
				_, err := e.run("DEL", withPrev(conf, p.res), p)
				return err
			})
			e.requireClean()
		})
	}
}

func parallel(t *testing.T, pods []*pod, fn func(*pod) error) {
	t.Helper()
	errs := make(chan error, len(pods))
	for _, p := range pods {
		go func() { errs <- fn(p) }()
	}
	for range pods {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckReports breaks a routed attachment in several ways at once
// and expects CHECK to name every one.
func TestCheckReports(t *testing.T) {
	e := newEnv(t, false)
	conf := e.conf(`"ipMasq":true`)
	p := e.newPod("checked")
	e.add(conf, p)
	host := dataplane.HostVethName(p.id, "eth0")
	err := netns.Do(e.host, func() error {
		m, err := dataplane.NewMasq()
		if err != nil {
			return err
		}
		defer m.Close()
		if err := m.RemovePod("testnet", []netip.Addr{p.addr(true)}); err != nil {
			return err
		}
		if err := dataplane.WriteSysctls([]dataplane.Sysctl{{Key: "net/ipv4/conf/" + host + "/proxy_arp", Value: "0"}}); err != nil {
			return err
		}
		h, err := dataplane.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		l, err := h.LinkByName(host)
		if err != nil {
			return err
		}
		return h.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dataplane.IPNet(dataplane.HostPrefix(p.addr(false)))})
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.run("CHECK", withPrev(conf, p.res), p)
	for _, want := range []string{
		p.addr(true).String() + " is not in the masquerade set",
		"proxy_arp is 0, want 1",
		"host has no route " + p.addr(false).String() + "/128",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CHECK error %v does not report %q", err, want)
		}
	}
	e.del(conf, p)
	e.requireClean()
}
