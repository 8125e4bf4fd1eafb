package etcdgw

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipam/ipamtest"
	"github.com/podnet/podnet/ipam/store/etcd/etcdtest"
	"github.com/podnet/podnet/ipam/store/storetest"
)

func newStore(t *testing.T, c *etcdtest.Cluster) ipam.Store {
	t.Helper()
	s, err := New(Options{Endpoints: c.Endpoints(), DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreSuite(t *testing.T) {
	c := etcdtest.Start(t, 1)
	storetest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, c) })
}

func TestAllocatorSuite(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ipamtest.Run(t, func(t *testing.T) ipam.Store { return newStore(t, c) }, ipamtest.Options{})
}

func TestFailoverAndUnavailable(t *testing.T) {
	c := etcdtest.Start(t, 3)
	s := newStore(t, c)
	ctx := context.Background()
	if _, err := s.Write(ctx, ipam.Write{Key: "/x", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	// The first endpoint goes away: requests move to the next.
	c.Stop(0)
	kv, err := s.Get(ctx, "/x")
	if err != nil || string(kv.Value) != "1" {
		t.Fatalf("after one member stopped: %+v %v", kv, err)
	}
	// Without a quorum: ErrUnavailable, which the allocator reports as
	// CNI code 11.
	c.Stop(1)
	tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = s.Write(tctx, ipam.Write{Key: "/y", ModRevision: ipam.AnyRevision, Value: []byte("2")})
	if !errors.Is(err, ipam.ErrUnavailable) {
		t.Fatalf("without quorum: %v", err)
	}
	c.Restart(1)
	c.Restart(0)
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"a": "b", "a\xff": "b", "": "\x00", "/podnet/v1/": "/podnet/v10"} {
		if got := string(prefixEnd(in)); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	if ep, err := parseEndpoint("https://10.0.0.1:2379"); err != nil || !ep.TLS || ep.HostPort != "10.0.0.1:2379" {
		t.Fatalf("%+v %v", ep, err)
	}
	for _, bad := range []string{"ftp://x:1", "http://:2379", "http://x:2379/prefix"} {
		if _, err := parseEndpoint(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
