package e2eetcd

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

	"github.com/podnet/podnet/agent/clusterstate"
	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/agent/source/kvstore"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// PodPool6 is the IPv6 pool of the ConfigMap's dual-stack edit.
const PodPool6 = "fd00:244::/64"

// Options are what callers choose of a cluster; the rest is as shipped.
type Options struct {
	// DualStack applies the ConfigMap's documented dual-stack edit.
	DualStack bool
	// LeaseTTL is the agents' --lease-ttl; zero leaves the agent's
	// default.
	LeaseTTL time.Duration
}

// Cluster is e2enet's cluster on etcd: etcd runs on the underlay's hub,
// every agent registers there and its pods take addresses from the
// cluster pools there.
type Cluster struct {
	*e2enet.Cluster
	// Store is the agents' and the plugins' store, etcd://HOST:PORT.
	Store string
	// Client, IPAM and Alloc reach the same etcd from the test, through
	// the hub's namespace.
	Client *clientv3.Client
	IPAM   ipam.Store
	Alloc  *ipam.Allocator
	// Pool4 is the shipped pool; Pool6 the dual-stack edit's, invalid
	// unless dual-stack.
	Pool4, Pool6 netip.Prefix
}

// New starts etcd on u, puts the cluster pools there and prepares the
// config every node's agent installs: the ConfigMap's conflist as
// shipped, with the dual-stack edit it documents when o.DualStack is set.
func New(t testing.TB, u *e2enet.Underlay, mode route.Mode, o Options) *Cluster {
	t.Helper()
	c := &Cluster{Cluster: e2enet.New(t, u, mode)}
	c.Store = "etcd://" + startEtcd(t, u)
	conf := shippedConflist(t, c.Store)
	if o.DualStack {
		var err error
		if conf, err = withIPv6Pool(conf, netip.MustParsePrefix(PodPool6)); err != nil {
			t.Fatalf("the ConfigMap's dual-stack edit: %v", err)
		}
	}
	network, err := parseNetwork(conf)
	if err != nil {
		t.Fatalf("%s: %v\n%s", shippedConfKey, err, conf)
	}
	c.Pool4, c.Pool6 = network.pools["default"], network.pools["default6"]
	if !c.Pool4.Addr().Is4() || o.DualStack != c.Pool6.IsValid() {
		t.Fatalf("%s: pools %v: want default (IPv4) and, dual-stack only, default6", shippedConfKey, network.pools)
	}
	c.Network = e2enet.Network{Name: network.name, Exclude: network.exclude}
	// The agent installs the file under its own name, as the DaemonSet
	// mounts the ConfigMap's key.
	c.NetConf = filepath.Join(c.Dir, shippedConfKey)
	if err := os.WriteFile(c.NetConf, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--store", c.Store}
	if o.LeaseTTL != 0 {
		flags = append(flags, "--lease-ttl", o.LeaseTTL.String())
	}
	c.AgentFlags = func(*e2enet.Node) []string { return flags }
	s, cli, err := kvstore.Open(context.Background(), c.Store, kvstore.Options{Dialer: e2enet.DialerIn(u.Hub.Path)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c.Client, c.IPAM = cli, s
	c.Alloc = ipam.New(s, ipam.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, cidr := range network.pools {
		if err := c.Alloc.PutPool(ctx, ipam.Pool{Name: name, CIDR: cidr}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// Pools are the cluster pools, IPv4 first: what a node's pods take their
// addresses from (e2enet.Cluster.AddNode's pools).
func (c *Cluster) Pools() []netip.Prefix {
	if c.Pool6.IsValid() {
		return []netip.Prefix{c.Pool4, c.Pool6}
	}
	return []netip.Prefix{c.Pool4}
}

// BlocksOf returns the blocks node's IPAM index routes to it.
func (c *Cluster) BlocksOf(node string) []netip.Prefix {
	t := c.T
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := c.IPAM.Get(ctx, ipam.Keys{}.Node(node))
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

// WaitBlockRoutes waits until every node in on has (want) or lacks
// (!want) a route to every block of node of, and returns how long it
// took.
func (c *Cluster) WaitBlockRoutes(of string, on []*e2enet.Node, want bool, timeout time.Duration) time.Duration {
	c.T.Helper()
	return c.WaitRoutes(of, c.BlocksOf(of), on, want, timeout)
}

// NodeRecord reads a node's record from the store.
func (c *Cluster) NodeRecord(name string) clusterstate.NodeRecord {
	t := c.T
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := c.IPAM.Get(ctx, clusterstate.NodeKey(ipam.DefaultPrefix, name))
	if err != nil {
		t.Fatal(err)
	}
	var rec clusterstate.NodeRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}
