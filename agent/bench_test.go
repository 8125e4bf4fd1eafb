package agent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/internal/nodetest"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/netns"
)

// benchNodes is the cluster size of the benchmarks: remote nodes, each
// with one confirmed block.
const benchNodes = 1000

// remoteAddr is remote node i's underlay address in 198.18.0.0/16; the
// benchmark node's underlay holds 198.18.255.254/16, so every remote node
// is on-link for host-gw.
func remoteAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte((i + 1) / 250), byte((i+1)%250 + 1)})
}

// benchBlock is block i, a /26 from 10.128.0.0 on.
func benchBlock(i int) netip.Prefix {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], 10<<24|128<<16+uint32(i)*64)
	return netip.PrefixFrom(netip.AddrFrom4(b), 26)
}

// populate writes n remote nodes, each with a confirmed block in its
// index and the block holding one address, the way the allocator leaves
// them.
func populate(b testing.TB, c *cluster, from, n int) {
	b.Helper()
	keys := ipam.Keys{}
	ctx := context.Background()
	put := func(key string, v []byte) {
		if _, err := c.store.Write(ctx, ipam.Write{Key: key, ModRevision: ipam.AnyRevision, Value: v}); err != nil {
			b.Fatal(err)
		}
	}
	for i := from; i < from+n; i++ {
		name := fmt.Sprintf("node-%04d", i)
		recJSON, _ := json.Marshal(rec(name, remoteAddr(i).String()))
		cidr := benchBlock(i)
		blk := ipam.NewBlock(cidr, ipam.HostAffinity(name))
		blk.AutoAllocate(1, ipam.Attributes{Handle: "net." + name, Node: name}, nil)
		blkJSON, _ := json.Marshal(blk)
		idxJSON, _ := json.Marshal(ipam.NodeIndex{Node: name, Blocks: []ipam.NodeBlock{{CIDR: cidr, State: ipam.AffinityConfirmed, Since: time.Now()}}})
		put(clusterstate.NodeKey(ipam.DefaultPrefix, name), recJSON)
		put(keys.Block(cidr), blkJSON)
		put(keys.Node(name), idxJSON)
	}
}

func flushOwned(b testing.TB, n *nodetest.Node) {
	b.Helper()
	owned, err := route.OwnedRoutes(n.H)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range owned {
		if err := n.H.RouteDel(&r); err != nil {
			b.Fatal(err)
		}
	}
	_ = n.H.LinkDel(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: route.VXLANDevice}})
}

// BenchmarkStartup is agent start to every route programmed, with
// benchNodes remote nodes' blocks in the store, from a namespace without
// any of the agent's routes (the first start on a node) and, for
// "restart", with all of them already in place.
func BenchmarkStartup(b *testing.B) {
	c := newCluster(b)
	populate(b, c, 0, benchNodes)
	for _, mode := range []route.Mode{route.ModeHostGW, route.ModeVXLAN} {
		for _, restart := range []bool{false, true} {
			name := string(mode) + "/fresh"
			if restart {
				name = string(mode) + "/restart"
			}
			b.Run(name, func(b *testing.B) {
				n := nodetest.New(b, pfx("198.18.255.254/16"))
				var worst time.Duration
				for b.Loop() {
					if !restart {
						b.StopTimer()
						flushOwned(b, n)
						b.StartTimer()
					}
					start := time.Now()
					r := c.startQuiet(b, n, "self", mode)
					took := time.Since(start)
					worst = max(worst, took)
					b.StopTimer()
					owned, err := route.OwnedRoutes(n.H)
					if err != nil || len(owned) != benchNodes {
						b.Fatalf("%d owned routes, want %d (%v)", len(owned), benchNodes, err)
					}
					r.halt(b)
					b.StartTimer()
				}
				b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms")
			})
		}
	}
}

// startQuiet starts an agent and returns once it is ready, which is
// after its first complete reconcile.
func (c *cluster) startQuiet(b testing.TB, n *nodetest.Node, name string, mode route.Mode) *runningAgent {
	a, err := New(Config{Node: name, Store: c.store, Etcd: c.cli, Mode: mode, UnderlayInterface: "ul0",
		NetNS: n.Path, LeaseTTL: 10 * time.Second, Logger: testLogger(b, name)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{a: a, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	select {
	case <-a.ReadyC():
	case err := <-r.done:
		b.Fatalf("agent exited: %v", err)
	case <-time.After(60 * time.Second):
		b.Fatalf("agent not ready after 60s: %v", a.Ready())
	}
	return r
}

// BenchmarkAffinityToRoute is the time from a new block's affinity being
// confirmed in the store (the allocator's claim transaction) to its route
// existing on another node, with benchNodes remote nodes routed already.
// It reports p50, p99 and max; the route's arrival is observed through a
// netlink route subscription in the node's namespace, not by polling.
func BenchmarkAffinityToRoute(b *testing.B) {
	for _, mode := range []route.Mode{route.ModeHostGW, route.ModeVXLAN} {
		b.Run(string(mode), func(b *testing.B) {
			c := newCluster(b)
			populate(b, c, 0, benchNodes)
			n := nodetest.New(b, pfx("198.18.255.254/16"))
			r := c.startQuiet(b, n, "self", mode)
			defer r.halt(b)
			updates := make(chan netlink.RouteUpdate, 64)
			done := make(chan struct{})
			defer close(done)
			if err := netns.Do(n.Path, func() error { return netlink.RouteSubscribe(updates, done) }); err != nil {
				b.Fatal(err)
			}
			keys := ipam.Keys{}
			var lat []time.Duration
			i := benchNodes
			for b.Loop() {
				// A new block of an existing node, confirmed as the
				// allocator confirms it: the index's entry, written
				// after the block (which the agent does not watch).
				j := i % benchNodes
				node := fmt.Sprintf("node-%04d", j)
				cidr := benchBlock(i)
				i++
				blk := ipam.NewBlock(cidr, ipam.HostAffinity(node))
				blkJSON, _ := json.Marshal(blk)
				if _, err := c.store.Write(context.Background(), ipam.Write{Key: keys.Block(cidr), ModRevision: ipam.AnyRevision, Value: blkJSON}); err != nil {
					b.Fatal(err)
				}
				idxJSON, _ := json.Marshal(ipam.NodeIndex{Node: node, Blocks: []ipam.NodeBlock{
					{CIDR: benchBlock(j), State: ipam.AffinityConfirmed},
					{CIDR: cidr, State: ipam.AffinityConfirmed, Since: time.Now()}}})
				start := time.Now()
				if _, err := c.store.Write(context.Background(), ipam.Write{Key: keys.Node(node), ModRevision: ipam.AnyRevision, Value: idxJSON}); err != nil {
					b.Fatal(err)
				}
				waitRoute(b, updates, cidr)
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.5), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(pct(1), "max-ms")
		})
	}
}

func waitRoute(b testing.TB, updates <-chan netlink.RouteUpdate, dst netip.Prefix) {
	b.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				b.Fatal("route subscription closed")
			}
			if u.Type != unix.RTM_NEWROUTE || u.Dst == nil || u.Protocol != route.RouteProtocol {
				continue
			}
			if p, ok := netip.AddrFromSlice(u.Dst.IP); ok {
				ones, _ := u.Dst.Mask.Size()
				if netip.PrefixFrom(p.Unmap(), ones) == dst {
					return
				}
			}
		case <-timeout:
			b.Fatalf("no route to %s within 10s", dst)
		}
	}
}

func rec(name, addr string) clusterstate.NodeRecord {
	a := netip.MustParseAddr(addr)
	return clusterstate.NodeRecord{Name: name, Address: a, VTEPIP: a, VTEPMAC: clusterstate.VTEPMAC(name).String()}
}
