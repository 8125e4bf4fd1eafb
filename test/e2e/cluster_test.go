package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/podnet/podnet/agent"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

const (
	// podPool6 is the IPv6 pool of the ConfigMap's dual-stack edit.
	podPool6 = "fd00:244::/64"
	leaseTTL = 2 * time.Second
)

// cluster is e2enet's cluster on etcd: etcd runs on the underlay's hub,
// every agent registers there and its pods take addresses from the
// cluster pools there.
type cluster struct {
	*e2enet.Cluster
	t       *testing.T
	store   string // etcd://...
	cli     *clientv3.Client
	ipamS   ipam.Store
	alloc   *ipam.Allocator
	network shippedNetwork
	pool4   netip.Prefix
	pool6   netip.Prefix // invalid unless dual-stack
}

// newCluster starts etcd on u and prepares the config every node's agent
// installs: the ConfigMap's conflist as shipped, with the dual-stack edit
// it documents when dualStack is set.
func newCluster(t *testing.T, u *e2enet.Underlay, mode agent.Mode, dualStack bool) *cluster {
	t.Helper()
	c := &cluster{Cluster: e2enet.New(t, u, mode), t: t}
	c.store = "etcd://" + startEtcd(t, u)
	conf := shippedConflist(t, c.store)
	if dualStack {
		var err error
		if conf, err = withIPv6Pool(conf, netip.MustParsePrefix(podPool6)); err != nil {
			t.Fatalf("the ConfigMap's dual-stack edit: %v", err)
		}
	}
	var err error
	if c.network, err = parseNetwork(conf); err != nil {
		t.Fatalf("%s: %v\n%s", shippedConfKey, err, conf)
	}
	c.pool4, c.pool6 = c.network.pools["default"], c.network.pools["default6"]
	if !c.pool4.Addr().Is4() || dualStack != c.pool6.IsValid() {
		t.Fatalf("%s: pools %v: want default (IPv4) and, dual-stack only, default6", shippedConfKey, c.network.pools)
	}
	c.Network = e2enet.Network{Name: c.network.name, Exclude: c.network.exclude}
	// The agent installs the file under its own name, as the DaemonSet
	// mounts the ConfigMap's key.
	c.NetConf = filepath.Join(c.Dir, shippedConfKey)
	if err := os.WriteFile(c.NetConf, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	c.AgentFlags = func(*e2enet.Node) []string { return []string{"--store", c.store, "--lease-ttl", leaseTTL.String()} }
	s, cli, err := agent.OpenStore(context.Background(), c.store, agent.StoreOptions{Dialer: e2enet.DialerIn(u.Hub.Path)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c.cli, c.ipamS = cli, s
	c.alloc = ipam.New(s, ipam.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, cidr := range c.network.pools {
		if err := c.alloc.PutPool(ctx, ipam.Pool{Name: name, CIDR: cidr}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// addNode creates node i on the underlay; its pods take addresses from
// the cluster pools.
func (c *cluster) addNode(i int) *e2enet.Node {
	c.t.Helper()
	pools := []netip.Prefix{c.pool4}
	if c.pool6.IsValid() {
		pools = append(pools, c.pool6)
	}
	return c.AddNode(i, pools...)
}

// blocksOf returns the blocks node's IPAM index routes to it.
func (c *cluster) blocksOf(node string) []netip.Prefix {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := c.ipamS.Get(ctx, ipam.Keys{}.Node(node))
	if errors.Is(err, ipam.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var x ipam.NodeIndex
	if err := json.Unmarshal(kv.Value, &x); err != nil {
		t.Fatal(err)
	}
	out, _ := x.Routes()
	return out
}

// waitRoutes waits until every node in on has (want) or lacks (!want) a
// route to every block of node of, and returns how long it took.
func (c *cluster) waitRoutes(of string, on []*e2enet.Node, want bool, timeout time.Duration) time.Duration {
	c.t.Helper()
	return c.WaitRoutes(of, c.blocksOf(of), on, want, timeout)
}

// checkTransport: from's route to a block of to goes the way mode says.
func (c *cluster) checkTransport(from, to *e2enet.Node, mode agent.Mode) {
	c.t.Helper()
	c.CheckTransport(from, to, c.blocksOf(to.Name), mode, c.nodeRecord(to.Name).LinkLocal6)
}

// nodeRecord reads a node's record from the store.
func (c *cluster) nodeRecord(name string) agent.NodeRecord {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := c.ipamS.Get(ctx, agent.NodeKey(ipam.DefaultPrefix, name))
	if err != nil {
		t.Fatal(err)
	}
	var rec agent.NodeRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		t.Fatal(err)
	}
	if !rec.LinkLocal6.IsLinkLocalUnicast() {
		t.Fatalf("node %s's record has no IPv6 link-local address: %s", name, kv.Value)
	}
	return rec
}
