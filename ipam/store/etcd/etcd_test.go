package etcd

import (
	"sync"
	"testing"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/ipamtest"
	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
	"github.com/podnet/podnet/ipam/store/etcdconf"
	"github.com/podnet/podnet/ipam/store/storetest"
)

// The suite writes under a prefix unique to each subtest, so one cluster
// per member count serves every test in the package; starting etcd is the
// slow part.
var (
	clusters   = map[int]*etcdtest.Cluster{}
	clustersMu sync.Mutex
)

func newStore(t *testing.T, members int) *Store {
	t.Helper()
	clustersMu.Lock()
	c := clusters[members]
	clustersMu.Unlock()
	if c == nil {
		t.Fatalf("no %d-member cluster", members)
	}
	s, err := New(Options{Cluster: etcdconf.Cluster{Endpoints: c.Endpoints()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func withCluster(t *testing.T, members int) {
	c := etcdtest.Start(t, members)
	clustersMu.Lock()
	clusters[members] = c
	clustersMu.Unlock()
	t.Cleanup(func() {
		clustersMu.Lock()
		delete(clusters, members)
		clustersMu.Unlock()
	})
}

func TestStore1Member(t *testing.T) {
	withCluster(t, 1)
	storetest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, 1) })
}

func TestStore3Members(t *testing.T) {
	withCluster(t, 3)
	storetest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, 3) })
}

func TestAllocatorSuite1Member(t *testing.T) {
	withCluster(t, 1)
	// The acceptance size: 100 nodes x 50 addresses against one etcd.
	ipamtest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, 1) }, ipamtest.Options{Nodes: 100, PerNode: 50})
}

func TestAllocatorSuite3Members(t *testing.T) {
	withCluster(t, 3)
	ipamtest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, 3) }, ipamtest.Options{})
}
