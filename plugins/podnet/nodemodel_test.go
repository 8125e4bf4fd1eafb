package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// shippedConf is the plugin configuration of the conflist `podnet
// install` writes, as a runtime hands it to the plugin: verbatim but for
// the store, at the version a runtime reading cniVersions picks.
func shippedConf(t *testing.T, n install.Network) string {
	t.Helper()
	if n.Store == "" {
		n.Store = "bolt:" + filepath.Join(t.TempDir(), "ipam.db")
	}
	list, err := install.ConfList(n)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Name    string                       `json:"name"`
		Plugins []map[string]json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(list, &doc); err != nil {
		t.Fatal(err)
	}
	p := doc.Plugins[0]
	p["name"], _ = json.Marshal(doc.Name)
	p["cniVersion"] = json.RawMessage(`"1.1.0"`)
	// The node name is the agent's to add; here the harness is one node.
	var ipam map[string]any
	_ = json.Unmarshal(p["ipam"], &ipam)
	ipam["node"] = "node1"
	p["ipam"], _ = json.Marshal(ipam)
	b, _ := json.Marshal(p)
	return string(b)
}

// forwarding reads the node's namespace-wide forwarding switches.
func (e *env) forwarding() (v4, v6 string) {
	e.t.Helper()
	err := netns.Do(e.host, func() (err error) {
		if v4, err = dataplane.ReadSysctl("net/ipv4/ip_forward"); err != nil {
			return err
		}
		v6, err = dataplane.ReadSysctl("net/ipv6/conf/all/forwarding")
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return v4, v6
}

// TestNodeModel is Kubernetes' network model on a fresh node, with the
// config `podnet install` writes: forwarding starts off and the plugin
// turns it on; a pod reaches an address outside the pool masqueraded as
// the node, and another node's pod address (in the pool, behind the
// uplink, as the agent routes it) without NAT; after the pods' DEL
// nothing of them is left in the nftables sets, and the exclusions hold
// only the pool, however many pods came and went.
func TestNodeModel(t *testing.T) {
	for _, mode := range []string{"routed", "bridge"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, false)
			if v4, v6 := e.forwarding(); v4 != "0" || v6 != "0" {
				t.Fatalf("the node starts with forwarding %s/%s, want 0/0 as on a fresh host", v4, v6)
			}
			conf := shippedConf(t, install.Network{Mode: mode, Pools: []string{"10.244.0.0/16", "fd00:244::/64"}})
			// Another node's pod, as the uplink's address, routed there
			// the way the agent routes another node's block.
			remote4, remote6 := netip.MustParseAddr("10.244.200.9"), netip.MustParseAddr("fd00:244::c8:9")
			e.remotePod(remote4, remote6)

			var pods []*pod
			for i := range 5 {
				p := e.newPod(fmt.Sprintf("model-%d", i))
				e.add(conf, p)
				pods = append(pods, p)
			}
			if v4, v6 := e.forwarding(); v4 != "1" || v6 != "1" {
				t.Errorf("after ADD the node's forwarding is %s/%s, want 1/1", v4, v6)
			}
			p := pods[0]
			// Bridge mode gives a pod the pool's length, so another node's
			// pods are on its link: bridge mode is a single node's (see
			// docs/architecture.md), and only routed mode is asked to
			// reach them.
			for _, dst := range []netip.Addr{remote4, remote6} {
				if mode == "bridge" {
					break
				}
				if src, err := echo(t, p.ns, e.uplink, dst); err != nil || src != p.addr(dst.Is4()) {
					t.Errorf("pod -> another node's pod %s: seen from %s, want the pod's own %s (no NAT between pods); %v", dst, src, p.addr(dst.Is4()), err)
				}
			}
			for up, node := range map[string]string{uplinkAddr: nodeAddr, uplinkAddr6: nodeAddr6} {
				if src, err := echo(t, p.ns, e.uplink, netip.MustParseAddr(up)); err != nil || src.String() != node {
					t.Errorf("pod -> outside %s: seen from %s, want the node's %s (masqueraded); %v", up, src, node, err)
				}
			}
			if got, want := e.exclusions("podnet"), []string{"10.244.0.0/16", "224.0.0.0/4", "fd00:244::/64", "ff00::/8"}; !slices.Equal(got, want) {
				t.Errorf("exclusion sets %v, want the pools and multicast %v", got, want)
			}
			for _, p := range pods {
				e.del(conf, p)
			}
			if got, want := e.exclusions("podnet"), []string{"10.244.0.0/16", "224.0.0.0/4", "fd00:244::/64", "ff00::/8"}; !slices.Equal(got, want) {
				t.Errorf("exclusion sets after DEL %v, want %v", got, want)
			}
			if n := e.masqMembers("podnet"); n != 0 {
				t.Errorf("%d pod entries left in the masquerade sets", n)
			}
		})
	}
}

// remotePod gives the uplink namespace a pod address of another node and
// routes it there from the node, as the agent's host-gw route would.
func (e *env) remotePod(a4, a6 netip.Addr) {
	e.t.Helper()
	err := onLink(e.uplink, "up0", func(h *netlink.Handle, l netlink.Link) error {
		if err := dataplane.AddAddr(h, l.Attrs().Index, dataplane.HostPrefix(a4)); err != nil {
			return err
		}
		if err := dataplane.AddAddr(h, l.Attrs().Index, dataplane.HostPrefix(a6)); err != nil {
			return err
		}
		// The other node's way back to this node's pods.
		if err := dataplane.AddRoute(h, l.Attrs().Index, dataplane.LinkRoute{Dst: netip.PrefixFrom(a4, 16).Masked(), GW: netip.MustParseAddr(nodeAddr)}); err != nil {
			return err
		}
		return dataplane.AddRoute(h, l.Attrs().Index, dataplane.LinkRoute{Dst: netip.PrefixFrom(a6, 64).Masked(), GW: netip.MustParseAddr(nodeAddr6)})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	err = onLink(e.host, "up0", func(h *netlink.Handle, l netlink.Link) error {
		if err := dataplane.AddRoute(h, l.Attrs().Index, dataplane.LinkRoute{Dst: netip.PrefixFrom(a4, 26).Masked(), GW: netip.MustParseAddr(uplinkAddr)}); err != nil {
			return err
		}
		return dataplane.AddRoute(h, l.Attrs().Index, dataplane.LinkRoute{Dst: netip.PrefixFrom(a6, 122).Masked(), GW: netip.MustParseAddr(uplinkAddr6)})
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// exclusions lists the network's exclusion sets on the node, each
// interval as the prefix it is (or first-end when it is none).
func (e *env) exclusions(network string) []string {
	e.t.Helper()
	var out []string
	err := netns.Do(e.host, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		defer c.CloseLasting()
		t := &nftables.Table{Name: dataplane.MasqTableName, Family: nftables.TableFamilyINet}
		for _, name := range []string{"nomasq4-" + network, "nomasq6-" + network} {
			s, err := c.GetSetByName(t, name)
			if err != nil {
				return err
			}
			elems, err := c.GetSetElements(s)
			if err != nil {
				return err
			}
			out = append(out, testutil.SetContents(s, elems)...)
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) masqMembers(network string) int {
	e.t.Helper()
	n := 0
	err := netns.Do(e.host, func() error {
		m, err := dataplane.NewMasq()
		if err != nil {
			return err
		}
		defer m.Close()
		members, err := m.Members(network)
		n = len(members)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}
