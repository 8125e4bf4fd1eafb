package e2e

import (
	"testing"
	"time"

	"github.com/podnet/podnet/agent/route"
	"github.com/podnet/podnet/test/e2e/e2eetcd"
	"github.com/podnet/podnet/test/e2e/e2enet"
)

// leaseTTL is short so that a dead agent's node leaves within the test.
const leaseTTL = 2 * time.Second

// cluster is e2eetcd's cluster with the checks these tests make.
type cluster struct {
	*e2eetcd.Cluster
	t *testing.T
}

// newCluster starts etcd on u and prepares the config every node's agent
// installs: the ConfigMap's conflist as shipped, with the dual-stack edit
// it documents when dualStack is set.
func newCluster(t *testing.T, u *e2enet.Underlay, mode route.Mode, dualStack bool) *cluster {
	t.Helper()
	return &cluster{Cluster: e2eetcd.New(t, u, mode, e2eetcd.Options{DualStack: dualStack, LeaseTTL: leaseTTL}), t: t}
}

// addNode creates node i on the underlay; its pods take addresses from
// the cluster pools.
func (c *cluster) addNode(i int) *e2enet.Node {
	c.t.Helper()
	return c.AddNode(i, c.Pools()...)
}

// waitRoutes waits until every node in on has (want) or lacks (!want) a
// route to every block of node of, and returns how long it took.
func (c *cluster) waitRoutes(of string, on []*e2enet.Node, want bool, timeout time.Duration) time.Duration {
	c.t.Helper()
	return c.WaitBlockRoutes(of, on, want, timeout)
}

// checkTransport: from's route to a block of to goes the way mode says.
func (c *cluster) checkTransport(from, to *e2enet.Node, mode route.Mode) {
	c.t.Helper()
	rec := c.NodeRecord(to.Name)
	if !rec.LinkLocal6.IsLinkLocalUnicast() {
		c.t.Fatalf("node %s's record has no IPv6 link-local address: %+v", to.Name, rec)
	}
	c.CheckTransport(from, to, c.BlocksOf(to.Name), mode, rec.LinkLocal6)
}
