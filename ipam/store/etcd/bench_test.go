package etcd

import (
	"fmt"
	"testing"

	"github.com/podnet/podnet/ipam/ipamtest"
	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
	"github.com/podnet/podnet/ipam/store/etcdconf"
)

func BenchmarkAutoAssign(b *testing.B) {
	c := etcdtest.Start(b, 1)
	s, err := New(Options{Cluster: etcdconf.Cluster{Endpoints: c.Endpoints()}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, workers := range []int{1, 100} {
		b.Run(fmt.Sprint("nodes=100/workers=", workers), func(b *testing.B) { ipamtest.BenchAutoAssign(b, s, 100, workers) })
	}
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprint("claim/existing=", n), func(b *testing.B) { ipamtest.BenchClaim(b, s, n) })
	}
}
