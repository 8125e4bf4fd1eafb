package etcdgw

import (
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/ipamtest"
	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
)

// TestQuorumFaults: one member of three stopped during allocations (the
// leader), then two, then both back, through the gateway client that the
// plugins use; see ipamtest.RunQuorumFaults.
func TestQuorumFaults(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ipamtest.RunQuorumFaults(t, c, func(t *testing.T) ipam.Store {
		s, err := New(Options{Endpoints: c.AllEndpoints(), DialTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
