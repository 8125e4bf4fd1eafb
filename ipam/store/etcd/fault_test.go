package etcd

import (
	"testing"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/ipamtest"
	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
	"github.com/podnet/podnet/ipam/store/etcdconf"
)

// TestQuorumFaults: one member of three stopped during allocations (the
// leader), then two, then both back; see ipamtest.RunQuorumFaults.
func TestQuorumFaults(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ipamtest.RunQuorumFaults(t, c, func(t *testing.T) ipam.Store {
		s, err := New(Options{Cluster: etcdconf.Cluster{Endpoints: c.AllEndpoints()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
