package interop

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/install"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/test/e2e/e2eetcd"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// dpPath is one data path the benchmark measures: traffic from a client
// namespace to a server address inside a server namespace, both made by
// the benchmark.
type dpPath struct {
	key  string // metric prefix
	name string // row of the table
	// base is the key of the path this one is compared against (the
	// veth floor or the underlay); empty for those two.
	base           string
	client, server string // namespace paths
	addr           netip.Addr
	// node is the name of the node namespace of a same-node path, and
	// clientAddr the client pod's address there.
	node       string
	clientAddr netip.Addr
}

// dpPathDef is a path the benchmark knows, and how to build it.
type dpPathDef struct {
	key, name, base string
	// group names the setup that makes the path: one cross-node
	// cluster gives both its underlay and its pod path.
	group string
}

// dpPaths are the rows of the table, in order. Paths of one group come
// from one setup.
var dpPaths = []dpPathDef{
	{key: "veth", name: "veth floor", group: "veth"},
	{key: "routed", name: "podnet routed, same node", base: "veth", group: "routed"},
	{key: "routed-noguard", name: "podnet routed, same node, source guard removed", base: "veth", group: "routed-noguard"},
	{key: "np-0", name: "podnet routed, policy table, no policy", base: "routed", group: "np-0"},
	{key: "np-100", name: "podnet routed, 100 policies select the server", base: "routed", group: "np-100"},
	{key: "np-1000", name: "podnet routed, 1,000 policies select the server", base: "routed", group: "np-1000"},
	{key: "np-10000", name: "podnet routed, 10,000 policies select the server", base: "routed", group: "np-10000"},
	{key: "np-100-flows", name: "podnet routed, 100 policies select the server, flow capture on", base: "np-100", group: "np-100-flows"},
	{key: "np-1000-flows", name: "podnet routed, 1,000 policies select the server, flow capture on", base: "np-1000", group: "np-1000-flows"},
	{key: "np-1000-cnp-100", name: "podnet routed, 100 Admin ClusterNetworkPolicies and 1,000 policies select the server", base: "routed", group: "np-1000-cnp-100"},
	{key: "bridge", name: "podnet bridge, same node", base: "veth", group: "bridge"},
	{key: "ref-ptp", name: "reference ptp + host-local, same node", base: "veth", group: "ref-ptp"},
	{key: "ref-bridge", name: "reference bridge + host-local, same node", base: "veth", group: "ref-bridge"},
	{key: "underlay", name: "underlay, node to node", group: "hostgw"},
	{key: "hostgw", name: "podnet host-gw, across nodes", base: "underlay", group: "hostgw"},
	{key: "vxlan", name: "podnet VXLAN, across nodes", base: "underlay", group: "vxlan"},
	{key: "wireguard-hostgw", name: "podnet host-gw + WireGuard (userspace), across nodes", base: "underlay", group: "wireguard-hostgw"},
	{key: "wireguard-vxlan", name: "podnet VXLAN + WireGuard (userspace), across nodes", base: "underlay", group: "wireguard-vxlan"},
}

// The same-node networks. podnet's are the conflist `podnet install`
// writes for one machine (podnet-ipam on bbolt in process, masquerade
// on, host ports declared), in either mode; the reference ones are the
// upstream plugins with masquerade on and the gateway a bridge cluster
// uses. Each has a pool of its own inside 10.244.0.0/16, though they
// live in separate namespaces, so that a table row's addresses tell
// which network they belong to.
const (
	refPtpConf = `{"cniVersion": "1.0.0", "name": "pnio-dp-ptp", "plugins": [
  {"type": "ptp", "ipMasq": true,
   "ipam": {"type": "host-local", "dataDir": "%DIR%/ipam",
            "ranges": [[{"subnet": "10.244.3.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}`
	refBridgeConf = `{"cniVersion": "1.0.0", "name": "pnio-dp-bridge", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "dataDir": "%DIR%/ipam",
            "ranges": [[{"subnet": "10.244.4.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}`
)

// buildPaths sets up the paths of want (keys) and returns them in the
// table's order. Everything it makes is removed in t.Cleanup.
func buildPaths(t testing.TB, want map[string]bool) []*dpPath {
	t.Helper()
	built := map[string]*dpPath{}
	done := map[string]bool{}
	for _, d := range dpPaths {
		if !want[d.key] || done[d.group] {
			continue
		}
		done[d.group] = true
		switch g := d.group; g {
		case "veth":
			built["veth"] = vethFloor(t)
		case "routed", "bridge":
			built[g] = sameNode(t, podnetConf(t, g))
		case "routed-noguard":
			// The source guard's cost: the same pods with the guard's
			// table deleted after their ADDs (their DELs must still
			// succeed without it).
			p := sameNode(t, podnetConf(t, "routed"))
			run(t, "ip", "netns", "exec", p.node, "nft", "delete", "table", "inet", dataplane.GuardTableName)
			built[g] = p
		case "np-0", "np-100", "np-1000", "np-10000":
			built[g] = policyPath(t, map[string]int{"np-0": 0, "np-100": 100, "np-1000": 1000, "np-10000": 10000}[g], 0)
		case "np-100-flows", "np-1000-flows":
			built[g] = flowsPath(t, map[string]int{"np-100-flows": 100, "np-1000-flows": 1000}[g])
		case "np-1000-cnp-100":
			built[g] = policyPath(t, 1000, 100)
		case "ref-ptp":
			built[g] = sameNode(t, fillConf(refPtpConf, "", "", t.TempDir()))
		case "ref-bridge":
			built[g] = sameNode(t, fillConf(refBridgeConf, "", "", t.TempDir()))
		case "hostgw":
			built["underlay"], built["hostgw"] = crossNode(t, route.ModeHostGW, false)
		case "vxlan":
			_, built["vxlan"] = crossNode(t, route.ModeVXLAN, false)
		case "wireguard-hostgw":
			_, built[g] = crossNode(t, route.ModeHostGW, true)
		case "wireguard-vxlan":
			_, built[g] = crossNode(t, route.ModeVXLAN, true)
		}
	}
	var out []*dpPath
	for _, d := range dpPaths {
		if p := built[d.key]; p != nil && want[d.key] {
			p.key, p.name, p.base = d.key, d.name, d.base
			out = append(out, p)
		}
	}
	for _, p := range out {
		waitReachable(t, p)
	}
	return out
}

// vethFloor is a veth pair between two fresh namespaces, nothing else:
// what a pod's traffic cannot beat on this kernel.
func vethFloor(t testing.TB) *dpPath {
	t.Helper()
	a, z := newNetNS(t), newNetNS(t)
	run(t, "ip", "-n", a.Name, "link", "add", "dp0", "type", "veth", "peer", "name", "dp1", "netns", z.Name)
	for _, side := range []struct {
		ns   netNS
		dev  string
		addr string
	}{{a, "dp0", "198.19.254.1/30"}, {z, "dp1", "198.19.254.2/30"}} {
		run(t, "ip", "-n", side.ns.Name, "addr", "add", side.addr, "dev", side.dev)
		run(t, "ip", "-n", side.ns.Name, "link", "set", side.dev, "up")
	}
	return &dpPath{client: a.Path, server: z.Path, addr: netip.MustParseAddr("198.19.254.2")}
}

// podnetConf is the conflist `podnet install` writes for one machine, in
// mode, with its bbolt store in a directory of the test's.
func podnetConf(t testing.TB, mode string) []byte {
	t.Helper()
	pool := map[string]string{"routed": "10.244.1.0/24", "bridge": "10.244.2.0/24"}[mode]
	conf, err := install.ConfList(install.Network{
		Name: "pnio-dp-" + mode, Mode: mode, Pools: []string{pool},
		Store: "bolt:" + filepath.Join(t.TempDir(), "ipam.db"), Node: "pnio-dp",
	})
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

// sameNode makes a node namespace (forwarding off, as on a fresh host:
// the plugins must turn it on) and two pods on it, wired by conf's
// plugins through podnet's runtime, and returns the path from the first
// pod to the second. DEL of both runs in t.Cleanup, before their
// namespaces go.
func sameNode(t testing.TB, conf []byte) *dpPath {
	t.Helper()
	name, path := testutil.NewNodeNetNS(t)
	node := netNS{Name: name, Path: path}
	r := newPodnetRunner([]string{podnetBinDir(t), upstreamBinDir(t)}, t.TempDir(), &node)
	var pods [2]netNS
	var addrs [2]netip.Addr
	for i := range pods {
		pods[i] = newNetNS(t)
		// An empty portMappings: the pod has no host ports, so podnet's DEL
		// has nothing to sweep and takes no host-wide lock file.
		a := attachment{ContainerID: uniqueName(t, "pnio-dp-"), NetNS: pods[i].Path, IfName: "eth0",
			CapArgs: map[string]any{"portMappings": []any{}}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := r.add(ctx, conf, a)
		cancel()
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := r.del(ctx, conf, a); err != nil {
				t.Errorf("DEL %s: %v", a.ContainerID, err)
			}
		})
		addrs[i] = netip.MustParseAddr(podAddr(t, res))
	}
	return &dpPath{client: pods[0].Path, server: pods[1].Path, addr: addrs[1], node: name, clientAddr: addrs[0]}
}

// agentDefaults are the agent's own GC settings, which the DaemonSet
// leaves alone. e2enet runs GC every 250 ms so that its tests see it
// work; that would add store reads to every measurement. The agent's
// flags are parsed in order, so these, given last, are the ones used.
var agentDefaults = []string{"--gc-interval=5m", "--gc-grace=1m"}

// crossNode is two nodes of e2enet on one L2 segment with etcd and a
// real `podnet agent --mode mode` each, installing the etcd variant's
// conflist as shipped, and a pod on each; with encrypt, the agents run
// --encryption=wireguard (wireguard-go in the agent where the kernel has
// no WireGuard). It returns the underlay path (node 1 to node 2's
// underlay address) and the pod path (pod on node 1 to pod on node 2).
func crossNode(t testing.TB, mode route.Mode, encrypt bool) (underlay, pods *dpPath) {
	t.Helper()
	c := e2eetcd.New(t, e2enet.NewSwitch(t), mode, e2eetcd.Options{})
	if encrypt {
		c.WithWireGuard()
	}
	var nodes []*e2enet.Node
	for i := 1; i <= 2; i++ {
		n := c.AddNode(i, c.Pool4)
		c.StartAgent(n, agentDefaults...)
		nodes = append(nodes, n)
	}
	a, z := c.AddPod(nodes[0]), c.AddPod(nodes[1])
	for i, n := range nodes {
		c.WaitBlockRoutes(n.Name, e2enet.Without(nodes, n), true, 30*time.Second)
		switch {
		case encrypt:
			// Measured only once the pod's traffic goes through podnet.wg
			// both ways, never in the clear.
			c.WaitEncryptedRoutes(n, nodes[1-i], 30*time.Second)
		case mode == route.ModeVXLAN:
			c.WaitVXLANPeer(n, []*e2enet.Node{nodes[1-i]}, true, 30*time.Second)
		}
	}
	if !encrypt {
		// The pod's traffic must take the mode's way: via the peer's
		// underlay address, or over the VXLAN device.
		c.CheckTransport(nodes[0], nodes[1], c.BlocksOf(nodes[1].Name), mode, netip.Addr{})
	}
	return &dpPath{client: nodes[0].NS.Path, server: nodes[1].NS.Path, addr: nodes[1].Addr},
		&dpPath{client: a.NS, server: z.NS, addr: z.IP}
}
